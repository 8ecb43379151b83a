"""Running a search plan against the store: the server that answers (a replica, else the
primary), the session that holds its connections, and the failover when a replica is lost.

:func:`search` and :func:`asearch` are twins that differ only at the I/O line. A replica that
cannot be reached while it answers is marked down and the whole search runs again on the next
server (a search only reads); a query error is the caller's at once. With replicas, ``meta``
says which server answered and how far behind the primary it was.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from typing import Any

from ..errors import UnavailableError
from ..models import SearchResult
from ..settings import Settings
from ..store.pools import Pools
from ..store.reader import AsyncSearchSession, CacheView, ReadCache, SearchSession
from ..store.replicas import Target
from .meta import SearchMeta
from .pipeline import search_plan
from .plan import SearchRequest, arun_plan, run_plan

__all__ = ["asearch", "search", "search_sql"]


def _answered(result: SearchResult, target: Target) -> SearchResult:
    """``result`` with the server that answered in its meta (only with replicas)."""
    if target.label is None or not isinstance(result.meta, SearchMeta):
        return result
    meta = dataclasses.replace(result.meta, server=target.label, replica_lag_s=target.lag_s)
    return dataclasses.replace(result, meta=meta)


def _attempts(pools: Pools) -> int:
    """Every replica, then the primary."""
    return len(pools.replicas) + 1 if pools.replicas else 1


def _once(target: Target, pools: Pools, cache: ReadCache | CacheView, settings: Settings,
          req: SearchRequest, embed: Callable[[str], Any], *,
          record: list[Any] | None = None) -> tuple[SearchResult, str]:
    """One run of ``req``'s plan on ``target``: the result, and the statements it recorded
    (with ``record``)."""
    session = SearchSession(target.pool, cache, settings, pools.executor, record=record,
                            distributed=pools.distributed,
                            revive=pools.revived if pools.revives(target) else None)

    def embedded(text: str) -> Any:
        session.release()  # no connection sits idle while the model runs
        return embed(text)

    try:
        result = run_plan(search_plan(req, settings), session.fetch, embedded,
                          session.fetch_all)
        return result, session.rendered() if record is not None else ""
    finally:
        session.release()


async def _aonce(target: Target, pools: Pools, cache: ReadCache | CacheView, settings: Settings,
                 req: SearchRequest, embed: Callable[[str], Awaitable[Any]]) -> SearchResult:
    session = AsyncSearchSession(target.pool, cache, settings, distributed=pools.distributed,
                                 revive=pools.arevived if pools.revives(target) else None)

    async def embedded(text: str) -> Any:
        await session.release()
        return await embed(text)

    try:
        return await arun_plan(search_plan(req, settings), session.fetch, embedded,
                               session.fetch_all)
    finally:
        await session.release()


def search(pools: Pools, cache: ReadCache, settings: Settings, req: SearchRequest,
           embed: Callable[[str], Any], *, consistent: bool = False) -> SearchResult:
    """Run ``req``'s plan on a read server; ``embed`` embeds a query text. An embedded server
    that stopped under the open knowledge base is started again, once (``Pools.revived``)."""
    revived = False
    for attempt in range(_attempts(pools) + 1):
        since = cache.generation  # before the server is chosen: it may lack a later write
        target = pools.read_target(consistent)
        view = cache.view(target.replica is None or consistent, since)
        try:
            return _answered(_once(target, pools, view, settings, req, embed)[0], target)
        except UnavailableError:
            if target.replica is not None and attempt + 1 < _attempts(pools):
                pools.replicas.mark_down(target.replica)
            elif target.replica is None and not revived and pools.revived():
                revived = True
            else:
                raise
    raise AssertionError("unreachable")  # pragma: no cover


async def asearch(pools: Pools, cache: ReadCache, settings: Settings, req: SearchRequest,
                  embed: Callable[[str], Awaitable[Any]], *,
                  consistent: bool = False) -> SearchResult:
    """The async twin of :func:`search`."""
    revived = False
    for attempt in range(_attempts(pools) + 1):
        target: Target | None = None
        try:
            since = cache.generation  # before the server is chosen (as in search)
            target = await pools.aread_target(consistent)  # may open the loop's pool
            view = cache.view(target.replica is None or consistent, since)
            return _answered(await _aonce(target, pools, view, settings, req, embed), target)
        except UnavailableError:
            # No target: the loop's pool of the primary could not open (a replica's falls back).
            replica = target.replica if target is not None else None
            if replica is not None and attempt + 1 < _attempts(pools):
                pools.replicas.mark_down(replica)
            elif replica is None and not revived and await pools.arevived():
                revived = True
            else:
                raise
    raise AssertionError("unreachable")  # pragma: no cover


def search_sql(pools: Pools, settings: Settings, req: SearchRequest,
               embed: Callable[[str], Any]) -> str:
    """The statements the search of ``req`` runs, recorded as it runs them (nothing answered
    from a cache), on the server a search would use."""
    return _once(pools.read_target(), pools, ReadCache(), settings, req, embed, record=[])[1]
