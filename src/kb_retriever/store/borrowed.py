"""Pools the caller owns: used, never closed, their connections prepared on first use.

``KnowledgeBase(pool=...)`` / ``KnowledgeBase(async_pool=...)`` take an open
``psycopg_pool.ConnectionPool`` / ``AsyncConnectionPool``. Our own pools set up each new
connection (``store.connection.make_pool``); a borrowed connection gets the same once, the
first time we use it: pgvector's types and the two HNSW settings (``hnsw.ef_search``,
``hnsw.iterative_scan``) for the session. An owner's reset (``RESET ALL``) takes the settings
away again, so each vector read also sets them for its own transaction
(``store.reader._local``). ``statement_timeout`` is left as the owner set it.

While we hold a borrowed connection it is in autocommit, as ours are, and it goes back in the
owner's mode. psycopg's connections are not autocommit by default: on one, our first statement
opened a transaction that held the whole call, each document's transaction became a savepoint
in it, and a write that failed half-way lost the documents it had reported saved when the
pool rolled the call back.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Iterator
from typing import Any

from pgvector.psycopg import register_vector, register_vector_async
from psycopg.pq import TransactionStatus

from ..settings import Settings
from .connection import _gucs, aput_back

__all__ = ["BorrowedAsyncPool", "BorrowedPool"]


def _settings_sql(settings: Settings) -> list[tuple[str, list[str]]]:
    if settings.transaction_pooler:  # each read sets them for its own transaction
        return []
    return [("SELECT set_config(%s, %s, false)", [k, v]) for k, v in _gucs(settings)
            if k != "statement_timeout"]


def _idle(conn: Any) -> bool:
    """Whether ``conn``'s mode may change: open and outside any transaction or statement."""
    return not conn.closed and conn.info.transaction_status == TransactionStatus.IDLE


class BorrowedPool:
    """The subset of ``ConnectionPool`` the knowledge base uses, over the caller's pool."""

    def __init__(self, pool: Any, settings: Settings) -> None:
        self.pool = pool
        self._sql = _settings_sql(settings)
        self._ready: weakref.WeakSet[Any] = weakref.WeakSet()
        self._lent: weakref.WeakSet[Any] = weakref.WeakSet()  # put in autocommit by us

    def _prepare(self, conn: Any) -> Any:
        if not conn.autocommit:  # idle: the pool gives out no connection in a transaction
            conn.autocommit = True
            self._lent.add(conn)
        if conn not in self._ready:
            register_vector(conn)
            for stmt, params in self._sql:
                conn.execute(stmt, params)
            self._ready.add(conn)
        return conn

    def _restore(self, conn: Any) -> None:
        if conn in self._lent and _idle(conn):  # else the pool discards it
            self._lent.discard(conn)
            conn.autocommit = False

    def getconn(self, timeout: float | None = None) -> Any:
        conn = self.pool.getconn(timeout=timeout)
        try:
            return self._prepare(conn)
        except BaseException:
            self.putconn(conn)
            raise

    def putconn(self, conn: Any) -> None:
        self._restore(conn)
        self.pool.putconn(conn)

    @contextlib.contextmanager
    def connection(self, timeout: float | None = None) -> Iterator[Any]:
        with self.pool.connection(timeout=timeout) as conn:
            try:
                yield self._prepare(conn)
            finally:
                self._restore(conn)

    @property
    def max_size(self) -> int:
        return int(self.pool.max_size)

    def check(self) -> None:
        self.pool.check()

    def get_stats(self) -> dict[str, int]:
        return dict(self.pool.get_stats())

    def close(self) -> None:
        """Nothing: the caller opened the pool, the caller closes it."""


class BorrowedAsyncPool:
    """The async twin of :class:`BorrowedPool`."""

    def __init__(self, pool: Any, settings: Settings) -> None:
        self.pool = pool
        self._sql = _settings_sql(settings)
        self._ready: weakref.WeakSet[Any] = weakref.WeakSet()
        self._lent: weakref.WeakSet[Any] = weakref.WeakSet()

    async def _prepare(self, conn: Any) -> Any:
        if not conn.autocommit:
            await conn.set_autocommit(True)
            self._lent.add(conn)
        if conn not in self._ready:
            await register_vector_async(conn)
            for stmt, params in self._sql:
                await conn.execute(stmt, params)
            self._ready.add(conn)
        return conn

    async def _restore(self, conn: Any) -> None:
        if conn in self._lent and _idle(conn):
            self._lent.discard(conn)
            await conn.set_autocommit(False)

    async def getconn(self, timeout: float | None = None) -> Any:
        conn = await self.pool.getconn(timeout=timeout)
        try:
            return await self._prepare(conn)
        except BaseException:  # a cancellation, a failed statement: the owner's, given back
            await aput_back(self, [conn])
            raise

    async def putconn(self, conn: Any) -> None:
        await self._restore(conn)
        await self.pool.putconn(conn)

    @property
    def max_size(self) -> int:
        return int(self.pool.max_size)

    async def check(self) -> None:
        await self.pool.check()

    def get_stats(self) -> dict[str, int]:
        return dict(self.pool.get_stats())

    async def close(self) -> None:
        """Nothing: the caller opened the pool, the caller closes it."""
