"""store.connection.translate: a driver error becomes the error it is (messages redacted)."""

from __future__ import annotations

import psycopg
import pytest
from psycopg_pool import PoolClosed

from kb_retriever.errors import SchemaError, StoreError, UnavailableError
from kb_retriever.store.connection import is_retryable, translate


@pytest.mark.parametrize("exc", [psycopg.errors.DeadlockDetected("deadlock detected"),
                                 psycopg.errors.SerializationFailure("could not serialize")])
def test_an_aborted_transaction_is_no_unreachable_server(exc):
    """A deadlock victim or a serialization failure changed nothing and the server is up: a
    StoreError that says so, not the UnavailableError whose write outcome may be unknown, and
    no read retry on a fresh connection (it was not dropped)."""
    err = translate(exc)
    assert type(err) is StoreError
    assert "aborted the transaction, nothing of it was saved" in str(err)
    assert not is_retryable(exc)


def test_a_lost_connection_is_unavailable_and_retryable():
    exc = psycopg.OperationalError("server closed the connection unexpectedly")
    assert isinstance(translate(exc), UnavailableError)
    assert is_retryable(exc)


def test_tables_changed_under_the_process_say_so():
    """A newer kb-retriever migrated the schema while this process ran: its prepared statements
    fail with "cached plan must not change result type", which read as a missing feature."""
    err = translate(psycopg.errors.FeatureNotSupported("cached plan must not change result type"))
    assert type(err) is SchemaError
    assert "tables changed under this process" in str(err) and "restart" in str(err)
    other = translate(psycopg.errors.FeatureNotSupported("hnsw does not support that"))
    assert str(other).startswith("database feature missing")


def test_a_call_that_raced_close_says_so():
    """It read "the database could not be reached" (PoolClosed is an OperationalError), and was
    retried on the closed pool."""
    exc = PoolClosed("the pool 'kb-retriever-async' is already closed")
    err = translate(exc)
    assert type(err) is StoreError and "closed during the call" in str(err)
    assert not is_retryable(exc)
