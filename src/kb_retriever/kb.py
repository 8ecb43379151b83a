"""The entry object: :class:`KnowledgeBase`."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .embedding import Embedder, default_embedder, embedder_errors, reads
from .embedding.base import check_vector
from .errors import ConfigError, InputError
from .filters.dimensions import SearchFilters, parse_filters
from .kb_documents import DocumentMethods, valid_name
from .models import SearchResult
from .search import drive
from .search.modes import Legs
from .search.plan import SearchRequest, mention_ids, moment, validate_limit, validate_query
from .settings import Settings, load_settings, refuse_blank_location
from .store import schema
from .store.connection import finish
from .store.embedded import restart_if_stopped, start_embedded
from .store.pools import Pools
from .store.reader import ReadCache
from .store.sql import Scope
from .write.from_files import IngestReport, Progress, as_paths, ingest_paths
from .write.reembed import ReembedReport, reembed_project

if TYPE_CHECKING:  # the pools a caller may lend (store/pools.py checks them)
    from psycopg_pool import AsyncConnectionPool, ConnectionPool

logger = logging.getLogger(__name__)

__all__ = ["KnowledgeBase"]


def _quietly(load: Any) -> None:
    try:
        load()
    except Exception:  # the first embed raises it again, typed, where the caller sees it
        logger.debug("embedder warm-up failed", exc_info=True)


class KnowledgeBase(DocumentMethods):
    """A knowledge base in PostgreSQL + pgvector: ingest files, search them.

    With no database URL (argument, ``settings.database_url`` or ``KB_DATABASE_URL``) an
    embedded PostgreSQL is started under ``KB_HOME``. Constructing does no I/O; ``open()`` (or
    ``with``/``async with``) connects and applies migrations.

    ``pool=`` / ``async_pool=`` take a ``psycopg_pool.ConnectionPool`` /
    ``AsyncConnectionPool`` you opened: the knowledge base uses it (for the other flavour it
    opens a small pool of its own to the same server, with the pool's ``conninfo`` and
    ``kwargs``) and never closes it (``store/borrowed.py`` says what it sets on a borrowed
    connection).

    ``replica_urls=`` (else ``KB_REPLICA_URLS``) names streaming replicas: searches and reads
    go to them in turn, writes to the primary; a replica that is down or lags more than
    ``KB_REPLICA_MAX_LAG_S`` is skipped, and with the primary down the knowledge base still
    opens and searches (decision 0012).

    Example::

        from kb_retriever import KnowledgeBase, compose_prompt

        with KnowledgeBase(project="docs") as kb:
            kb.ingest(["examples/kb"])
            kb.add_documents([{"text": "Deploys freeze on Fridays.", "id": "note-freeze"}])
            result = kb.search("what cache layer did we standardise on?")
            print(result.primary[0].document.slug)
            print(compose_prompt(result))
    """

    #: Whether :meth:`open` registers the embedder's model (and builds its index) and loads
    #: it: not for the CLI's listings and deletes (:class:`CatalogBase`).
    _registers_model = True

    def __init__(self, settings: Settings | None = None, *, embedder: Embedder | None = None,
                 database_url: str | None = None, home: str | Path | None = None,
                 tenant: str = "default", project: str = "default",
                 pool: ConnectionPool | None = None,
                 async_pool: AsyncConnectionPool | None = None,
                 replica_urls: Sequence[str] | None = None) -> None:
        base = settings or load_settings()
        refuse_blank_location(database_url, home)
        updates: dict[str, Any] = {}
        if database_url is not None:
            updates["database_url"] = database_url
        if replica_urls is not None:
            if isinstance(replica_urls, str) or not all(
                    isinstance(u, str) and u.strip() for u in replica_urls):
                raise ConfigError("replica_urls takes a list of connection strings")
            updates["replica_urls"] = tuple(u.strip() for u in replica_urls)
        if home is not None:
            updates["home"] = Path(home)
        self.settings = base.model_copy(update=updates) if updates else base
        self.embedder = embedder or default_embedder(self.settings.embedder)
        if not isinstance(self.embedder, Embedder):
            raise ConfigError("embedder must provide model_id, dimension, embed_documents, embed_query")
        self.tenant = valid_name("tenant", tenant)
        self.project = valid_name("project", project)
        # The answers of the reads a search plan marks cacheable (synonyms, the scope's
        # statistics, calibration and rejected-approach vectors), parsed, for their TTL.
        self._pools = Pools(self.settings, pool=pool, async_pool=async_pool)
        self._reads = ReadCache(url=lambda: self._pools.opened_url)
        self._loader: threading.Thread | None = None  # loads the embedder during open()
        self._opening = threading.Lock()  # one open() at a time: threads that race open once

    # --- lifecycle -----------------------------------------------------------------------
    @property
    def url(self) -> str:
        return self._pools.url

    def open(self) -> KnowledgeBase:
        """Connect (starting the embedded server if needed) and migrate. Idempotent.

        An embedder with a ``load()`` method (the default model) loads in a thread meanwhile,
        so the first search does not wait for both one after the other. Threads that open it
        at once (a framework store's first calls) wait for one open and share its pools."""
        if self._pools.is_open:
            return self
        with self._opening:
            if self._pools.is_open:  # another thread opened it meanwhile
                return self
            return self._open_once()

    @property
    def is_open(self) -> bool:
        """Whether :meth:`open` has connected (and :meth:`close` has not closed since)."""
        return self._pools.is_open

    def _open_once(self) -> KnowledgeBase:
        load = getattr(self.embedder, "load", None)
        if callable(load) and self._loader is None and self._registers_model:
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
        url = self._pools.borrowed_conninfo() or self.settings.database_url
        if url is None:  # (a relative home is this directory's, also after a chdir)
            home = self.settings.home.expanduser().absolute()
            url = start_embedded(home)
            self._pools.restart = lambda: restart_if_stopped(home)  # a search's last resort
        self._pools.open(url, schema.Choices(dimension=self.embedder.dimension,
                                             model_id=self.embedder.model_id,
                                             fts_language=self.settings.fts_language,
                                             register=self._registers_model))
        return self

    def close(self) -> None:
        """Close both pools. The embedded server stops when the last process using it exits.

        The async pool (opened by an ``asearch``) is closed on its own event loop when that
        loop can still run; when it has ended (``asyncio.run`` returned), its connections are
        closed directly. The writes of async twins still running in their threads end first
        (a cancelled ``aadd_documents`` runs to its commit or rollback)."""
        self._pools.thread_writes.wait()  # outside the lock: such a write may open the base
        with self._opening:
            self._join_loader()
            self._pools.close()

    async def aclose(self) -> None:
        await finish(self._pools.aclose())  # cancelled meanwhile, it would stay half-closed
        self._join_loader()

    def __enter__(self) -> KnowledgeBase:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> KnowledgeBase:
        try:
            await asyncio.to_thread(self.open)
            await self._pools.asynchronous()
        except BaseException:  # cancelled or failed: no __aexit__ runs, nothing may stay open
            await finish(self._pools.abandon(self.close))
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # --- ingest --------------------------------------------------------------------------
    def ingest(self, paths: str | Path | Iterable[str | Path], *, project: str | None = None,
               tenant: str | None = None, prune: bool = False,
               progress: Progress | None = None, follow_symlinks: bool = False) -> IngestReport:
        """Ingest Markdown, text, PDF and DOCX files (directories recursively).

        ``paths`` is one path or a list of them. Unchanged files are skipped by content hash; a
        changed file replaces its previous version in one transaction; a file that fails is
        reported in ``failed`` and leaves its previous version intact, and the run goes on.
        Symlinks that leave their root are skipped unless ``follow_symlinks``. ``prune=True``
        deletes the documents found under these paths before whose file is now gone. A
        connection lost mid-way raises :class:`~kb_retriever.IngestInterruptedError`, whose
        ``report`` says what was saved before it.
        """
        roots = as_paths(paths)
        scope = (valid_name("tenant", self.tenant if tenant is None else tenant),
                 valid_name("project", self.project if project is None else project))
        try:
            with self._pools.writing() as session:
                return ingest_paths(session, self.embedder, self.settings, paths=roots,
                                    tenant=scope[0], project=scope[1], prune=prune,
                                    progress=progress, follow_symlinks=follow_symlinks)
        finally:
            self._reads.clear()  # new statistics, calibration, rejected approaches

    def clear_caches(self) -> None:
        """Forget the cached reads (synonym groups, lexeme statistics, rejected-approach chunks)
        so the next search reads them again. This process's ingests do it
        already; call it after another process wrote, rather than waiting for the TTLs
        (``KB_SYNONYM_CACHE_TTL_SECONDS``, ``KB_CATALOG_CACHE_TTL_SECONDS``)."""
        self._reads.clear()

    def add_synonyms(self, term: str, synonyms: Sequence[str], *, project: str | None = None,
                     tenant: str | None = None) -> None:
        """Add or replace a synonym group for a project (reference §5)."""
        if isinstance(synonyms, str) or not isinstance(synonyms, Iterable):
            raise InputError(f"synonyms must be a list of strings, got {type(synonyms).__name__}")
        scope = (valid_name("tenant", self.tenant if tenant is None else tenant),
                 valid_name("project", self.project if project is None else project))
        group = (valid_name("term", term), [valid_name("synonym", s) for s in synonyms])
        try:
            with self._pools.writing() as session:
                session.add_synonyms(*scope, *group)
        finally:
            self._reads.clear()  # after the commit: a search meanwhile read the old groups

    def reembed(self, project: str | None = None, *, tenant: str | None = None) -> ReembedReport:
        """Move a project to this knowledge base's embedding model: each chunk is embedded
        again (the embedding cache first) and the project switches in one transaction, so
        searches see the old model until then and this one after; then it is calibrated.
        A project already on this model is left as it is.

        Several models share a database: each project keeps the model it was first written
        with, and a knowledge base whose embedder differs gets a :class:`SchemaError` on that
        project's searches and writes until it is moved. Knowledge bases still opened with
        the old embedder get that error after the move.
        """
        scope = (valid_name("tenant", self.tenant if tenant is None else tenant),
                 valid_name("project", self.project if project is None else project))
        try:
            with self._pools.writing() as session:
                return reembed_project(session, self.embedder, tenant=scope[0], project=scope[1])
        finally:
            self._reads.clear()

    async def areembed(self, project: str | None = None, *,
                       tenant: str | None = None) -> ReembedReport:
        """The async twin of :meth:`reembed` (it runs in a worker thread)."""
        return await self._pools.thread_writes.run(self.reembed, project, tenant=tenant)

    def projects(self, *, tenant: str | None = None) -> dict[str, int]:
        """The tenant's projects that hold documents, with their document counts."""
        tenant = valid_name("tenant", self.tenant if tenant is None else tenant)
        return self._reading(lambda session: session.projects(tenant), primary=True)
    # --- search --------------------------------------------------------------------------
    def _request(self, query: Any, *, limit: int | None, project: str | Sequence[str] | None,
                 tenant: str | None, filters: SearchFilters | Mapping[str, Any] | None,
                 mention_doc_ids: Iterable[int] | None,
                 query_embedding: Sequence[float] | None, now: datetime | None,
                 legs: Legs | None = None) -> SearchRequest:
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
        if legs is not None and not isinstance(legs, Legs):
            raise ConfigError(f"legs takes a kb_retriever.search.Legs, not {type(legs).__name__}")
        legs = legs or Legs()
        text = self._query_text(query, by_vector=vec is not None, legs=legs)
        tenant_key = valid_name("tenant", self.tenant if tenant is None else tenant)
        project_keys = tuple(dict.fromkeys(valid_name("project", p) for p in projects))
        size = validate_limit(self.settings.default_limit if limit is None else limit, self.settings)
        parsed, mentions, at = parse_filters(filters), mention_ids(mention_doc_ids), moment(now)
        return SearchRequest(
            query=text, scope=Scope(tenant=tenant_key, projects=project_keys, space=self._pools.space),
            limit=size, filters=parsed, mention_doc_ids=mentions, query_embedding=vec, now=at,
            legs=legs, embedder_reads=reads(self.embedder, text))

    def _query_text(self, query: Any, *, by_vector: bool, legs: Legs) -> str:
        """The query's text; "" for a search by its embedding alone (no text, or only
        whitespace, next to ``query_embedding``), which runs the vector leg alone."""
        if by_vector and (query is None or (isinstance(query, str) and not query.strip())):
            if legs.vector_weight == 0:
                raise InputError("a search with vector_weight=0 (full-text only) needs query text")
            return ""
        return validate_query(query, self.settings)

    def _vector(self, values: Sequence[float]) -> np.ndarray:
        checked = check_vector(values, dimension=self.embedder.dimension, model_id=self.embedder.model_id)
        return checked.astype(np.float32)

    def _embed(self, text: str) -> np.ndarray:
        return self._vector(self._embed_raw(text))

    def _embed_raw(self, text: str) -> Sequence[float]:
        with embedder_errors():
            return self.embedder.embed_query(text)

    def search(self, query: str | None, *, limit: int | None = None,
               project: str | Sequence[str] | None = None, tenant: str | None = None,
               filters: SearchFilters | Mapping[str, Any] | None = None,
               mention_doc_ids: Iterable[int] | None = None,
               query_embedding: Sequence[float] | None = None,
               now: datetime | None = None, consistent: bool = False,
               legs: Legs | None = None) -> SearchResult:
        """Search and return a :class:`SearchResult` (primary, expanded, rejected, runner_up, meta).

        ``project`` may name several projects; ``filters`` is a mapping of the keys in
        :data:`kb_retriever.filters.VALID_KEYS` (unknown keys raise :class:`FilterError`). With
        read replicas the search runs on one of them; ``consistent=True`` waits for nothing
        but takes a replica only once it has this process's last write, else the primary.

        ``query_embedding`` replaces the query's embedding; with it, ``query`` may be None or
        "" (a search by the vector alone: the vector leg only, no text signals). ``legs``
        (:class:`kb_retriever.search.modes.Legs`) sets this search's leg weights and similarity
        floor.
        """
        req = self._request(query, limit=limit, project=project, tenant=tenant, filters=filters,
                            mention_doc_ids=mention_doc_ids, query_embedding=query_embedding,
                            now=now, legs=legs)
        return drive.search(self._pools, self._reads, self.settings, req, self._embed,
                            consistent=bool(consistent))

    async def asearch(self, query: str | None, *, limit: int | None = None,
                      project: str | Sequence[str] | None = None, tenant: str | None = None,
                      filters: SearchFilters | Mapping[str, Any] | None = None,
                      mention_doc_ids: Iterable[int] | None = None,
                      query_embedding: Sequence[float] | None = None,
                      now: datetime | None = None, consistent: bool = False,
                      legs: Legs | None = None) -> SearchResult:
        """The async twin of :meth:`search` (the embedding runs in a worker thread)."""
        req = self._request(query, limit=limit, project=project, tenant=tenant, filters=filters,
                            mention_doc_ids=mention_doc_ids, query_embedding=query_embedding,
                            now=now, legs=legs)

        async def embed(text: str) -> np.ndarray:
            return self._vector(await asyncio.to_thread(self._embed_raw, text))

        return await drive.asearch(self._pools, self._reads, self.settings, req, embed,
                                   consistent=bool(consistent))

    def search_sql(self, query: str | None, **kwargs: Any) -> str:
        """The statements :meth:`search` runs for ``query`` (same keyword arguments), in the
        order it runs them: the search runs, its reads recorded as they go to the database
        (none answered from the cache), each printed with its stage and the values it binds."""
        req = self._request(query, limit=kwargs.pop("limit", None),
                            project=kwargs.pop("project", None),
                            tenant=kwargs.pop("tenant", None), filters=kwargs.pop("filters", None),
                            mention_doc_ids=kwargs.pop("mention_doc_ids", None),
                            query_embedding=kwargs.pop("query_embedding", None),
                            now=kwargs.pop("now", None), legs=kwargs.pop("legs", None))
        if kwargs:
            raise InputError(f"search_sql got unknown argument(s) {sorted(kwargs)}")
        return drive.search_sql(self._pools, self.settings, req, self._embed)


class CatalogBase(KnowledgeBase):
    """A knowledge base opened to list and delete (the CLI's ``projects``, ``documents`` and
    ``delete``): :meth:`open` neither registers the embedder's model (so builds no index for
    it, a ``CREATE INDEX`` that holds writes back) nor loads it. A delete recalibrates the
    project when the embedder is the project's model; searches need a :class:`KnowledgeBase`."""

    _registers_model = False
