"""The connections of one search: a pooled session, retry, parallel legs, release order.

``SearchSession`` and ``AsyncSearchSession`` are line-parallel twins (as httpx keeps ``Client``
and ``AsyncClient``): the policy is the same, only the I/O differs. A session answers a plan's
reads (``store.reads.Fetch`` / ``Parallel``); what may be cached, under which key and for how
long, the plan declares on each read (``Fetch.cache_key``, ``Fetch.cache_ttl``), and
:class:`ReadCache` keeps it.

Policy, in both twins:

* one checkout per search: the first read takes a connection and the later ones reuse it;
  :meth:`release` gives it back (before the query is embedded, and at the end);
* a read whose connection the server dropped is retried once on a fresh one (reads are
  idempotent; a query error or the pool's own timeout is not retried). With ``revive`` (the
  embedded server's) a server found stopped is started again first: the retry would otherwise
  wait out the pool's timeout for a connection that no one can open. A search that waited a
  second for a connection asks too: the pool had lost every connection to the stopped server;
* independent reads (the two candidate legs) run in one statement when the plan offers one
  (``Parallel.together``: one backend and one round trip, decision 0015). With
  ``KB_PARALLEL_LEGS=true`` they run at once when the pool has idle connections right now,
  each extra connection kept to the end of the search and returned after the search's own
  one, so the next search gets the same pair (docs/decisions/0004-speed.md); a search never
  waits for a second connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor, wait
from typing import Any

import psycopg
from psycopg.rows import dict_row
from psycopg_pool import PoolTimeout

from ..settings import Settings
from .borrowed import BorrowedAsyncPool, BorrowedPool
from .connection import aput_back, atranslated, is_retryable, local_settings, translate, translated
from .distribution import shard_settings
from .read_cache import CacheView, ReadCache
from .reads import Fetch, Parallel
from .sql import Statement

logger = logging.getLogger(__name__)

__all__ = ["AsyncSearchSession", "CacheView", "ReadCache", "SearchSession"]

# How long a search waits for an idle connection it saw in the pool for its second leg (a
# timeout of 0 would fail at once even with connections idle: psycopg_pool checks it first).
_IDLE_WAIT_S = 0.005
# How long a search with ``revive`` waits for a connection before it asks whether the embedded
# server stopped (a pid file read when it runs), rather than wait out the pool's timeout.
_REVIVE_AFTER_S = 1.0


def prepared(req: Fetch) -> bool | None:
    """``prepare`` for psycopg's ``execute``: a :class:`~.sql.Statement` (one text per scope and
    statistics, run search after search) is prepared on its first run; psycopg's default
    (prepare after five runs) holds for the others. Each client's first searches under load
    ran the one-statement form unprepared (its warm-up, alone on the server, had run the legs
    at once), the server parsing and planning ~25 kB of SQL each time (decision 0017)."""
    return True if isinstance(req.query, Statement) else None


def _pipeline(conn: Any, settings: Settings) -> Any:
    """The pipeline a read's settings and statement go in, one round trip; behind a
    transaction pooler none: through PgBouncer 1.18 in transaction mode, a pipelined
    transaction left the server connection linked to its idle client after 5 of 20 searches,
    and the pooler's other clients waited for it until they timed out (``tests/pooler``)."""
    return contextlib.nullcontext() if settings.transaction_pooler else conn.pipeline()


def _local(settings: Settings, distributed: bool, pool: Any) -> list[Any] | None:
    """What a read sends first, in its own transaction: on Citus a vector read the HNSW
    settings for the shard (``distribution.shard_settings``); behind a transaction pooler every
    read all the session's settings, which no session holds there (``KB_TRANSACTION_POOLER``);
    on a borrowed pool a vector read the HNSW settings, which its owner's reset (``RESET
    ALL``, ``DISCARD ALL``) takes from the session: its searches ran with pgvector's
    defaults (``ef_search`` 40, no iterative scan, so a filtered search found fewer hits)."""
    local: list[Any] = list(shard_settings(settings)) if distributed else []
    if settings.transaction_pooler:
        local.append(local_settings(settings))
    elif not distributed and isinstance(pool, BorrowedPool | BorrowedAsyncPool):
        local.append(local_settings(settings, timeout=False))
    return local or None


