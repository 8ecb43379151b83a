"""The entry object: :class:`KnowledgeBase`."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from . import documents as docs
from .calibrate import calibrate_project
from .documents import StoredChunk, StoredDocument
from .embedding import Embedder, default_embedder, embedder_errors
from .embedding.base import check_vector
from .errors import ConfigError, InputError, StoreError
from .filter_expr import is_row_id
from .filters import SearchFilters, parse_filters
from .ingestion import IngestReport, Progress, as_paths, ingest_paths
from .models import SearchResult
from .pipeline import leg_shape, search_plan, validate_limit, validate_query
from .plan import SearchRequest, arun_plan, run_plan
from .settings import Settings, load_settings
from .store import records, schema
from .store.borrowed import BorrowedAsyncPool, BorrowedPool
from .store.connection import (
    atranslated,
    make_async_pool,
    make_pool,
    translated,
)
from .store.reader import AsyncSearchSession, ReadCache, SearchSession
from .store.server import start_embedded
from .store.sql import Scope

logger = logging.getLogger(__name__)

__all__ = ["KnowledgeBase"]

_NAME_MAX = 120


def _count(cur: Any) -> int:
    """A statement's count: the row it returned (``SELECT count(*)``), else its row count."""
    if cur.description is not None:
        row = cur.fetchone()
        return int(row[0]) if row else 0
    return max(cur.rowcount, 0)


async def _acount(cur: Any) -> int:
    if cur.description is not None:
        row = await cur.fetchone()
        return int(row[0]) if row else 0
    return max(cur.rowcount, 0)


def _selection(ids: Iterable[str] | None, filters: SearchFilters | Mapping[str, Any] | None
               ) -> tuple[list[str] | None, SearchFilters | None]:
    """Chunk ids and/or filters; at least one (a call with neither would mean every chunk)."""
    parsed = parse_filters(filters) if filters is not None else None
    if ids is None and (parsed is None or parsed.is_empty()):
        raise InputError("give chunk ids, filters or both (clear() deletes everything)")
    return (None if ids is None else docs.validate_ids(ids)), parsed


def _in_order(found: Sequence[Any], wanted: Sequence[str]) -> list[Any]:
    by_id = {item.id: item for item in found}
    return [by_id[i] for i in wanted if i in by_id]


