"""The connections of one knowledge base: its sync pool, its async pool, the legs' threads.

A borrowed pool (``KnowledgeBase(pool=...)``) is used and never closed; for the other flavour
a small pool of our own opens to the same server. An async pool belongs to the event loop that
opened it: called from another loop, a fresh one opens for that loop. Closing works in every
loop state (``close()`` inside a running loop, after ``asyncio.run`` returned, from a thread).

A child forked after the pools opened leaves the parent's connections to the parent and opens
its own; async twins' writes run in worker threads that closing waits for.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from ..errors import ConfigError, StoreError, UnavailableError
from ..settings import Settings
from . import connection, distribution, schema, spaces
from .borrowed import BorrowedAsyncPool, BorrowedPool
from .connection import aconnection, atranslated, finish_idle, make_async_pool, make_pool, translated
from .replicas import WRITTEN, Replicas, Target
from .session import AsyncSession, Session
from .thread_writes import ThreadWrites

logger = logging.getLogger(__name__)

__all__ = ["Pools"]


_TIMEOUT = "SELECT set_config('statement_timeout', %s, false)"
# The write's timeout, and the one it replaces (a borrowed pool's is its owner's: put back).
_WRITE_TIMEOUT = ("SELECT current_setting('statement_timeout') AS before, "
                  "set_config('statement_timeout', %s, false)")
# The primary's WAL position after a write, for ``consistent`` reads (replicas.WRITTEN).
_WAL_POSITION = "SELECT pg_current_wal_lsn()::text"
# What a forked child inherited: the parent's, never closed (nor collected) in the child.
_INHERITED: list[Any] = []


def _first_write(session: bool, settings: Settings) -> tuple[str, list[str]]:
    """A write's first statement and its parameters: the ingest's statement timeout (which
    returns the search's, to put back), or behind a transaction pooler, where the server's
    timeout holds, a statement that only shows the connection answers."""
    if session:
        return _WRITE_TIMEOUT, [str(settings.ingest_statement_timeout_ms)]
    return "SELECT NULL", []


class Pools:
    """Opens, hands out and closes a knowledge base's connections (no I/O until :meth:`open`)."""

    def __init__(self, settings: Settings, *, pool: ConnectionPool | None,
                 async_pool: AsyncConnectionPool | None) -> None:
        if pool is not None and not isinstance(pool, ConnectionPool):
            raise ConfigError(f"pool must be a psycopg_pool.ConnectionPool, got {type(pool).__name__}")
        if async_pool is not None and not isinstance(async_pool, AsyncConnectionPool):
            raise ConfigError("async_pool must be a psycopg_pool.AsyncConnectionPool, got "
                              f"{type(async_pool).__name__}")
        self.settings = settings
        self._given_pool, self._given_apool = pool, async_pool
        # The server of a borrowed pool, for the pool of the other flavour we may open
        # (a pool built with a kwargs callable has no fixed kwargs to copy: none are taken).
        given = pool if pool is not None else async_pool
        kwargs = getattr(given, "kwargs", None)
        self._conn_kwargs: dict[str, Any] = {**(kwargs if isinstance(kwargs, dict) else {}),
                                             **connection.pooler_kwargs(settings)}
        if self._conn_kwargs.get("row_factory") is not None:  # our statements read tuples
            raise ConfigError("a borrowed pool whose connections have a row_factory is not "
                              "supported; set the row factory on your cursors instead")
        self._url: str | None = None
        self._pool: Any = None
        self._apool: Any = None
        self._opening: asyncio.Task[None] | None = None  # the async pool being opened
        self._apool_loop: asyncio.AbstractEventLoop | None = None
        self._loop_claim = threading.Lock()
        self._threads: ThreadPoolExecutor | None = None  # runs a search's second leg
        self.distributed = False  # a Citus coordinator (known once open)
        self._space: spaces.Space | None = None  # the embedder's (known once open)
        self.replicas = Replicas(settings.replica_urls, settings)
        self._closing: asyncio.Task[None] | None = None  # an async pool closing in its loop
        # Starts the embedded server again if stopped (None: not ours to start); True if it did.
        self.restart: Callable[[], bool] | None = None
        self._pid = os.getpid()
        self.thread_writes = ThreadWrites()  # the async twins' writes, run in threads

    def borrowed_conninfo(self) -> str | None:
        """The server of a borrowed pool, or None when the pools are our own."""
        given = self._given_pool if self._given_pool is not None else self._given_apool
        if given is None:
            return None
        if not isinstance(given.conninfo, str):
            raise ConfigError("a borrowed pool needs a conninfo string (not a callable)")
        return given.conninfo

    @property
    def is_open(self) -> bool:
        return self._pool is not None

    @property
    def url(self) -> str:
        if self._url is None:
            raise StoreError("the knowledge base is not open; call open() or use `with`")
        return self._url

    @property
    def opened_url(self) -> str | None:
        """The primary's URL once open, else None (its read caches' key: ``read_cache``)."""
        return self._url

    def open(self, url: str, choices: schema.Choices) -> None:
        """Migrate the database at ``url`` and fix or check its ``choices`` (one connection),
        then open the sync pool, and the replicas' pools. With the primary unreachable and
        replicas configured, the knowledge base opens for reads: the schema is checked on a
        replica, and the primary's pool connects when the primary comes back."""
        try:
            pool = self._open_primary(url, choices)
        except UnavailableError:
            if not self.replicas:
                raise
            logger.warning("the primary is unreachable: open for reads from the replicas")
            with translated():
                self.distributed, self._space = self.replicas.check_schema(choices,
                                                                           self._conn_kwargs)
                pool = make_pool(url, self.settings, vector_ready=True,
                                 conn_kwargs=self._conn_kwargs)
                pool.open(wait=False)
        self._url, self._pool = url, pool
        self.replicas.open(self._conn_kwargs)

    def _open_primary(self, url: str, choices: schema.Choices) -> Any:
        with translated():
            migrating = (self._given_pool.connection() if self._given_pool is not None else
                         psycopg.connect(url, **{"connect_timeout": 10, **self._conn_kwargs,
                                                 "autocommit": True}))
            with migrating as conn:
                self._space = schema.prepare(conn, choices, self.settings)
                self.distributed = distribution.is_citus(conn)
            if self._given_pool is not None:
                return BorrowedPool(self._given_pool, self.settings)
            pool = make_pool(url, self.settings, vector_ready=True, conn_kwargs=self._conn_kwargs)
            pool.open(wait=True, timeout=30)
            return pool

    @property
    def space(self) -> spaces.Space:
        """The embedder's space: its model's row and index (the knowledge base must be open)."""
        if self._space is None:
            raise StoreError("the knowledge base is not open (or was opened to list and delete "
                             "only); call open() or use `with`")
        return self._space

    def read_target(self, consistent: bool = False) -> Target:
        """The server for a read: a healthy replica in turn (past this process's last write
        when ``consistent``), else the primary."""
        self._check_process()
        if self.replicas:
            replica = self.replicas.pick(WRITTEN.get(self._url) if consistent else None,
                                         self._primary_position)
            if replica is not None:
                return Target(replica.pool, replica.label, replica)
        return Target(self.sync(), "primary" if self.replicas else None)

    async def aread_target(self, consistent: bool = False) -> Target:
        """The async twin of :meth:`read_target` (the replica's async pool)."""
        self._check_process()
        if self.replicas:
            replica = await asyncio.to_thread(self.replicas.pick,
                                               WRITTEN.get(self._url) if consistent else None,
                                               self._primary_position)
            if replica is not None:
                apool = await self.replicas.apool(replica, self._conn_kwargs)
                if apool is not None:  # else it could not connect: marked down, the primary reads
                    return Target(apool, replica.label, replica)
        return Target(await self.asynchronous(), "primary" if self.replicas else None)

    def _primary_position(self) -> str | None:
        """The primary's WAL position now (None: not within the replicas' connect timeout)."""
        try:
            with self.sync().connection(timeout=self.settings.replica_connect_timeout_s) as conn:
                row = conn.execute(_WAL_POSITION).fetchone()
        except (psycopg.Error, OSError):  # PoolTimeout is a psycopg.Error: the primary down
            return None
        return str(row[0]) if row else None

    def revives(self, target: Target) -> bool:
        """Whether a read of ``target`` may start its server again: the primary, when it is
        the embedded server (``restart``)."""
        return target.replica is None and self.restart is not None

    def revived(self) -> bool:
        """After the primary could not be reached: start the embedded server again if it
        stopped, and replace the pool's dead connections; True when it was started (a search
        then runs again)."""
        if self.restart is None or self._pool is None or not self.restart():
            return False
        logger.warning("the embedded PostgreSQL had stopped: started it again")
        with translated():
            self._pool.check()
        return True

    async def arevived(self) -> bool:
        """The async twin of :meth:`revived` (the async pool of the running loop checked too)."""
        if not await asyncio.to_thread(self.revived):
            return False
        if self._apool is not None and self._apool_loop is asyncio.get_running_loop():
            async with atranslated():
                await self._apool.check()
        return True

    def sync(self) -> Any:
        """The sync pool (the knowledge base must be open)."""
        self._check_process()
        if self._pool is None:
            raise StoreError("the knowledge base is not open; call open() or use `with`")
        return self._pool

    @contextlib.contextmanager
    def session(self, target: Target | None = None, *,
                unpooled: bool = False) -> Iterator[Session]:
        """A pooled connection's :class:`~kb_retriever.store.session.Session`, for reads (on
        ``target``'s server, else the primary); ``unpooled``: a new connection's, outside the
        pool (``connection.unpooled``)."""
        pool = self.sync() if target is None else target.pool
        with translated(), (connection.unpooled(pool) if unpooled else pool.connection()) as conn:
            yield Session(conn, distributed=self.distributed, space=self._space)

    @contextlib.asynccontextmanager
    async def asession(self, target: Target | None = None) -> AsyncIterator[AsyncSession]:
        """The async twin of :meth:`session`."""
        pool = await self.asynchronous() if target is None else target.pool
        async with atranslated(), aconnection(pool) as conn:
            yield AsyncSession(conn, distributed=self.distributed)

    @contextlib.contextmanager
    def writing(self) -> Iterator[Session]:
        """A session for writes (on a live connection: ``connection.live_connection``), its
        statement timeout the ingest's (``KB_INGEST_STATEMENT_TIMEOUT_MS``: a large document's
        COPY, or a writer queued behind another writer of the same document, may take longer
        than a search may), given back with the search's."""
        session = not self.settings.transaction_pooler  # else the server's timeout holds
        first, params = _first_write(session, self.settings)
        with translated(), connection.live_connection(self.sync(), first, params) as (conn, row):
            before = row[0] if session and row else None
            try:
                yield Session(conn, distributed=self.distributed, space=self._space)
            finally:  # a Ctrl-C in the reset closes the connection rather than leave it so
                if connection.usable(conn):
                    with connection.settling(conn):
                        if connection.in_transaction(conn):
                            conn.rollback()
                        if session:
                            connection.run_or_close(conn, _TIMEOUT, [
                                str(before or self.settings.statement_timeout_ms)])
                        if self.replicas and (row := conn.execute(_WAL_POSITION).fetchone()):
                            WRITTEN.advance(self.url, str(row[0]))  # for ``consistent`` reads

    @contextlib.asynccontextmanager
    async def awriting(self) -> AsyncIterator[AsyncSession]:
        """The async twin of :meth:`writing`."""
        pool = await self.asynchronous()
        session = not self.settings.transaction_pooler
        first, params = _first_write(session, self.settings)
        async with atranslated(), connection.alive_connection(pool, first, params) as (conn, row):
            before = row[0] if session and row else None
            try:  # a cancellation may come at any await: the timeout is put back whatever
                yield AsyncSession(conn, distributed=self.distributed)
            finally:  # the reset runs to its end, cancelled or not: cut half-way, the
                if connection.usable(conn):  # server may keep the ingest's timeout on an idle connection
                    with connection.settling(conn):
                        if connection.in_transaction(conn):
                            await connection.finish(conn.rollback())
                        if session:
                            await connection.finish(conn.execute(_TIMEOUT, [
                                before or str(self.settings.statement_timeout_ms)]))
                        if self.replicas and (row := await (await conn.execute(_WAL_POSITION)).fetchone()):
                            WRITTEN.advance(self.url, str(row[0]))

    async def asynchronous(self) -> Any:
        """The async pool of the running event loop, opened on first use (never once closed:
        a call after :meth:`close` is an error, as a sync one is)."""
        self.sync()  # open, and in this process
        if self._given_apool is not None:  # the caller's, on the caller's loop
            if self._apool is None:
                self._apool = BorrowedAsyncPool(self._given_apool, self.settings)
            return self._apool
        loop = asyncio.get_running_loop()
        with self._loop_claim:  # one loop at a time owns the pool (and its lock)
            owner = self._apool_loop
            if connection.loop_ended(owner, loop):
                logger.debug("event loop changed: opening a new async pool")
                self._apool = None
            if owner is not loop:
                self._opening, self._apool_loop = None, loop
        if self._apool is None:
            if self._opening is None or self._opening.done():
                self._opening = loop.create_task(self._open_async_pool())
            # Shielded: a caller cancelled meanwhile leaves the opening to the next caller
            # (cancelled, it threw the half-open pool away, and short timeouts never opened one).
            await asyncio.shield(self._opening)
        return self._apool

    async def _open_async_pool(self) -> None:
        pool = make_async_pool(self.url, self.settings, self._conn_kwargs)
        try:
            async with atranslated():
                await pool.open(wait=True, timeout=30)
            self.sync()  # closed meanwhile: the same error as a sync call's
        except BaseException:
            await pool.close()
            raise
        self._apool = pool

    async def abandon(self, close: Callable[[], None]) -> None:
        """After ``async with`` failed to open (cancelled): ``close`` in a thread (it waits for an
        open under way in its thread) once the async pool being opened is open or has failed."""
        if self._opening is not None:
            await asyncio.wait([self._opening])
        await asyncio.to_thread(close)

    def executor(self) -> ThreadPoolExecutor:
        """The worker threads of parallel legs, started on first use."""
        self._check_process()
        if self._threads is None:
            self._threads = ThreadPoolExecutor(max_workers=self.settings.pool_max_size,
                                               thread_name_prefix="kb-retriever-leg")
        return self._threads

    def close(self) -> None:
        """Close both pools and the legs' threads (a borrowed pool stays open)."""
        if self._apool is not None:
            self._close_async_pool()
        if self._pool is not None:
            self._pool.close()
            self._pool = None
        if self._threads is not None:
            self._threads.shutdown(wait=True)
            self._threads = None
        self.replicas.close()

    async def aclose(self) -> None:
        await asyncio.to_thread(self.thread_writes.wait)
        if self._apool is not None:
            if self._given_apool is None and self._apool_loop is not asyncio.get_running_loop():
                self._close_async_pool()  # another loop's, ended or running: as close() does
            else:
                await self._apool.close()
                self._apool = self._apool_loop = None
        await self.replicas.aclose()
        self.close()

    def _check_process(self) -> None:
        """In a child forked after the pools opened: the parent's connections, threads and
        locks are the parent's, left alone (closing them ends the parent's sessions), and this
        process opens its own. Before, the child hung on the legs' threads or broke the
        parent's protocol state ("prepared statement already exists")."""
        if self._pid == os.getpid():
            return
        if self.restart is not None:  # the embedded server's: this process becomes its user
            self.restart()  # (when it raises, the next call tries again: nothing replaced yet)
        self._pid = os.getpid()
        _INHERITED.append((self._pool, self._apool, self._threads, self.replicas))
        self._loop_claim, self.thread_writes = threading.Lock(), ThreadWrites()
        self._apool = self._apool_loop = self._opening = self._threads = self._closing = None
        self.replicas = Replicas(self.settings.replica_urls, self.settings)
        if self._pool is not None:
            if not isinstance(self._pool, BorrowedPool):  # a borrowed one is its owner's
                self._pool = make_pool(self.url, self.settings, vector_ready=True,
                                       conn_kwargs=self._conn_kwargs)
                self._pool.open(wait=False)
            self.replicas.open(self._conn_kwargs)

    def _close_async_pool(self) -> None:
        pool, loop = self._apool, self._apool_loop
        self._apool = self._apool_loop = self._opening = None
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if loop is not None and not loop.is_closed():
            if loop is running:  # close() inside the loop: it cannot wait for pool.close()
                finish_idle(pool)  # asyncio.run would cancel a pending close at its end
                self._closing = loop.create_task(pool.close())
                return
            if not loop.is_running():
                loop.run_until_complete(pool.close())
                return
            asyncio.run_coroutine_threadsafe(pool.close(), loop).result(timeout=30)
            return
        finish_idle(pool)  # the loop is gone, and with it the pool's tasks
