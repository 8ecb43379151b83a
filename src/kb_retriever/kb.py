"""The entry object: :class:`KnowledgeBase`."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
from psycopg.rows import dict_row
from psycopg_pool import PoolTimeout

from .embedding import Embedder, default_embedder, embedder_errors
from .embedding.base import check_vector
from .errors import ConfigError, InputError, StoreError
from .filters import SearchFilters, parse_filters
from .ingestion import IngestReport, Progress, ingest_paths
from .models import SearchResult
from .pipeline import (
    Fetch,
    SearchRequest,
    arun_plan,
    leg_shape,
    run_plan,
    search_plan,
    validate_limit,
    validate_query,
)
from .settings import Settings, load_settings
from .store import schema
from .store.connection import (
    atranslated,
    is_retryable,
    make_async_pool,
    make_pool,
    translate,
    translated,
)
from .store.server import start_embedded
from .store.sql import Scope

logger = logging.getLogger(__name__)

__all__ = ["KnowledgeBase"]

_NAME_MAX = 120
# A cached read holds at most this many rows (rejected-approach chunks of a huge scope are
# read on every search instead).
_CACHE_MAX_ROWS = 20_000


# How long a search waits for an idle connection it saw in the pool for its second leg (a
# timeout of 0 would fail at once even with connections idle: psycopg_pool checks it first).
_IDLE_WAIT_S = 0.005


def _name(kind: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip() or len(value) > _NAME_MAX or "\x00" in value:
        raise InputError(f"{kind} must be a non-empty string of at most {_NAME_MAX} characters")
    return value.strip()


class KnowledgeBase:
    """A knowledge base in PostgreSQL + pgvector: ingest files, search them.

    With no database URL (argument, ``settings.database_url`` or ``KB_DATABASE_URL``) an
    embedded PostgreSQL is started under ``KB_HOME``. Constructing does no I/O; ``open()`` (or
    ``with``/``async with``) connects and applies migrations.

    Example::

        from kb_retriever import KnowledgeBase, compose_prompt

        with KnowledgeBase(project="docs") as kb:
            kb.ingest(["examples/kb"])
            result = kb.search("what cache layer did we standardise on?")
            print(result.primary[0].document.slug)
            print(compose_prompt(result))
    """

    def __init__(self, settings: Settings | None = None, *, embedder: Embedder | None = None,
                 database_url: str | None = None, home: str | Path | None = None,
                 tenant: str = "default", project: str = "default") -> None:
        base = settings or load_settings()
        updates: dict[str, Any] = {}
        if database_url is not None:
            updates["database_url"] = database_url
        if home is not None:
            updates["home"] = Path(home)
        self.settings = base.model_copy(update=updates) if updates else base
        self.embedder = embedder or default_embedder(self.settings.embedder)
        if not isinstance(self.embedder, Embedder):
            raise ConfigError("embedder must provide model_id, dimension, embed_documents, embed_query")
        self.tenant = _name("tenant", tenant)
        self.project = _name("project", project)
        self._url: str | None = None
        self._pool: Any = None
        self._apool: Any = None
        self._alock: asyncio.Lock | None = None
        self._apool_loop: asyncio.AbstractEventLoop | None = None
        # Reads that change rarely, cached for their TTL (see _cache_key): synonym groups per
        # scope (reference §5 caches them too), the database's lexeme statistics and the
        # rejected-approach vectors per scope. Each saves work on every search (the statistics
        # read alone cost ~3 ms at 100k chunks).
        # The cache holds each read's answer as the plan wants it (parsed, see Fetch.parse).
        self._cache: dict[tuple[Any, ...], tuple[float, Any]] = {}
        self._threads: ThreadPoolExecutor | None = None  # runs a search's second leg

    # --- lifecycle -----------------------------------------------------------------------
    @property
    def url(self) -> str:
        if self._url is None:
            raise StoreError("the knowledge base is not open; call open() or use `with`")
        return self._url

    def open(self) -> KnowledgeBase:
        """Connect (starting the embedded server if needed) and migrate. Idempotent."""
        if self._pool is not None:
            return self
        url = self.settings.database_url or start_embedded(self.settings.home)
        with translated():
            with psycopg.connect(url, autocommit=True, connect_timeout=10) as conn:
                schema.migrate(conn)
                schema.ensure_fixed_choices(
                    conn, dimension=self.embedder.dimension, model_id=self.embedder.model_id,
                    fts_language=self.settings.fts_language,
                )
            pool = make_pool(url, self.settings, vector_ready=True)
            pool.open(wait=True, timeout=30)
        self._url, self._pool = url, pool
        return self

    def close(self) -> None:
        """Close the pools. The embedded server stops when the last process using it exits."""
        if self._pool is not None:
            self._pool.close()
            self._pool = None
        if self._threads is not None:
            self._threads.shutdown(wait=True)
            self._threads = None

    async def aclose(self) -> None:
        if self._apool is not None:
            await self._apool.close()
            self._apool = None
        self.close()

    def __enter__(self) -> KnowledgeBase:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> KnowledgeBase:
        await asyncio.to_thread(self.open)
        await self._async_pool()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def _require_pool(self) -> Any:
        if self._pool is None:
            raise StoreError("the knowledge base is not open; call open() or use `with`")
        return self._pool

    def _write_pool(self) -> Any:
        """The pool, its idle connections checked first: a write is not retried, so it must not
        start on a connection the server has dropped (searches skip the check and retry)."""
        pool = self._require_pool()
        with translated():
            pool.check()
        return pool

    async def _async_pool(self) -> Any:
        # An async pool belongs to the event loop that opened it. When called from another loop
        # (a new asyncio.run(), a test framework's per-test loop) open a fresh pool for it; the
        # old one is dropped (its loop is gone or not ours to drive).
        loop = asyncio.get_running_loop()
        if self._apool is not None and self._apool_loop is not loop:
            logger.debug("event loop changed: opening a new async pool")
            self._apool, self._alock = None, None
        if self._apool is None:
            if self._alock is None:
                self._alock = asyncio.Lock()
            async with self._alock:
                if self._apool is None:
                    pool = make_async_pool(self.url, self.settings)
                    async with atranslated():
                        await pool.open(wait=True, timeout=30)
                    self._apool, self._apool_loop = pool, loop
        return self._apool

    # --- ingest --------------------------------------------------------------------------
    def ingest(self, paths: Iterable[str | Path], *, project: str | None = None,
               tenant: str | None = None, prune: bool = False,
               progress: Progress | None = None) -> IngestReport:
        """Ingest Markdown, text, PDF and DOCX files (directories recursively).

        Unchanged files are skipped by content hash; a changed file replaces its previous
        version in one transaction; files that fail are reported and leave the previous
        version intact. ``prune=True`` deletes documents of the project whose file is gone.
        """
        pool = self._write_pool()
        try:
            with translated(), pool.connection() as conn:
                return ingest_paths(
                    conn, self.embedder, self.settings, paths=paths,
                    tenant=_name("tenant", tenant or self.tenant),
                    project=_name("project", project or self.project), prune=prune,
                    progress=progress,
                )
        finally:
            self._cache.clear()  # the ingest re-analysed kb_chunks: new lexeme statistics

    def clear_caches(self) -> None:
        """Forget the cached reads (synonym groups, lexeme statistics, rejected-approach chunks)
        so the next search reads them again. This process's ingests do it
        already; call it after another process wrote, rather than waiting for the TTLs
        (``KB_SYNONYM_CACHE_TTL_SECONDS``, ``KB_CATALOG_CACHE_TTL_SECONDS``)."""
        self._cache.clear()

    def add_synonyms(self, term: str, synonyms: Sequence[str], *, project: str | None = None,
                     tenant: str | None = None) -> None:
        """Add or replace a synonym group for a project (reference §5)."""
        pool = self._write_pool()
        self._cache.clear()
        with translated(), pool.connection() as conn:
            conn.execute(
                "INSERT INTO kb_synonyms (tenant_id, project_key, term, synonyms) "
                "VALUES (%s, %s, %s, %s) ON CONFLICT (tenant_id, project_key, term) "
                "DO UPDATE SET synonyms = EXCLUDED.synonyms, enabled = true",
                [_name("tenant", tenant or self.tenant), _name("project", project or self.project),
                 _name("term", term), [_name("synonym", s) for s in synonyms]],
            )

    # --- search --------------------------------------------------------------------------
    def _request(self, query: Any, *, limit: int | None, project: str | Sequence[str] | None,
                 tenant: str | None, filters: SearchFilters | Mapping[str, Any] | None,
                 mention_doc_ids: Iterable[int] | None,
                 query_embedding: Sequence[float] | None, now: datetime | None) -> SearchRequest:
        projects: Sequence[str]
        if project is None:
            projects = [self.project]
        elif isinstance(project, str):
            projects = [project]
        else:
            projects = list(project)
        if not projects:
            raise InputError("project must name at least one project")
        vec = None
        if query_embedding is not None:
            vec = self._vector(query_embedding)
        return SearchRequest(
            query=validate_query(query, self.settings),
            scope=Scope(tenant=_name("tenant", tenant or self.tenant),
                        projects=tuple(dict.fromkeys(_name("project", p) for p in projects))),
            limit=validate_limit(self.settings.default_limit if limit is None else limit,
                                 self.settings),
            filters=parse_filters(filters),
            mention_doc_ids=frozenset(int(i) for i in (mention_doc_ids or ())),
            query_embedding=vec,
            now=now,
        )

    def _vector(self, values: Sequence[float]) -> np.ndarray:
        checked = check_vector(values, dimension=self.embedder.dimension,
                               model_id=self.embedder.model_id)
        return checked.astype(np.float32)

    def _embed(self, text: str) -> np.ndarray:
        return self._vector(self._embed_raw(text))

    def _embed_raw(self, text: str) -> Sequence[float]:
        with embedder_errors():
            return self.embedder.embed_query(text)

    def _cache_key(self, req: Fetch) -> tuple[tuple[Any, ...], int] | None:
        """(key, TTL in seconds) of a cacheable read, or None."""
        if req.stage == "synonyms" and self.settings.synonyms_cache_ttl_seconds > 0:
            return ((req.stage, req.params["tenant"], tuple(req.params["projects"])),
                    self.settings.synonyms_cache_ttl_seconds)
        ttl = self.settings.catalog_cache_ttl_seconds
        if req.stage in ("lexeme_stats", "scope_stats", "supersessions", "fts_configs",
                         "rejected_vectors") and ttl > 0:
            return (req.stage, req.params["tenant"], tuple(req.params["projects"])), ttl
        return None

    def _cached(self, req: Fetch) -> Any:
        """The cached answer to ``req``, or None."""
        key = self._cache_key(req)
        hit = self._cache.get(key[0]) if key else None
        return hit[1] if hit and hit[0] > time.monotonic() else None

    def _remember(self, req: Fetch, rows: list[dict[str, Any]]) -> Any:
        """The answer to ``req`` (``req.parse(rows)`` if set), cached when it is cacheable."""
        answer = req.parse(rows) if req.parse is not None else rows
        key = self._cache_key(req)
        if key and len(rows) <= _CACHE_MAX_ROWS:
            self._cache[key[0]] = (time.monotonic() + key[1], answer)
        return answer

    def _fetch(self, req: Fetch, held: list[Any]) -> Any:
        """Answer one read of a search plan. ``held`` carries the search's pooled connection
        from one read to the next (one checkout per search, not one per read)."""
        cached = self._cached(req)
        if cached is not None:
            return cached
        pool = self._require_pool()
        for attempt in (1, 2):
            try:
                if not held:
                    held.append(pool.getconn())
                with held[0].cursor(row_factory=dict_row) as cur:
                    cur.execute(req.query, req.params)
                    return self._remember(req, cur.fetchall())
            except psycopg.Error as exc:
                self._release(held)  # the pool discards it if it is broken
                # Reads are idempotent: a dropped connection is retried once on a fresh one.
                if attempt == 1 and is_retryable(exc):
                    logger.warning("retrying %s after a dropped connection", req.stage)
                    pool.check()
                    continue
                raise translate(exc) from None
        raise AssertionError("unreachable")

    def _fetch_all(self, reqs: tuple[Fetch, ...], held: list[Any]) -> tuple[Any, ...]:
        """Answer independent reads at once: the first on the search's connection, each other
        on a pooled connection that is idle right now, in a worker thread (psycopg waits on the
        socket without the GIL). With no idle connection, or ``KB_PARALLEL_LEGS=false``, one
        after the other: a search never waits for a second connection.

        The idle connections stay with the search to its end and go back after its own one
        (:meth:`_release`). psycopg_pool hands out the connection idle longest, so the next
        search gets the same pair: its own connection again for this thread, the same second
        one for the worker. Pairs that swapped every search cost ~1 ms more on 2 cores
        (docs/decisions/0004-speed.md)."""
        extra: list[Any] = []
        if self.settings.parallel_legs and len(reqs) > 1:
            if not held:  # the search's own connection first: a pool of one must not deadlock
                with translated():
                    held.append(self._require_pool().getconn())
            extra = self._idle_connections(len(reqs) - 1)
        if not extra:
            return tuple(self._fetch(r, held) for r in reqs)
        # reqs[1..n] go to the n idle connections' workers; the others run here, on `held`
        helds = [[conn] for conn in extra]
        try:
            futures = [self._executor().submit(self._fetch, r, h)
                       for r, h in zip(reqs[1:], helds, strict=False)]
            try:
                mine = [self._fetch(r, held) for r in (reqs[0], *reqs[1 + len(futures):])]
            finally:
                wait(futures)  # never return a connection that a worker still uses
            return (mine[0], *[f.result() for f in futures], *mine[1:])
        finally:
            for h in helds:  # kept to the end of the search, returned after its own (_release)
                held.extend(h)

    def _idle_connections(self, n: int) -> list[Any]:
        """Up to ``n`` connections that are idle in the pool right now (never waits for one)."""
        pool, out = self._require_pool(), []
        for _ in range(min(n, pool.get_stats().get("pool_available", 0))):
            try:  # another thread may take it first: then wait 5 ms at most, not the timeout
                out.append(pool.getconn(timeout=_IDLE_WAIT_S))
            except PoolTimeout:
                break
        return out

    def _executor(self) -> ThreadPoolExecutor:
        if self._threads is None:
            self._threads = ThreadPoolExecutor(max_workers=self.settings.pool_max_size,
                                               thread_name_prefix="kb-retriever-leg")
        return self._threads

    def _release(self, held: list[Any]) -> None:
        """Return the search's connections to the pool, its own (``held[0]``) first."""
        while held:
            self._require_pool().putconn(held.pop(0))

    async def _afetch(self, req: Fetch, held: list[Any]) -> Any:
        cached = self._cached(req)
        if cached is not None:
            return cached
        pool = await self._async_pool()
        for attempt in (1, 2):
            try:
                if not held:
                    held.append(await pool.getconn())
                async with held[0].cursor(row_factory=dict_row) as cur:
                    await cur.execute(req.query, req.params)
                    return self._remember(req, await cur.fetchall())
            except psycopg.Error as exc:
                await self._arelease(held)
                if attempt == 1 and is_retryable(exc):
                    logger.warning("retrying %s after a dropped connection", req.stage)
                    await pool.check()
                    continue
                raise translate(exc) from None
        raise AssertionError("unreachable")

    async def _afetch_all(self, reqs: tuple[Fetch, ...], held: list[Any]) -> tuple[Any, ...]:
        """The async twin of :meth:`_fetch_all` (the reads run as concurrent tasks)."""
        extra: list[Any] = []
        if self.settings.parallel_legs and len(reqs) > 1:
            pool = await self._async_pool()
            if not held:  # the search's own connection first (see _fetch_all)
                async with atranslated():
                    held.append(await pool.getconn())
            for _ in range(min(len(reqs) - 1, pool.get_stats().get("pool_available", 0))):
                try:
                    extra.append(await pool.getconn(timeout=_IDLE_WAIT_S))
                except PoolTimeout:
                    break
        if not extra:
            return tuple([await self._afetch(r, held) for r in reqs])
        helds = [held, *([conn] for conn in extra)]
        try:
            parallel = reqs[:len(helds)]
            answers = await asyncio.gather(
                *(self._afetch(r, h) for r, h in zip(parallel, helds, strict=True)),
                return_exceptions=True)  # every task ends before a connection goes back
            for a in answers:
                if isinstance(a, BaseException):
                    raise a
            rest = [await self._afetch(r, held) for r in reqs[len(helds):]]
            return (*answers, *rest)
        finally:
            for h in helds[1:]:  # kept to the end of the search (see _fetch_all)
                held.extend(h)

    async def _arelease(self, held: list[Any]) -> None:
        """Return the search's connections to the pool, its own (``held[0]``) first."""
        if held:
            pool = await self._async_pool()
            while held:
                await pool.putconn(held.pop(0))

    def search(self, query: str, *, limit: int | None = None,
               project: str | Sequence[str] | None = None, tenant: str | None = None,
               filters: SearchFilters | Mapping[str, Any] | None = None,
               mention_doc_ids: Iterable[int] | None = None,
               query_embedding: Sequence[float] | None = None,
               now: datetime | None = None) -> SearchResult:
        """Search and return a :class:`SearchResult` (primary, expanded, rejected, runner_up, meta).

        ``project`` may name several projects; ``filters`` is a mapping of the keys in
        :data:`kb_retriever.filters.VALID_KEYS` (unknown keys raise :class:`FilterError`).
        """
        req = self._request(query, limit=limit, project=project, tenant=tenant, filters=filters,
                            mention_doc_ids=mention_doc_ids, query_embedding=query_embedding,
                            now=now)
        self._require_pool()
        held: list[Any] = []

        def embed(text: str) -> np.ndarray:
            self._release(held)  # no connection sits idle while the model runs
            return self._embed(text)

        try:
            return run_plan(search_plan(req, self.settings),
                            lambda r: self._fetch(r, held), embed,
                            lambda reqs: self._fetch_all(reqs, held))
        finally:
            self._release(held)

    async def asearch(self, query: str, *, limit: int | None = None,
                      project: str | Sequence[str] | None = None, tenant: str | None = None,
                      filters: SearchFilters | Mapping[str, Any] | None = None,
                      mention_doc_ids: Iterable[int] | None = None,
                      query_embedding: Sequence[float] | None = None,
                      now: datetime | None = None) -> SearchResult:
        """The async twin of :meth:`search` (the embedding runs in a worker thread)."""
        req = self._request(query, limit=limit, project=project, tenant=tenant, filters=filters,
                            mention_doc_ids=mention_doc_ids, query_embedding=query_embedding,
                            now=now)

        held: list[Any] = []

        async def embed(text: str) -> np.ndarray:
            await self._arelease(held)
            return self._vector(await asyncio.to_thread(self._embed_raw, text))

        try:
            return await arun_plan(search_plan(req, self.settings),
                                   lambda r: self._afetch(r, held), embed,
                                   lambda reqs: self._afetch_all(reqs, held))
        finally:
            await self._arelease(held)

    def search_sql(self, query: str, **kwargs: Any) -> str:
        """The candidate SQL that :meth:`search` runs for ``query``: the vector leg, then the
        full-text leg (the scope and sizes as literals, the query's values as placeholders).

        Shown without the lexeme statistics: a search's full-text leg also carries the cached
        estimates by which it chooses its OR lexemes (``store.sql.lexeme_selection_sql``), a
        JSON literal of up to a thousand lexemes; here the leg keeps every query lexeme."""
        from .store import sql as q

        req = self._request(query, limit=kwargs.get("limit"), project=kwargs.get("project"),
                            tenant=kwargs.get("tenant"), filters=kwargs.get("filters"),
                            mention_doc_ids=None, query_embedding=None, now=None)
        with_doc_ids = self.settings.mentions_mode == "filter"
        shape = leg_shape(req, self.settings)
        legs = [("vector leg",
                 q.vector_leg_sql(shape, filters=req.filters, with_doc_ids=with_doc_ids)[0])]
        if self.settings.hybrid_search_enabled:
            legs.append(("full-text leg", q.keyword_leg_sql(
                shape, fts_mode=self.settings.fts_query_mode, n_phrases=0, filters=req.filters,
                with_doc_ids=with_doc_ids)[0]))
        with self._require_pool().connection() as conn:
            return "\n".join(f"-- {name}\n{stmt.as_string(conn)};" for name, stmt in legs)
