"""Connection pools and the one boundary where driver errors become :class:`StoreError`."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Iterator
from typing import Any, TypeVar

import psycopg
from pgvector.psycopg import register_vector, register_vector_async
from psycopg import sql
from psycopg.pq import TransactionStatus
from psycopg_pool import AsyncConnectionPool, ConnectionPool, PoolClosed, PoolTimeout

from ..errors import (
    ConfigError,
    InputError,
    KbError,
    QueryTimeoutError,
    SchemaError,
    StoreError,
    UnavailableError,
    redact,
)
from ..settings import Settings

logger = logging.getLogger(__name__)
T = TypeVar("T")

# Per-connection GUCs (reference/postgres-performance.md §3.1): ef_search must be >= the
# candidate count or the HNSW arm returns fewer rows; relaxed_order keeps filtered searches
# complete (pgvector >= 0.8).
_CONNECT_TIMEOUT_S = 10


def _gucs(settings: Settings) -> list[tuple[str, str]]:
    return [
        ("hnsw.ef_search", str(settings.hnsw_ef_search)),
        ("hnsw.iterative_scan", "relaxed_order"),
        ("statement_timeout", str(settings.statement_timeout_ms)),
    ]


def _configure_sql(settings: Settings) -> list[tuple[str, list[str]]]:
    """The session's settings; none behind a transaction pooler, where a session's ``SET``
    stays on whichever server connection ran it, for the pooler's other clients: each read
    sets them for its own transaction instead (``local_settings``)."""
    if settings.transaction_pooler:
        return []
    return [("SELECT set_config(%s, %s, false)", [k, v]) for k, v in _gucs(settings)]


def local_settings(settings: Settings, *, timeout: bool = True) -> sql.Composed:
    """One statement that sets the session's settings for the current transaction only
    (``timeout=False``: all but ``statement_timeout``, which a borrowed pool's owner sets)."""
    return sql.SQL("SELECT {}").format(sql.SQL(", ").join(
        sql.SQL("set_config({}, {}, true)").format(sql.Literal(k), sql.Literal(v))
        for k, v in _gucs(settings) if timeout or k != "statement_timeout"))


def pooler_kwargs(settings: Settings) -> dict[str, Any]:
    """Connection arguments: behind a transaction pooler, no prepared statements (a statement
    prepared on one server connection is unknown to the next, or names another one there)."""
    return {"prepare_threshold": None} if settings.transaction_pooler else {}


def make_pool(url: str, settings: Settings, *, vector_ready: bool,
              conn_kwargs: dict[str, Any] | None = None) -> ConnectionPool:
    """A sync pool whose connections have pgvector types registered and our GUCs set."""

    def configure(conn: psycopg.Connection[Any]) -> None:
        conn.autocommit = True
        if vector_ready:
            register_vector(conn)
        for statement, params in _configure_sql(settings):
            conn.execute(statement, params)

    pool = ConnectionPool(
        url,
        min_size=settings.pool_min_size,
        max_size=settings.pool_max_size,
        configure=configure,
        # No check on checkout (a round trip on every search): reads retry once on a fresh
        # connection when the server dropped theirs (store/reader.py), and writes check the
        # pool first (store.pools.Pools.checked).
        timeout=settings.pool_timeout_s,  # how long a caller waits for a connection
        # A lost connection is replaced for as long, then on a caller's demand: psycopg_pool
        # tries for five minutes by default, its attempts ever further apart, and a server
        # back (or started again) waited up to a minute for the next one.
        reconnect_timeout=settings.pool_timeout_s,
        kwargs={"connect_timeout": _CONNECT_TIMEOUT_S, **(conn_kwargs or {})},
        open=False,
        name="kb-retriever",
    )
    return pool


def make_async_pool(url: str, settings: Settings,
                    conn_kwargs: dict[str, Any] | None = None) -> AsyncConnectionPool:
    """The async twin of :func:`make_pool`, of a fixed size: ``KB_POOL_MAX_SIZE`` connections,
    all made when it opens (``open(wait=True)``), so it never grows.

    A pool that grows connects in a task of the caller's event loop; when the loop ends with
    that connect under way (``asyncio.run`` of a few searches at once), psycopg_pool takes
    the cancelled connect for a failed one and schedules it again, and ``asyncio.run`` never
    returns (tests/db/test_close.py)."""

    async def configure(conn: psycopg.AsyncConnection[Any]) -> None:
        await conn.set_autocommit(True)
        await register_vector_async(conn)
        for statement, params in _configure_sql(settings):
            await conn.execute(statement, params)

    return AsyncConnectionPool(
        url,
        min_size=settings.pool_max_size,
        max_size=settings.pool_max_size,
        configure=configure,
        timeout=settings.pool_timeout_s,
        reconnect_timeout=settings.pool_timeout_s,  # as make_pool's
        kwargs={"connect_timeout": _CONNECT_TIMEOUT_S, **(conn_kwargs or {})},
        open=False,
        name="kb-retriever-async",
    )


# Class 40 (transaction rollback): psycopg derives these from OperationalError, as it does a
# lost connection.
_ABORTED = (psycopg.errors.TransactionRollback, psycopg.errors.SerializationFailure,
            psycopg.errors.DeadlockDetected)


def loop_ended(owner: asyncio.AbstractEventLoop | None, loop: asyncio.AbstractEventLoop) -> bool:
    """Whether an async pool opened in ``owner``'s loop is to be replaced for ``loop``: its loop
    has ended (False for the same loop, or none). A :class:`ConfigError` while ``owner`` still
    runs in another thread: one loop at a time owns an async pool and its lock."""
    if owner is None or owner is loop:
        return False
    if owner.is_running() and not owner.is_closed():
        raise ConfigError(
            "this knowledge base's async pool belongs to an event loop that is still running in "
            "another thread; give each event loop its own KnowledgeBase (or call the sync "
            "methods from the other threads)")
    return True


def finish_idle(pool: Any) -> None:
    """Close the sockets of an async pool's idle connections without its event loop (gone, or
    another thread's). psycopg_pool keeps them in ``_pool``; connections in use belong to their
    caller."""
    for conn in list(getattr(pool, "_pool", ())):
        conn.pgconn.finish()


async def aput_back(pool: Any, held: list[Any]) -> None:
    """Give the connections in ``held`` back to the async ``pool`` (emptying the list), even
    when the caller is cancelled meanwhile. psycopg_pool's ``putconn``, cancelled while it
    waits for the pool's lock, drops the connection: searches under a ``wait_for`` bound
    lost one of a pool of 4 every few hundred timeouts, until none was left. The return runs
    in a task of its own; a cancellation that comes meanwhile is raised once it has ended."""
    if not held:
        return
    conns = list(held)
    held.clear()

    async def put_all() -> None:
        for conn in conns:
            await pool.putconn(conn)

    await finish(put_all())


async def finish(work: Awaitable[T]) -> T:
    """Await ``work`` to its end even when the caller is cancelled meanwhile (in a task of its
    own; the cancellation is raised once it has ended): a return of connections or a close
    cut half-way leaves them behind."""
    task = asyncio.ensure_future(work)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        await asyncio.wait([task])  # cancelled again: the task still ends on its own
        raise


@contextlib.contextmanager
def live_connection(pool: Any, first: str, params: list[str]) -> Iterator[tuple[Any, Any]]:
    """A connection of ``pool`` and the row its ``first`` statement returned. A write is not
    retried, so it must not start on a connection the server has dropped (a restart, a
    pooler's, an ``idle_session_timeout``): ``first`` runs again on another connection while
    the one it ran on is broken, up to once for each connection the pool may hold (the pool
    discards a broken one). Searches retry instead. ``pool.check()``, which this replaces,
    pinged every idle connection and took them all out of the pool meanwhile."""
    for attempt in range(pool.max_size + 1):
        with pool.connection() as conn:
            try:
                row = conn.execute(first, params).fetchone()
            except psycopg.OperationalError:
                if conn.broken and attempt < pool.max_size:
                    continue
                raise
            except BaseException:  # a Ctrl-C: what ``first`` set may hold, and nothing puts
                conn.close()  # it back; the pool discards a closed connection
                raise
            yield conn, row
            return


@contextlib.contextmanager
def unpooled(pool: Any) -> Iterator[Any]:
    """A new connection to ``pool``'s server (its conninfo and connection arguments; a
    borrowed pool's own, without what its ``configure`` callback would set), outside the pool
    and closed after: for the check of a commit in doubt. Its writer still holds the broken
    pooled connection, and a server restart cuts the idle ones too: with every connection of
    the pool held by writers in doubt, a pooled one waited out ``pool_timeout_s`` and the
    committed writes were reported failed. Then the pool drops its idle connections that the
    server cut too (``check``), as a pooled read after a dropped connection does
    (``store.reader``)."""
    inner = getattr(pool, "pool", pool)
    with psycopg.connect(inner.conninfo, **{**inner.kwargs, "autocommit": True}) as conn:
        yield conn
    pool.check()


@contextlib.asynccontextmanager
async def alive_connection(pool: Any, first: str, params: list[str]
                           ) -> AsyncIterator[tuple[Any, Any]]:
    """The async twin of :func:`live_connection`."""
    for attempt in range(pool.max_size + 1):
        async with aconnection(pool) as conn:
            try:
                row = await (await conn.execute(first, params)).fetchone()
            except psycopg.OperationalError:
                if conn.broken and attempt < pool.max_size:
                    continue
                raise
            except BaseException:  # a cancellation (see the sync twin)
                await finish(conn.close())
                raise
            yield conn, row
            return


def run_or_close(conn: Any, query: str, params: list[str]) -> None:
    """Run ``query`` on a pooled ``conn``, or close it when stopped half-way (a Ctrl-C: psycopg
    cancels the statement on the server and raises): the pool would keep the connection idle
    without what the statement set, and it discards a closed one. The sync twin of
    :func:`finish`, for a statement that restores a connection's settings."""
    try:
        conn.execute(query, params)
    except BaseException:
        conn.close()
        raise


@contextlib.contextmanager
def settling(conn: Any) -> Iterator[None]:
    """Around what puts a connection back after a write (its timeout, the WAL mark): the
    connection lost meanwhile is closed, not an error. What the write committed stays
    committed, and the error would report it failed."""
    try:
        yield
    except psycopg.OperationalError as exc:
        logger.debug("a connection lost after its write: %s", exc)
        conn.pgconn.finish()  # the pool discards a closed connection (an async one too)


@contextlib.asynccontextmanager
async def aconnection(pool: Any) -> AsyncIterator[Any]:
    """``pool.connection()`` whose connection goes back whatever cancels the caller
    (:func:`aput_back`)."""
    conn = await pool.getconn()
    try:
        async with conn:  # commit or roll back, as the pool's own context manager does
            yield conn
    finally:
        await aput_back(pool, [conn])


def translate(exc: BaseException) -> KbError:
    """Map a driver exception to our tree (messages redacted)."""
    if isinstance(exc, KbError):
        return exc
    msg = redact(str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__)
    if isinstance(exc, psycopg.errors.QueryCanceled):
        return QueryTimeoutError("the database cancelled the statement (its statement_timeout, "
                                 f"KB_STATEMENT_TIMEOUT_MS, or a cancel request); nothing of "
                                 f"its transaction was saved: {msg}")
    if isinstance(exc, psycopg.errors.FeatureNotSupported) and "cached plan" in msg:
        return SchemaError("the database's tables changed under this process (another "
                           "kb-retriever, a newer one?, migrated the schema); restart it: "
                           f"{msg}")
    if isinstance(exc, psycopg.errors.UndefinedFile | psycopg.errors.FeatureNotSupported):
        return SchemaError(f"database feature missing: {msg}")
    if isinstance(exc, psycopg.errors.DataException):
        return InputError(f"the database rejected a value: {msg}")
    if isinstance(exc, PoolTimeout):
        return UnavailableError(f"no database connection available: {msg}")
    if isinstance(exc, PoolClosed):  # a call that raced close(): the server is not the cause
        return StoreError(f"the knowledge base was closed during the call: {msg}")
    if isinstance(exc, _ABORTED):  # OperationalErrors, but no lost server: the transaction was
        # aborted (deadlock victim, serialization failure) and changed nothing; a write has
        # run it store.retry.ATTEMPTS times already
        return StoreError(f"the database aborted the transaction, nothing of it was saved "
                          f"(run it again): {msg}")
    if isinstance(exc, psycopg.OperationalError | OSError):
        return UnavailableError(f"the database could not be reached: {msg}")
    return StoreError(f"database error: {msg}")


@contextlib.contextmanager
def translated() -> Iterator[None]:
    """Translate driver errors raised inside the block."""
    try:
        yield
    except KbError:
        raise
    except (psycopg.Error, PoolTimeout, OSError) as exc:
        raise _interrupt(exc) or translate(exc) from None


@contextlib.asynccontextmanager
async def atranslated() -> AsyncIterator[None]:
    try:
        yield
    except KbError:
        raise
    except (psycopg.Error, PoolTimeout, OSError) as exc:
        raise _interrupt(exc) or translate(exc) from None


def _interrupt(exc: BaseException) -> BaseException | None:
    """The interrupt (Ctrl-C, a cancellation) that a driver error masks, if any: one that
    stops a statement half-sent makes the driver's clean-up fail too ("cannot exit pipeline
    mode while busy"), and that error, translated, read as a lost server."""
    seen: set[int] = set()
    context = exc.__context__
    while context is not None and id(context) not in seen:
        if not isinstance(context, Exception):  # KeyboardInterrupt, SystemExit, CancelledError
            return context
        seen.add(id(context))
        context = context.__context__
    return None


def is_retryable(exc: BaseException | None) -> bool:
    """A dropped connection (not a query error): safe to retry an idempotent read once."""
    # PoolTimeout is an OperationalError too, but it already waited the pool's whole timeout
    # for a connection: a retry would only double the wait on an unreachable server.
    return isinstance(exc, psycopg.OperationalError) and not isinstance(
        exc, (psycopg.errors.QueryCanceled, PoolTimeout, PoolClosed, *_ABORTED))


def in_transaction(conn: Any) -> bool:
    """Whether a cancellation left ``conn`` in its transaction (its rollback cut short): the
    timeout set back inside it would be undone by the pool's rollback, and the next search
    would run under the ingest's ten minutes."""
    return conn.pgconn.transaction_status in (TransactionStatus.INTRANS,
                                              TransactionStatus.INERROR)


def usable(conn: Any) -> bool:
    """Whether a statement may run on ``conn`` now: a Ctrl-C or a cancellation can stop a call
    half-way, and a statement sent then fails (masking the interrupt); the pool discards such
    a connection when it comes back."""
    return not conn.broken and conn.pgconn.transaction_status != TransactionStatus.ACTIVE
