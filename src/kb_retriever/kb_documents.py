"""The knowledge base's documents by id: add from memory, get, list, delete, clear.

:class:`DocumentMethods` is the part of :class:`~kb_retriever.kb.KnowledgeBase` that reads and
writes whole documents and chunks by id (the logic is ``write.from_memory``'s, the SQL
``store.by_id``'s); the sync and async methods differ only at the I/O line.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

from .checks import valid_name
from .embedding import Embedder
from .errors import InputError, KbError, UnavailableError, WriteError
from .filters.dimensions import SearchFilters, parse_filters
from .models import DocumentSummary, ProjectSummary, StoredChunk, StoredDocument
from .settings import Settings
from .store import by_id as records
from .store.connection import is_retryable
from .store.pools import Pools
from .store.reader import ReadCache
from .store.session import Session
from .store.writer import PieceKey, whole_metadata
from .write import from_memory as docs
from .write.recalibrate import after_write

__all__ = ["DocumentMethods", "valid_name"]

T = TypeVar("T")
logger = logging.getLogger(__name__)


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


class DocumentMethods:
    """Documents and chunks by id, for :class:`~kb_retriever.kb.KnowledgeBase`."""

    settings: Settings
    embedder: Embedder
    tenant: str
    project: str
    _pools: Pools
    _reads: ReadCache

    def _scope(self, project: str | None, tenant: str | None) -> tuple[str, str]:
        return (valid_name("tenant", self.tenant if tenant is None else tenant),
                valid_name("project", self.project if project is None else project))

    def add_documents(self, documents: Iterable[Any], *, project: str | None = None,
                      tenant: str | None = None) -> list[str]:
        """Add in-memory documents (:class:`~kb_retriever.models.DocumentRecord` or mappings
        with ``text``, ``metadata``, ``id``, ``chunks``); returns their ids, in order.

        Each is chunked (unless it brings its chunks), embedded through the embedding cache
        and written in its own transaction, like a file; canonical fields come from its
        metadata or a frontmatter block and are validated as for files. An id that exists is
        replaced (chunks whose text is unchanged keep their ids); unchanged content is a no-op.
        An id names one thing: a part (:meth:`upsert_chunks`) with the same id goes, in the
        same transaction.

        Example::

            ids = kb.add_documents([{"text": "# Pager\n\nPage the on-call via Opsgenie.",
                                     "metadata": {"team": "sre"}, "id": "runbook-pager"}])
        """
        tenant, project = self._scope(project, tenant)
        drafts = [docs.record_draft(r, self.settings) for r in docs.as_records(documents)]
        unique = docs.unique_drafts(drafts)
        try:
            with self._pools.writing() as session:
                written = docs.write_records(
                    session, self.embedder, tenant=tenant, project=project, drafts=unique,
                    stored_hash=lambda draft: self._stored_hash(tenant, project, draft))
                after_write(session, self.embedder, tenant, project, written.chunks)
        finally:
            self._reads.clear()
        if written.failed:
            raise WriteError(written.saved, written.failed)
        return [d.source_path for d in drafts]

    def _stored_hash(self, tenant: str, project: str, draft: Any) -> str | None:
        """The content hash stored for ``draft``'s id, read on the primary on a new connection
        outside the pool (a commit in doubt: the write's connection was lost, and its writer
        still holds it: ``connection.unpooled``)."""
        with self._pools.session(unpooled=True) as session:
            return session.stored_version(tenant, project, draft.source_path)[0]

    def _stored_chunks(self, tenant: str, project: str, draft: Any,
                       uids: list[str]) -> tuple[list[StoredChunk], bool]:
        """The chunks stored with ids ``uids``, and whether ``draft``'s document holds its
        fields, read as :meth:`_stored_hash` reads (a replica may not have the commit yet,
        and this process's mark is not moved past it)."""
        stmt = records.get_chunks_sql(tenant, project, uids)
        with self._pools.session(unpooled=True) as session:
            return (records.chunks_from_rows(session.read([stmt])[0]),
                    session.holds_fields(tenant, project, draft))

    def upsert_chunks(self, document_id: str, chunks: Iterable[Any], *,
                      metadata: Mapping[str, Any] | None = None, version: str | None = None,
                      project: str | None = None, tenant: str | None = None,
                      piece_key: PieceKey = whole_metadata) -> list[str]:
        """Add chunks to a document, or replace the chunks with the same ids; its other chunks
        stay. Returns the chunks' ids, in order.

        ``chunks`` are :class:`~kb_retriever.models.ChunkRecord` s or mappings (``text``,
        ``id``, ``metadata``, ``embedding``), each stored exactly as given (not split again;
        a chunk without an id gets one derived from the document's id and its text). The
        document is created when missing; ``metadata`` gives its fields (canonical ones
        included: ``slug``, ``type``, ``status`` …) and replaces the ones it had. Its text (as
        :meth:`get_by_ids` returns it) is its chunks' in order. This is how the framework
        vector stores keep every split of one canonical document (decision 0007).

        ``version`` (a hash of the source, say) marks a version of the document: chunks added
        with another version than the stored one replace all its chunks, and within one
        version a chunk replaces a stored chunk (that the call does not name) of its text and
        its ``piece_key``: the same piece added again under a new id (LlamaIndex gives every
        node a new id; two stored chunks of one piece stand for two new ones). ``piece_key``
        maps a chunk's metadata to what tells pieces of one text apart; by default all of it,
        so a footer on two pages is two chunks. A document of its own (:meth:`add_documents`)
        whose id a chunk takes goes, in the same transaction: an id names one thing.

        Example::

            kb.upsert_chunks("dec-cache", [{"text": "We chose Redis.", "id": "split-1"}],
                             metadata={"type": "decision", "status": "accepted",
                                       "slug": "dec-cache"})
        """
        tenant, project = self._scope(project, tenant)
        draft, ids = docs.chunks_draft(document_id, chunks, metadata, self.settings, version)
        try:
            with self._pools.writing() as session:
                written = docs.write_chunks(
                    session, self.embedder, tenant=tenant, project=project, draft=draft,
                    stored=lambda uids: self._stored_chunks(tenant, project, draft, uids),
                    piece_key=piece_key)
                after_write(session, self.embedder, tenant, project, len(written))
        finally:
            self._reads.clear()
        return ids

    async def aupsert_chunks(self, document_id: str, chunks: Iterable[Any], *,
                             metadata: Mapping[str, Any] | None = None,
                             version: str | None = None, project: str | None = None,
                             tenant: str | None = None,
                             piece_key: PieceKey = whole_metadata) -> list[str]:
        """The async twin of :meth:`upsert_chunks` (in a worker thread, as
        :meth:`aadd_documents`)."""
        items = list(chunks) if isinstance(chunks, Iterable) else chunks
        return await self._pools.thread_writes.run(
            self.upsert_chunks, document_id, items, metadata=metadata, version=version,
            project=project, tenant=tenant, piece_key=piece_key)

    async def aadd_documents(self, documents: Iterable[Any], *, project: str | None = None,
                             tenant: str | None = None) -> list[str]:
        """The async twin of :meth:`add_documents`. Embedding is CPU work and the write is one
        COPY per document, so it runs in a worker thread (the event loop stays free). A
        cancelled call does not stop a write that has begun: it runs to its commit or
        rollback, and :meth:`aclose` / :meth:`close` wait for it."""
        items = docs.as_records(documents)
        return await self._pools.thread_writes.run(self.add_documents, items, project=project,
                                                   tenant=tenant)

    def _read(self, stmts: list[records.Statement], consistent: bool = False, *,
              vectors: bool = False) -> list[list[dict[str, Any]]]:
        """The rows of each statement, all read in one snapshot, on a read server
        (:meth:`_reading`); with ``vectors`` (statements that read embeddings) in the binary
        format."""
        return self._reading(lambda session: session.read(stmts, binary=vectors), consistent)

    def _reading(self, read: Callable[[Session], T], consistent: bool = False, *,
                 primary: bool = False) -> T:
        """``read`` of a session on a read server (the primary with ``primary``): a replica
        that is lost meanwhile gives way to the next; the primary's pool is checked and read
        again, once, when the server dropped its connections (a restart), as a search's read
        is (each idle connection failed a call)."""
        checked = False
        for _ in range(len(self._pools.replicas) + 2):
            target = None if primary else self._pools.read_target(consistent)
            try:
                with self._pools.session(target) as session:
                    return read(session)
            except UnavailableError as exc:
                if target is not None and target.replica is not None:
                    self._pools.replicas.mark_down(target.replica)
                    continue
                if checked or not is_retryable(exc.__context__):
                    raise
                checked = True
                (self._pools.sync() if target is None else target.pool).check()
        raise AssertionError("unreachable")  # pragma: no cover

    async def _aread(self, stmts: list[records.Statement], consistent: bool = False, *,
                     vectors: bool = False) -> list[list[dict[str, Any]]]:
        checked = False
        for _ in range(len(self._pools.replicas) + 2):
            target = await self._pools.aread_target(consistent)
            try:
                async with self._pools.asession(target) as session:
                    return await session.read(stmts, binary=vectors)
            except UnavailableError as exc:  # as _reading
                if target.replica is not None:
                    self._pools.replicas.mark_down(target.replica)
                    continue
                if checked or not is_retryable(exc.__context__):
                    raise
                checked = True
                await target.pool.check()
        raise AssertionError("unreachable")  # pragma: no cover

    def _write(self, batch: records.Batch, tenant: str, project: str) -> int:
        """Run ``batch`` (a delete) in one transaction (again, if PostgreSQL aborts it as a
        deadlock victim); its counted statements' counts (returned or affected), summed. What
        it deleted counts toward the project's recalibration, as writes do (``after_write``)."""
        try:
            with self._pools.writing() as session:
                count = session.run(batch)
                after_write(session, self.embedder, tenant, project, count)
        finally:
            self._reads.clear()
        return count

    async def _awrite(self, batch: records.Batch, tenant: str, project: str) -> int:
        try:
            async with self._pools.awriting() as session:
                count = await session.run(batch)
                if not count:  # else _counted settles, with the count (once, not twice)
                    await session.settle(tenant, project)
        finally:
            self._reads.clear()
        if count:  # a calibration embeds its probes: in a worker thread, as writes run
            await self._pools.thread_writes.run(self._counted, tenant, project, count)
        return count

    def _counted(self, tenant: str, project: str, count: int) -> None:
        """``after_write`` for an async delete that committed: never its error."""
        try:
            with self._pools.writing() as session:
                after_write(session, self.embedder, tenant, project, count)
        except KbError as exc:  # the delete is done; the next write counts and calibrates
            logger.warning("calibration of %s/%s postponed: %s", tenant, project, exc)
        self._reads.clear()

    def get_by_ids(self, ids: Iterable[str], *, project: str | None = None,
                   tenant: str | None = None, with_embeddings: bool = False,
                   consistent: bool = False) -> list[StoredDocument]:
        """The documents with these ids (a file's id is its path), in the order asked;
        unknown ids are skipped. ``with_embeddings`` also reads each chunk's vector. With read
        replicas, ``consistent=True`` reads from one that has this process's writes (else the
        primary), as :meth:`search` does."""
        wanted = docs.validate_ids(ids)
        found = records.documents_from_rows(*self._read(records.get_documents_sql(
            *self._scope(project, tenant), wanted, with_embeddings=with_embeddings),
            bool(consistent), vectors=with_embeddings))
        return _in_order(found, wanted)

    async def aget_by_ids(self, ids: Iterable[str], *, project: str | None = None,
                          tenant: str | None = None, with_embeddings: bool = False,
                          consistent: bool = False) -> list[StoredDocument]:
        wanted = docs.validate_ids(ids)
        found = records.documents_from_rows(*await self._aread(records.get_documents_sql(
            *self._scope(project, tenant), wanted, with_embeddings=with_embeddings),
            bool(consistent), vectors=with_embeddings))
        return _in_order(found, wanted)

    def get_chunks(self, ids: Iterable[str] | None = None, *,
                   filters: SearchFilters | Mapping[str, Any] | None = None,
                   project: str | None = None, tenant: str | None = None,
                   with_embeddings: bool = False, consistent: bool = False
                   ) -> list[StoredChunk]:
        """The chunks with these stable ids (``Hit.chunk_uid``; in the order asked) and/or
        matching ``filters`` (the search's filters; in document order). ``with_embeddings``
        also reads each chunk's vector."""
        wanted, parsed = _selection(ids, filters)
        found = records.chunks_from_rows(self._read(
            [records.get_chunks_sql(*self._scope(project, tenant), wanted, parsed,
                                    with_embeddings=with_embeddings)], bool(consistent),
            vectors=with_embeddings)[0])
        return found if wanted is None else _in_order(found, wanted)

    async def aget_chunks(self, ids: Iterable[str] | None = None, *,
                          filters: SearchFilters | Mapping[str, Any] | None = None,
                          project: str | None = None, tenant: str | None = None,
                          with_embeddings: bool = False, consistent: bool = False
                          ) -> list[StoredChunk]:
        wanted, parsed = _selection(ids, filters)
        found = records.chunks_from_rows((await self._aread(
            [records.get_chunks_sql(*self._scope(project, tenant), wanted, parsed,
                                    with_embeddings=with_embeddings)], bool(consistent),
            vectors=with_embeddings))[0])
        return found if wanted is None else _in_order(found, wanted)

    def delete(self, ids: Iterable[str], *, project: str | None = None,
               tenant: str | None = None) -> int:
        """Delete whole documents by id (a file's id is its path: its key); returns how many
        went. Unknown ids are ignored. A deleted file comes back on its next ingest."""
        scope = self._scope(project, tenant)
        return self._write(records.delete_documents_sql(*scope, docs.validate_ids(ids)), *scope)

    async def adelete(self, ids: Iterable[str], *, project: str | None = None,
                      tenant: str | None = None) -> int:
        scope = self._scope(project, tenant)
        return await self._awrite(records.delete_documents_sql(*scope, docs.validate_ids(ids)),
                                  *scope)

    def delete_named(self, ids: Iterable[str], *, project: str | None = None,
                     tenant: str | None = None) -> int:
        """Delete what each id names, in one transaction: a document of its own
        (:meth:`add_documents`, a file), or a chunk that :meth:`upsert_chunks` wrote (its
        document goes with its last chunk). A document that holds such chunks is named by
        their ids, not its own: :meth:`delete` deletes it whole. Unknown ids are ignored;
        returns how many documents and chunks went. The framework stores delete by it."""
        scope = self._scope(project, tenant)
        return self._write(records.delete_named_sql(*scope, docs.validate_ids(ids)), *scope)

    async def adelete_named(self, ids: Iterable[str], *, project: str | None = None,
                            tenant: str | None = None) -> int:
        scope = self._scope(project, tenant)
        return await self._awrite(records.delete_named_sql(*scope, docs.validate_ids(ids)),
                                  *scope)

    def delete_chunks(self, ids: Iterable[str] | None = None, *,
                      filters: SearchFilters | Mapping[str, Any] | None = None,
                      project: str | None = None, tenant: str | None = None) -> int:
        """Delete chunks by stable id and/or ``filters``; returns how many went. A document
        left without chunks goes too."""
        scope = self._scope(project, tenant)
        return self._write(records.delete_chunks_sql(*scope, *_selection(ids, filters)), *scope)

    async def adelete_chunks(self, ids: Iterable[str] | None = None, *,
                             filters: SearchFilters | Mapping[str, Any] | None = None,
                             project: str | None = None, tenant: str | None = None) -> int:
        scope = self._scope(project, tenant)
        return await self._awrite(records.delete_chunks_sql(*scope, *_selection(ids, filters)),
                                  *scope)

    def clear(self, *, project: str | None = None, tenant: str | None = None) -> int:
        """Delete every document of the project (files and documents added from memory)."""
        scope = self._scope(project, tenant)
        return self._write(records.clear_sql(*scope), *scope)

    async def aclear(self, *, project: str | None = None, tenant: str | None = None) -> int:
        scope = self._scope(project, tenant)
        return await self._awrite(records.clear_sql(*scope), *scope)

    # --- listings ------------------------------------------------------------------------
    def list_projects(self, *, tenant: str | None = None) -> list[ProjectSummary]:
        """The tenant's projects that hold documents, by name: their document and chunk
        counts and the embedding model each is bound to (``kb-retriever projects``)."""
        tenant = valid_name("tenant", self.tenant if tenant is None else tenant)
        return self._reading(lambda session: session.project_summaries(tenant), primary=True)

    def list_documents(self, *, project: str | None = None, tenant: str | None = None,
                       keys: Sequence[str] | None = None) -> list[DocumentSummary]:
        """The project's documents in brief, by id: id, doc key, slug, title, source type,
        canonical type and status, chunk count (``kb-retriever documents``). With ``keys``,
        only the documents whose id or slug is one of them (``kb-retriever delete``: a few
        documents of a project of any size)."""
        scope = self._scope(project, tenant)
        if keys is not None:
            keys = docs.validate_ids(keys, "keys")
        return self._reading(lambda session: session.document_summaries(*scope, keys=keys),
                             primary=True)
