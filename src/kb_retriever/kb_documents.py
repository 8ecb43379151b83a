"""The knowledge base's documents by id: add from memory, get, delete, clear.

:class:`DocumentMethods` is the part of :class:`~kb_retriever.kb.KnowledgeBase` that reads and
writes whole documents and chunks by id (the logic is ``documents.py``'s, the SQL
``store/records.py``'s); the sync and async methods differ only at the I/O line.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from psycopg.rows import dict_row

from . import documents as docs
from .calibrate import calibrate_after_write
from .checks import valid_name
from .documents import StoredChunk, StoredDocument
from .embedding import Embedder
from .errors import InputError
from .filters import SearchFilters, parse_filters
from .settings import Settings
from .store import records
from .store.connection import atranslated, translated
from .store.pools import Pools
from .store.reader import ReadCache

__all__ = ["DocumentMethods", "valid_name"]


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
        drafts = [docs.record_draft(r, self.settings) for r in docs.as_records(documents)]
        last = {d.source_path: d for d in drafts}  # one id twice in a call: the last wins
        pool = self._pools.checked()
        try:
            with translated(), pool.connection() as conn:
                written = docs.write_records(conn, self.embedder, tenant=tenant,
                                             project=project, drafts=last.values())
                if written:  # the trust channels' null, as a file ingest measures it
                    calibrate_after_write(conn, self.embedder, tenant=tenant, project=project,
                                          chunks_written=written)
        finally:
            self._reads.clear()
        return [d.source_path for d in drafts]

    async def aadd_documents(self, documents: Iterable[Any], *, project: str | None = None,
                             tenant: str | None = None) -> list[str]:
        """The async twin of :meth:`add_documents`. Embedding is CPU work and the write is one
        COPY per document, so it runs in a worker thread (the event loop stays free)."""
        items = docs.as_records(documents)
        return await asyncio.to_thread(self.add_documents, items, project=project, tenant=tenant)

    def _read(self, stmt: records.Statement) -> list[dict[str, Any]]:
        with translated(), self._pools.sync().connection() as conn, \
                conn.cursor(row_factory=dict_row) as cur:
            cur.execute(*stmt)
            return cur.fetchall()

    async def _aread(self, stmt: records.Statement) -> list[dict[str, Any]]:
        pool = await self._pools.asynchronous()
        async with atranslated(), pool.connection() as conn, \
                conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(*stmt)
            return await cur.fetchall()

    def _write(self, stmts: list[records.Statement]) -> int:
        """Run ``stmts`` in one transaction; the first one's count (returned or affected)."""
        pool = self._pools.checked()
        try:
            with translated(), pool.connection() as conn, conn.transaction():
                counts = [_count(conn.execute(*s)) for s in stmts]
        finally:
            self._reads.clear()
        return counts[0]

    async def _awrite(self, stmts: list[records.Statement]) -> int:
        pool = await self._pools.asynchronous()
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