def _name(kind: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip() or len(value) > _NAME_MAX or "\x00" in value:
        raise InputError(f"{kind} must be a non-empty string of at most {_NAME_MAX} characters")
    return value.strip()


def _finish_idle(pool: Any) -> None:
    """Close the sockets of an async pool's idle connections without its event loop.
    psycopg_pool keeps them in ``_pool``; connections in use belong to their caller."""
    for conn in list(getattr(pool, "_pool", ())):
        conn.pgconn.finish()


def _quietly(load: Any) -> None:
    try:
        load()
    except Exception:  # the first embed raises it again, typed, where the caller sees it
        logger.debug("embedder warm-up failed", exc_info=True)


def _doc_ids(values: Any) -> frozenset[int]:
    if values is None:
        return frozenset()
    if isinstance(values, str | bytes) or not isinstance(values, Iterable):
        raise InputError("mention_doc_ids takes a list of document ids (integers)")
    out = set()
    for v in values:
        if not is_row_id(v):
            raise InputError(f"mention_doc_ids takes positive integer document ids, not {v!r:.40}")
        out.add(v)
    return frozenset(out)


def _moment(value: Any) -> datetime | None:
    if value is not None and not isinstance(value, datetime):
        raise InputError(f"now takes a datetime, not {type(value).__name__}")
    return value


class KnowledgeBase:
    """A knowledge base in PostgreSQL + pgvector: ingest files, search them.

    With no database URL (argument, ``settings.database_url`` or ``KB_DATABASE_URL``) an
    embedded PostgreSQL is started under ``KB_HOME``. Constructing does no I/O; ``open()`` (or
    ``with``/``async with``) connects and applies migrations.

    ``pool=`` / ``async_pool=`` take a ``psycopg_pool.ConnectionPool`` /
    ``AsyncConnectionPool`` you opened: the knowledge base uses it (for the other flavour it
    opens a small pool of its own to the same server, with the pool's ``conninfo`` and
    ``kwargs``) and never closes it (``store/borrowed.py`` says what it sets on a borrowed
    connection).

    Example::

        from kb_retriever import KnowledgeBase, compose_prompt

        with KnowledgeBase(project="docs") as kb:
            kb.ingest(["examples/kb"])
            kb.add_documents([{"text": "Deploys freeze on Fridays.", "id": "note-freeze"}])
            result = kb.search("what cache layer did we standardise on?")
            print(result.primary[0].document.slug)
            print(compose_prompt(result))
    """

    def __init__(self, settings: Settings | None = None, *, embedder: Embedder | None = None,
                 database_url: str | None = None, home: str | Path | None = None,
                 tenant: str = "default", project: str = "default",
                 pool: ConnectionPool | None = None,
                 async_pool: AsyncConnectionPool | None = None) -> None:
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
        # The answers of the reads a search plan marks cacheable (synonyms, the scope's
        # statistics, calibration and rejected-approach vectors), parsed, for their TTL.
        self._reads = ReadCache()
        self._threads: ThreadPoolExecutor | None = None  # runs a search's second leg
        self._closing: asyncio.Task[None] | None = None  # an async pool closing in its loop
        self._loader: threading.Thread | None = None  # loads the embedder during open()
        if pool is not None and not isinstance(pool, ConnectionPool):
            raise ConfigError(f"pool must be a psycopg_pool.ConnectionPool, got {type(pool).__name__}")
        if async_pool is not None and not isinstance(async_pool, AsyncConnectionPool):
            raise ConfigError("async_pool must be a psycopg_pool.AsyncConnectionPool, got "
                              f"{type(async_pool).__name__}")
        self._given_pool, self._given_apool = pool, async_pool
        # The server of a borrowed pool, for the pool of the other flavour we may open.
        given = pool if pool is not None else async_pool
        # (a pool built with a kwargs callable has no fixed kwargs to copy: none are taken)
        kwargs = getattr(given, "kwargs", None)
        self._conn_kwargs: dict[str, Any] = dict(kwargs) if isinstance(kwargs, dict) else {}

    # --- lifecycle -----------------------------------------------------------------------
    @property
    def url(self) -> str:
        if self._url is None:
            raise StoreError("the knowledge base is not open; call open() or use `with`")
        return self._url

    def open(self) -> KnowledgeBase:
        """Connect (starting the embedded server if needed) and migrate. Idempotent.

        An embedder with a ``load()`` method (the default model) loads in a thread meanwhile,
        so the first search does not wait for both one after the other."""
        if self._pool is not None:
            return self
        load = getattr(self.embedder, "load", None)
        if callable(load) and self._loader is None:
            self._loader = threading.Thread(target=_quietly, args=(load,),
                                            name="kb-retriever-load", daemon=True)
            self._loader.start()
        try:
            return self._open()
        except BaseException:
            self._join_loader()  # never exit with the model runtime half-loaded in a thread
            raise

    def _join_loader(self) -> None:
        if self._loader is not None:
            self._loader.join()
            self._loader = None

    def _open(self) -> KnowledgeBase:
        given = self._given_pool if self._given_pool is not None else self._given_apool
        if given is not None:
            if not isinstance(given.conninfo, str):
                raise ConfigError("a borrowed pool needs a conninfo string (not a callable)")
            url: str = given.conninfo
        else:
            url = self.settings.database_url or start_embedded(self.settings.home)
        with translated():
            migrating = (self._given_pool.connection() if self._given_pool is not None else
                         psycopg.connect(url, autocommit=True, connect_timeout=10,
                                         **self._conn_kwargs))
            with migrating as conn:
                schema.migrate(conn)
                schema.ensure_fixed_choices(
                    conn, dimension=self.embedder.dimension, model_id=self.embedder.model_id,
                    fts_language=self.settings.fts_language,
                )
            if self._given_pool is not None:
                pool: Any = BorrowedPool(self._given_pool, self.settings)
            else:
                pool = make_pool(url, self.settings, vector_ready=True,
                                 conn_kwargs=self._conn_kwargs)
                pool.open(wait=True, timeout=30)
        self._url, self._pool = url, pool
        return self

    def close(self) -> None:
        """Close both pools. The embedded server stops when the last process using it exits.

        The async pool (opened by an ``asearch``) is closed on its own event loop when that
        loop can still run; when it has ended (``asyncio.run`` returned), its connections are
        closed directly."""
        self._join_loader()
        if self._apool is not None:
            self._close_async_pool()
        if self._pool is not None:
            self._pool.close()
            self._pool = None
        if self._threads is not None:
            self._threads.shutdown(wait=True)
            self._threads = None

    def _close_async_pool(self) -> None:
        pool, loop = self._apool, self._apool_loop
        self._apool = self._apool_loop = self._alock = None
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if loop is not None and not loop.is_closed():
            if loop is running:  # close() inside the loop: it cannot wait for pool.close()
                _finish_idle(pool)  # asyncio.run would cancel a pending close at its end
                self._closing = loop.create_task(pool.close())
                return
            if not loop.is_running():
                loop.run_until_complete(pool.close())
                return
            asyncio.run_coroutine_threadsafe(pool.close(), loop).result(timeout=30)
            return
        _finish_idle(pool)  # the loop is gone, and with it the pool's tasks

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
        if self._given_apool is not None:  # the caller's, on the caller's loop
            if self._apool is None:
                self._apool = BorrowedAsyncPool(self._given_apool, self.settings)
            return self._apool
        loop = asyncio.get_running_loop()
        if self._apool is not None and self._apool_loop is not loop:
            logger.debug("event loop changed: opening a new async pool")
            self._apool, self._alock = None, None
        if self._apool is None:
            if self._alock is None:
                self._alock = asyncio.Lock()
            async with self._alock:
                if self._apool is None:
                    pool = make_async_pool(self.url, self.settings, self._conn_kwargs)
                    async with atranslated():
                        await pool.open(wait=True, timeout=30)
                    self._apool, self._apool_loop = pool, loop
        return self._apool

    # --- ingest --------------------------------------------------------------------------
    def ingest(self, paths: str | Path | Iterable[str | Path], *, project: str | None = None,
               tenant: str | None = None, prune: bool = False,
               progress: Progress | None = None, follow_symlinks: bool = False) -> IngestReport:
        """Ingest Markdown, text, PDF and DOCX files (directories recursively).

        ``paths`` is one path or a list of them. Unchanged files are skipped by content hash; a
        changed file replaces its previous version in one transaction; a file that fails is
        reported in ``failed`` and leaves its previous version intact, and the run goes on.
        Symlinks that leave their root are skipped unless ``follow_symlinks``. ``prune=True``
        deletes the documents found under these paths before whose file is now gone.
        """
        roots = as_paths(paths)
        scope = (_name("tenant", self.tenant if tenant is None else tenant),
                 _name("project", self.project if project is None else project))
        pool = self._write_pool()
        try:
            with translated(), pool.connection() as conn:
                # A large file's COPY may take longer than a search's statement timeout.
                conn.execute("SELECT set_config('statement_timeout', %s, false)",
                             [str(self.settings.ingest_statement_timeout_ms)])
                try:
                    return ingest_paths(
                        conn, self.embedder, self.settings, paths=roots, tenant=scope[0],
                        project=scope[1], prune=prune, progress=progress,
                        follow_symlinks=follow_symlinks,
                    )
                finally:
                    if not conn.broken:
                        conn.execute("SELECT set_config('statement_timeout', %s, false)",
                                     [str(self.settings.statement_timeout_ms)])
        finally:
            self._reads.clear()  # the ingest re-analysed kb_chunks: new lexeme statistics

    def clear_caches(self) -> None:
        """Forget the cached reads (synonym groups, lexeme statistics, rejected-approach chunks)
        so the next search reads them again. This process's ingests do it
        already; call it after another process wrote, rather than waiting for the TTLs
        (``KB_SYNONYM_CACHE_TTL_SECONDS``, ``KB_CATALOG_CACHE_TTL_SECONDS``)."""
        self._reads.clear()

    def add_synonyms(self, term: str, synonyms: Sequence[str], *, project: str | None = None,
                     tenant: str | None = None) -> None:
        """Add or replace a synonym group for a project (reference §5)."""
        pool = self._write_pool()
        self._reads.clear()
        with translated(), pool.connection() as conn:
            conn.execute(
                "INSERT INTO kb_synonyms (tenant_id, project_key, term, synonyms) "
                "VALUES (%s, %s, %s, %s) ON CONFLICT (tenant_id, project_key, term) "
                "DO UPDATE SET synonyms = EXCLUDED.synonyms, enabled = true",
                [_name("tenant", self.tenant if tenant is None else tenant),
                 _name("project", self.project if project is None else project),
                 _name("term", term), [_name("synonym", s) for s in synonyms]],
            )

    def projects(self, *, tenant: str | None = None) -> dict[str, int]:
        """The tenant's projects that hold documents, with their document counts."""
        pool = self._require_pool()
        with translated(), pool.connection() as conn:
            rows = conn.execute(
                "SELECT project_key, count(*) FROM kb_documents WHERE tenant_id = %s "
                "GROUP BY project_key ORDER BY project_key",
                [_name("tenant", self.tenant if tenant is None else tenant)]).fetchall()
        return {str(p): int(n) for p, n in rows}
    # --- documents from memory, by id (logic in documents.py, SQL in store/records.py) ---
    def _scope(self, project: str | None, tenant: str | None) -> tuple[str, str]:
        return (_name("tenant", self.tenant if tenant is None else tenant),
                _name("project", self.project if project is None else project))

    def add_documents(self, documents: Iterable[Any], *, project: str | None = None,
                      tenant: str | None = None) -> list[str]:
        """Add in-memory documents (:class:`~kb_retriever.documents.DocumentRecord` or mappings
        with ``text``, ``metadata``, ``id``, ``chunks``); returns their ids, in order.

        Each is chunked (unless it brings its chunks), embedded through the embedding cache
        and written in its own transaction, like a file; canonical fields come from its
        metadata or a frontmatter block and are validated as for files. An id that exists is
        replaced (chunks whose text is unchanged keep their ids); unchanged content is a no-op.

        Example::

            ids = kb.add_documents([{"text": "# Pager\n\nPage the on-call via Opsgenie.",
                                     "metadata": {"team": "sre"}, "id": "runbook-pager"}])
        """
        tenant, project = self._scope(project, tenant)
        drafts = [docs.record_draft(docs.as_record(d), self.settings) for d in documents]
        last = {d.source_path: d for d in drafts}  # one id twice in a call: the last wins
        pool = self._write_pool()
        try:
            with translated(), pool.connection() as conn:
                docs.write_records(conn, self.embedder, tenant=tenant, project=project,
                                   drafts=last.values())
                # The trust channels' null for this project, as a file ingest measures it.
                calibrate_project(conn, self.embedder, tenant=tenant, project=project)
        finally:
            self._reads.clear()
        return [d.source_path for d in drafts]

    async def aadd_documents(self, documents: Iterable[Any], *, project: str | None = None,
                             tenant: str | None = None) -> list[str]:
        """The async twin of :meth:`add_documents`. Embedding is CPU work and the write is one
        COPY per document, so it runs in a worker thread (the event loop stays free)."""
        items = list(documents)
        return await asyncio.to_thread(self.add_documents, items, project=project, tenant=tenant)

    def _read(self, stmt: records.Statement) -> list[dict[str, Any]]:
        with translated(), self._require_pool().connection() as conn, \
                conn.cursor(row_factory=dict_row) as cur:
            cur.execute(*stmt)
            return cur.fetchall()

    async def _aread(self, stmt: records.Statement) -> list[dict[str, Any]]:
        pool = await self._async_pool()
        async with atranslated(), pool.connection() as conn, \
                conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(*stmt)
            return await cur.fetchall()

    def _write(self, stmts: list[records.Statement]) -> int:
        """Run ``stmts`` in one transaction; the first one's count (returned or affected)."""
        pool = self._write_pool()
        try:
            with translated(), pool.connection() as conn, conn.transaction():
                counts = [_count(conn.execute(*s)) for s in stmts]
        finally:
            self._reads.clear()
        return counts[0]

    async def _awrite(self, stmts: list[records.Statement]) -> int:
        pool = await self._async_pool()
        try:
            async with atranslated(), pool.connection() as conn, conn.transaction():
                counts = [await _acount(await conn.execute(*s)) for s in stmts]
        finally:
            self._reads.clear()
        return counts[0]

    def get_by_ids(self, ids: Iterable[str], *, project: str | None = None,
                   tenant: str | None = None, with_embeddings: bool = False
                   ) -> list[StoredDocument]:
        """The documents with these ids (a file's id is its path), in the order asked;
        unknown ids are skipped. ``with_embeddings`` also reads each chunk's vector."""
        wanted = docs.validate_ids(ids)
        found = records.documents_from_rows(self._read(records.get_documents_sql(
            *self._scope(project, tenant), wanted, with_embeddings=with_embeddings)))
        return _in_order(found, wanted)

    async def aget_by_ids(self, ids: Iterable[str], *, project: str | None = None,
                          tenant: str | None = None, with_embeddings: bool = False
                          ) -> list[StoredDocument]:
        wanted = docs.validate_ids(ids)
        found = records.documents_from_rows(await self._aread(records.get_documents_sql(
            *self._scope(project, tenant), wanted, with_embeddings=with_embeddings)))
        return _in_order(found, wanted)

    def get_chunks(self, ids: Iterable[str] | None = None, *,
                   filters: SearchFilters | Mapping[str, Any] | None = None,
                   project: str | None = None, tenant: str | None = None) -> list[StoredChunk]:
        """The chunks with these stable ids (``Hit.chunk_uid``; in the order asked) and/or
        matching ``filters`` (the search's filters; in document order)."""
        wanted, parsed = _selection(ids, filters)
        found = records.chunks_from_rows(self._read(
            records.get_chunks_sql(*self._scope(project, tenant), wanted, parsed)))
        return found if wanted is None else _in_order(found, wanted)

    async def aget_chunks(self, ids: Iterable[str] | None = None, *,
                          filters: SearchFilters | Mapping[str, Any] | None = None,
                          project: str | None = None, tenant: str | None = None
                          ) -> list[StoredChunk]:
        wanted, parsed = _selection(ids, filters)
        found = records.chunks_from_rows(await self._aread(
            records.get_chunks_sql(*self._scope(project, tenant), wanted, parsed)))
        return found if wanted is None else _in_order(found, wanted)

    def delete(self, ids: Iterable[str], *, project: str | None = None,
               tenant: str | None = None) -> int:
        """Delete whole documents by id (a file's id is its path: its key); returns how many
        went. Unknown ids are ignored. A deleted file comes back on its next ingest."""
        return self._write(records.delete_documents_sql(*self._scope(project, tenant),
                                                        docs.validate_ids(ids)))

    async def adelete(self, ids: Iterable[str], *, project: str | None = None,
                      tenant: str | None = None) -> int:
        return await self._awrite(records.delete_documents_sql(*self._scope(project, tenant),
                                                               docs.validate_ids(ids)))

    def delete_chunks(self, ids: Iterable[str] | None = None, *,
                      filters: SearchFilters | Mapping[str, Any] | None = None,
                      project: str | None = None, tenant: str | None = None) -> int:
        """Delete chunks by stable id and/or ``filters``; returns how many went. A document
        left without chunks goes too."""
        return self._write(records.delete_chunks_sql(*self._scope(project, tenant),
                                                     *_selection(ids, filters)))

    async def adelete_chunks(self, ids: Iterable[str] | None = None, *,
                             filters: SearchFilters | Mapping[str, Any] | None = None,
                             project: str | None = None, tenant: str | None = None) -> int:
        return await self._awrite(records.delete_chunks_sql(*self._scope(project, tenant),
                                                            *_selection(ids, filters)))

    def clear(self, *, project: str | None = None, tenant: str | None = None) -> int:
        """Delete every document of the project (files and documents added from memory)."""
        return self._write(records.clear_sql(*self._scope(project, tenant)))

    async def aclear(self, *, project: str | None = None, tenant: str | None = None) -> int:
        return await self._awrite(records.clear_sql(*self._scope(project, tenant)))

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
        elif isinstance(project, Iterable):
            projects = list(project)
        else:
            raise InputError("project must be a project key or a list of them")
        if not projects:
            raise InputError("project must name at least one project")
        vec = None
        if query_embedding is not None:
            vec = self._vector(query_embedding)
        return SearchRequest(
            query=validate_query(query, self.settings),
            scope=Scope(tenant=_name("tenant", self.tenant if tenant is None else tenant),
                        projects=tuple(dict.fromkeys(_name("project", p) for p in projects))),
            limit=validate_limit(self.settings.default_limit if limit is None else limit,
                                 self.settings),
            filters=parse_filters(filters),
            mention_doc_ids=_doc_ids(mention_doc_ids),
            query_embedding=vec,
            now=_moment(now),
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

    def _executor(self) -> ThreadPoolExecutor:
        """The worker threads of parallel legs, started on first use."""
        if self._threads is None:
            self._threads = ThreadPoolExecutor(max_workers=self.settings.pool_max_size,
                                               thread_name_prefix="kb-retriever-leg")
        return self._threads

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
        session = SearchSession(self._require_pool(), self._reads, self.settings,
                                self._executor)

        def embed(text: str) -> np.ndarray:
            session.release()  # no connection sits idle while the model runs
            return self._embed(text)

        try:
            return run_plan(search_plan(req, self.settings), session.fetch, embed,
                            session.fetch_all)
        finally:
            session.release()

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
        session = AsyncSearchSession(await self._async_pool(), self._reads, self.settings)

        async def embed(text: str) -> np.ndarray:
            await session.release()
            return self._vector(await asyncio.to_thread(self._embed_raw, text))

        try:
            return await arun_plan(search_plan(req, self.settings), session.fetch, embed,
                                   session.fetch_all)
        finally:
            await session.release()

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