class SearchSession:
    """One search's connections from a sync pool (see the module docstring)."""

    def __init__(self, pool: Any, cache: ReadCache | CacheView, settings: Settings,
                 executor: Callable[[], ThreadPoolExecutor], *,
                 record: list[Fetch] | None = None, distributed: bool = False,
                 revive: Callable[[], bool] | None = None) -> None:
        self._pool, self._cache, self._settings, self._executor = pool, cache, settings, executor
        self._local = _local(settings, distributed, pool)
        self._revive = revive  # Pools.revived: True when it started the server (pool checked)
        self._held: list[Any] = []  # the search's own connection first, then the extra ones
        # With ``record`` the reads that go to the database are kept there, in plan order
        # (``KnowledgeBase.search_sql``).
        self._record = record

    def fetch(self, req: Fetch) -> Any:
        self._recorded((req,))
        return self._fetch(req, self._held)

    def _recorded(self, reqs: tuple[Fetch, ...]) -> None:
        if self._record is not None:
            self._record.extend(r for r in reqs if self._cache.get(r) is None)

    def rendered(self) -> str:
        """The recorded reads as SQL text, each after its stage and the names it binds."""
        reqs = self._record or []
        with translated(), self._pool.connection() as conn:
            return "\n".join(render(r, conn) for r in reqs)

    def _fetch(self, req: Fetch, held: list[Any]) -> Any:
        cached = self._cache.get(req)
        if cached is not None:
            return cached
        since = self._cache.generation
        for attempt in (1, 2):
            try:
                if not held:
                    held.append(self._connection())
                conn = held[0]
                if self._local is not None and (req.ann or self._settings.transaction_pooler):
                    with _pipeline(conn, self._settings), conn.transaction(), \
                            conn.cursor(row_factory=dict_row) as cur:
                        for stmt in self._local:
                            cur.execute(stmt)
                        cur.execute(req.query, req.params, prepare=prepared(req),
                                    binary=req.binary)
                        return self._cache.answer(req, cur.fetchall(), since)
                with conn.cursor(row_factory=dict_row) as cur:
                    cur.execute(req.query, req.params, prepare=prepared(req),
                                binary=req.binary)
                    return self._cache.answer(req, cur.fetchall(), since)
            except psycopg.Error as exc:
                _release(self._pool, held)  # the pool discards it if it is broken
                if attempt == 1 and is_retryable(exc):
                    logger.warning("retrying %s after a dropped connection", req.stage)
                    if self._revive is None or not self._revive():
                        self._pool.check()
                    continue
                raise translate(exc) from None
        raise AssertionError("unreachable")

    def fetch_all(self, request: Parallel) -> tuple[Any, ...]:
        """Independent reads: with ``KB_PARALLEL_LEGS=true`` and idle connections, the first on
        the search's connection and each other on an idle one in a worker thread (psycopg
        waits on the socket without the GIL); otherwise all in one statement (``together``)
        or one after the other, on the search's connection."""
        reqs = request.fetches
        extra: list[Any] = []
        if self._settings.parallel_legs and len(reqs) > 1:
            if not self._held:  # the search's own connection first: a pool of one must not
                with translated():  # deadlock
                    self._held.append(self._connection())
            extra = self._idle(len(reqs) - 1)
        if not extra and request.together is not None:
            return self.fetch(request.together)  # type: ignore[no-any-return]
        self._recorded(reqs)
        if not extra:
            return tuple(self._fetch(r, self._held) for r in reqs)
        helds = [[conn] for conn in extra]  # reqs[1..n] on the idle connections' workers
        try:
            futures = [self._executor().submit(self._fetch, r, h)
                       for r, h in zip(reqs[1:], helds, strict=False)]
            try:
                mine = [self._fetch(r, self._held) for r in (reqs[0], *reqs[1 + len(futures):])]
            finally:
                wait(futures)  # never return a connection that a worker still uses
            return (mine[0], *[f.result() for f in futures], *mine[1:])
        finally:
            for h in helds:  # kept to the end of the search, returned after its own
                self._held.extend(h)

    def _connection(self) -> Any:
        """A connection of the pool. With ``revive``, a search that waited
        :data:`_REVIVE_AFTER_S` for one asks first whether the embedded server stopped: the
        pool lost its connections then, and waiting out its timeout would not bring one."""
        if self._revive is None:
            return self._pool.getconn()
        first, rest = _waits(self._settings)
        try:
            return self._pool.getconn(timeout=first)
        except PoolTimeout:
            self._revive()  # True when it started the server (and checked the pool)
        try:
            return self._pool.getconn(timeout=rest)
        except PoolTimeout:
            raise _timed_out(self._settings) from None

    def _idle(self, n: int) -> list[Any]:
        """Up to ``n`` connections that are idle in the pool right now (never waits for one)."""
        out = []
        for _ in range(min(n, self._pool.get_stats().get("pool_available", 0))):
            try:  # another thread may take it first: then wait 5 ms at most, not the timeout
                out.append(self._pool.getconn(timeout=_IDLE_WAIT_S))
            except PoolTimeout:
                break
        return out

    def release(self) -> None:
        """Return the search's connections to the pool, its own first."""
        _release(self._pool, self._held)


