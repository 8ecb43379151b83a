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


@pytest.mark.parametrize("url, secret", [("postgresql://app:S3cr%t@db/kb", "S3cr%t"),
                                         ("host=db password=abc s3cret", "s3cret")])
def test_a_malformed_connection_string_is_reported_without_its_password(url, secret):
    """libpq's parse errors quote the token they stopped at: a raw % in a URL's password, or
    the second word of an unquoted one, reached the StoreError (and a replica's ConfigError)."""
    with pytest.raises(psycopg.ProgrammingError) as info:
        psycopg.conninfo.conninfo_to_dict(url)
    assert secret in str(info.value)
    assert secret not in str(translate(info.value))


def test_an_unreachable_replica_is_logged_without_its_password(caplog):
    """The log line kept what followed the URL's last "@": all of a key=value string, and a
    password given as a URL parameter."""
    import logging

    from kb_retriever.settings import Settings
    from kb_retriever.store.replicas import Replicas

    urls = ("host=r3 dbname=kb password=s3cret", "postgresql://r4:5433/kb?password=t0ken")
    replicas = Replicas(urls, Settings())
    log = logging.getLogger("kb_retriever.store.replicas")
    seen: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: seen.append(record.getMessage())  # type: ignore[method-assign]
    log.addHandler(handler)
    try:
        for replica in replicas._replicas:
            replicas.mark_down(replica)
    finally:
        log.removeHandler(handler)
    assert len(seen) == 2 and not any("s3cret" in m or "t0ken" in m for m in seen), seen
    assert "r3" in seen[0] and "r4:5433/kb" in seen[1]
