"""store.connection.translate: a driver error becomes the error it is (messages redacted)."""

from __future__ import annotations

import psycopg
import pytest

from kb_retriever.errors import StoreError, UnavailableError
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