class AsyncSearchSession:
    """The async twin of :class:`SearchSession` (parallel reads run as concurrent tasks)."""

    def __init__(self, pool: Any, cache: ReadCache | CacheView, settings: Settings, *,
                 distributed: bool = False,
                 revive: Callable[[], Awaitable[bool]] | None = None) -> None:
        self._pool, self._cache, self._settings = pool, cache, settings
        self._local = _local(settings, distributed, pool)
        self._revive = revive
        self._held: list[Any] = []

    async def fetch(self, req: Fetch) -> Any:
        return await self._fetch(req, self._held)

    async def _fetch(self, req: Fetch, held: list[Any]) -> Any:
        cached = self._cache.get(req)
        if cached is not None:
            return cached
        since = self._cache.generation
        for attempt in (1, 2):
            try:
                if not held:
                    held.append(await self._connection())
                conn = held[0]
                if self._local is not None and (req.ann or self._settings.transaction_pooler):
                    async with _pipeline(conn, self._settings), conn.transaction(), \
                            conn.cursor(row_factory=dict_row) as cur:
                        for stmt in self._local:
                            await cur.execute(stmt)
                        await cur.execute(req.query, req.params, prepare=prepared(req),
                                          binary=req.binary)
                        return self._cache.answer(req, await cur.fetchall(), since)
                async with conn.cursor(row_factory=dict_row) as cur:
                    await cur.execute(req.query, req.params, prepare=prepared(req),
                                      binary=req.binary)
                    return self._cache.answer(req, await cur.fetchall(), since)
            except psycopg.Error as exc:
                await _arelease(self._pool, held)
                if attempt == 1 and is_retryable(exc):
                    logger.warning("retrying %s after a dropped connection", req.stage)
                    if self._revive is None or not await self._revive():
                        await self._pool.check()
                    continue
                raise translate(exc) from None
        raise AssertionError("unreachable")

    async def fetch_all(self, request: Parallel) -> tuple[Any, ...]:
        reqs = request.fetches
        extra: list[Any] = []
        if self._settings.parallel_legs and len(reqs) > 1:
            if not self._held:
                async with atranslated():
                    self._held.append(await self._connection())
            extra = await self._idle(len(reqs) - 1)
        if not extra:
            if request.together is not None:
                return await self.fetch(request.together)  # type: ignore[no-any-return]
            return tuple([await self.fetch(r) for r in reqs])
        helds = [self._held, *([conn] for conn in extra)]
        try:
            answers = await asyncio.gather(
                *(self._fetch(r, h) for r, h in zip(reqs[:len(helds)], helds, strict=True)),
                return_exceptions=True)  # every task ends before a connection goes back
            for a in answers:
                if isinstance(a, BaseException):
                    raise a
            rest = [await self.fetch(r) for r in reqs[len(helds):]]
            return (*answers, *rest)
        finally:
            for h in helds[1:]:  # kept to the end of the search
                self._held.extend(h)

    async def _connection(self) -> Any:
        if self._revive is None:
            return await self._pool.getconn()
        first, rest = _waits(self._settings)
        try:
            return await self._pool.getconn(timeout=first)
        except PoolTimeout:
            await self._revive()
        try:
            return await self._pool.getconn(timeout=rest)
        except PoolTimeout:
            raise _timed_out(self._settings) from None

    async def _idle(self, n: int) -> list[Any]:
        out = []
        for _ in range(min(n, self._pool.get_stats().get("pool_available", 0))):
            try:
                out.append(await self._pool.getconn(timeout=_IDLE_WAIT_S))
            except PoolTimeout:
                break
        return out

    async def release(self) -> None:
        await _arelease(self._pool, self._held)


def render(req: Fetch, conn: Any) -> str:
    """``req``'s statement as SQL text, after a comment with its stage and the names of the
    values it binds (values are never spliced into the text)."""
    names = ", ".join(sorted(req.params)) or "none"
    return f"-- {req.stage} (binds: {names})\n{req.query.as_string(conn)};"


def _waits(settings: Settings) -> tuple[float, float]:
    """``_connection``'s two waits: before it asks whether the server stopped, then the rest
    of the pool's timeout (at least a moment: a timeout of 0 fails at once)."""
    first = min(_REVIVE_AFTER_S, settings.pool_timeout_s)
    return first, max(settings.pool_timeout_s - first, _IDLE_WAIT_S)


def _timed_out(settings: Settings) -> PoolTimeout:
    """The pool's timeout error for a search's whole wait (``_connection`` waits twice)."""
    return PoolTimeout(f"couldn't get a connection after {settings.pool_timeout_s:.2f} sec")


def _release(pool: Any, held: list[Any]) -> None:
    while held:
        pool.putconn(held.pop(0))


async def _arelease(pool: Any, held: list[Any]) -> None:
    await aput_back(pool, held)  # a search cancelled meanwhile must not lose them
