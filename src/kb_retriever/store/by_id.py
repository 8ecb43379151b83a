"""SQL of the id-addressed operations: get, delete, clear (build -> execute -> convert).

A delete is a :class:`Batch`: statements that run in one transaction, and the one whose count
the call returns.

Each builder returns ``(query, params)`` statements; the knowledge base runs them on its sync
or async connection in one transaction, and the ``*_from_rows`` functions convert the rows.
Every statement is scoped by tenant and project.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from psycopg import sql

from ..filters.dimensions import SearchFilters
from ..models import StoredChunk, StoredDocument
from ..vocabulary import CHUNKS_SOURCE_TYPE
from .filter_sql import doc_filter_sql
from .rows import vector_array
from .stats import deleted_chunks_logged

__all__ = ["chunks_from_rows", "clear_sql", "delete_chunks_sql", "delete_documents_sql",
           "delete_files_sql", "delete_named_sql", "delete_other_kind_sql", "documents_from_rows",
           "get_chunks_sql", "get_documents_sql", "other_kind_sql", "Batch"]

Statement = tuple[sql.Composed, dict[str, Any]]
_SCOPE = sql.SQL("d.tenant_id = %(tenant)s AND d.project_key = %(project)s")


_CHUNK_COLS = sql.SQL(
    "c.chunk_uid, d.source_path AS document_uid, c.text, c.chunk_order, c.heading_path, "
    "c.metadata AS chunk_metadata")
_DOC_COLS = sql.SQL(
    "d.source_path AS document_uid, d.content, d.metadata AS record_metadata, d.frontmatter, "
    "d.title, d.source_type, d.is_canonical, d.canonical_type, d.canonical_status, d.slug")


def _params(tenant: str, project: str, ids: Sequence[str]) -> dict[str, Any]:
    return {"tenant": tenant, "project": project, "ids": list(ids)}


def get_documents_sql(tenant: str, project: str, ids: Sequence[str], *,
                      with_embeddings: bool = False) -> list[Statement]:
    """The documents with these ids (one row each), then their chunks in order (one row each,
    without the document's columns): what a document costs to read is its size, whatever its
    number of chunks. Run both in one snapshot (:func:`documents_from_rows` joins them)."""
    chunk = _chunk_columns(with_embeddings)
    params = _params(tenant, project, ids)
    return [
        (sql.SQL("SELECT {doc} FROM kb_documents d WHERE {scope} AND d.source_path = ANY(%(ids)s) "
                 "ORDER BY d.source_path").format(doc=_DOC_COLS, scope=_SCOPE), params),
        (sql.SQL("SELECT {chunk} FROM kb_documents d JOIN kb_chunks c "
                 "ON c.tenant_id = d.tenant_id AND c.document_id = d.id "
                 "WHERE {scope} AND c.tenant_id = %(tenant)s AND d.source_path = ANY(%(ids)s) "
                 "ORDER BY d.source_path, c.chunk_order").format(chunk=chunk, scope=_SCOPE),
         params),
    ]


def _chunk_selection(tenant: str, project: str, ids: Sequence[str] | None,
                     filters: SearchFilters | None) -> tuple[sql.Composable, dict[str, Any]]:
    """``FROM … WHERE …`` of the chunks with these ids and/or matching these filters (the
    search's own filter predicates, ``store.filter_sql.doc_filter_sql``; ``doc_ids`` selects
    documents here, as the search's filter mode does: left out, a delete by them was a clear)."""
    filt, params = doc_filter_sql(filters or SearchFilters(), with_doc_ids=True)
    by_id = sql.SQL(" AND c.chunk_uid = ANY(%(ids)s)") if ids is not None else sql.SQL("")
    return sql.SQL(
        "FROM kb_chunks c JOIN kb_documents d ON d.tenant_id = c.tenant_id "
        "AND d.id = c.document_id WHERE {scope} AND c.tenant_id = %(tenant)s "
        "AND c.project_key = %(project)s{by_id}{filt}"
    ).format(scope=_SCOPE, by_id=by_id, filt=filt), {
        **params, **_params(tenant, project, list(ids or ()))}


def get_chunks_sql(tenant: str, project: str, ids: Sequence[str] | None,
                   filters: SearchFilters | None = None, *,
                   with_embeddings: bool = False) -> Statement:
    """The chunks with these ids and/or matching ``filters``, in document order (with their
    vectors when ``with_embeddings``)."""
    where, params = _chunk_selection(tenant, project, ids, filters)
    return sql.SQL("SELECT {chunk} {where} ORDER BY d.source_path, c.chunk_order").format(
        chunk=_chunk_columns(with_embeddings), where=where), params


def _chunk_columns(with_embeddings: bool) -> sql.Composable:
    return sql.SQL("{}, c.embedding").format(_CHUNK_COLS) if with_embeddings else _CHUNK_COLS


@dataclass(frozen=True)
class Batch:
    """Statements to run in one transaction, and the ones whose counts the call returns
    (summed)."""

    statements: list[Statement]
    counted: tuple[int, ...]

# Lock the documents first: a writer replacing one of them finishes (or waits) before their
# chunks are deleted, so the statement that deletes them sees their last chunks and logs them.
_LOCK_DOCUMENTS = sql.SQL("SELECT d.id FROM kb_documents d WHERE {scope}{which} "
                          "ORDER BY d.id FOR UPDATE")
# Chunks first (their lexemes logged as removed), then the documents, in one snapshot.
_DELETE_DOCUMENTS = sql.SQL(
    "WITH docs AS (SELECT d.id FROM kb_documents d WHERE {scope}{which}), {gone}, "
    "d AS (DELETE FROM kb_documents x USING docs WHERE x.tenant_id = %(tenant)s "
    "AND x.id = docs.id RETURNING 1) SELECT count(*) FROM d")
_BY_ID = sql.SQL(" AND d.source_path = ANY(%(ids)s)")
_OWN_BY_ID = sql.SQL(" AND d.source_path = ANY(%(ids)s) AND d.source_type <> %(parts)s")


def _documents_deleted(which: sql.Composable, params: dict[str, Any]) -> Batch:
    gone = deleted_chunks_logged(sql.SQL(
        "x.tenant_id = %(tenant)s AND x.document_id IN (SELECT id FROM docs)"))
    return Batch([(_LOCK_DOCUMENTS.format(scope=_SCOPE, which=which), params),
                  (_DELETE_DOCUMENTS.format(scope=_SCOPE, which=which, gone=gone), params)],
                 counted=(1,))


def delete_documents_sql(tenant: str, project: str, ids: Sequence[str]) -> Batch:
    """Delete whole documents, their chunks (logged for the statistics) and edges (by
    cascade), counting the documents."""
    return _documents_deleted(_BY_ID, {"tenant": tenant, "project": project, "ids": list(ids)})


# A file: its ingest root and path, as read; a row that another ingest moved since (a new root)
# is no longer that file, and the lock statement and the delete both read the row's root again.
_BY_FILE = sql.SQL(" AND (d.source_root, d.source_path) IN (SELECT f.r, f.p FROM "
                   "unnest(%(roots)s::text[], %(ids)s::text[]) AS f(r, p))")


def delete_files_sql(tenant: str, project: str, files: Sequence[tuple[str, str]]) -> Batch:
    """Delete the documents of ``files`` ((ingest root, path) pairs) as :func:`delete_documents_sql`
    does, only while each is still stored from that root."""
    return _documents_deleted(_BY_FILE, {"tenant": tenant, "project": project,
                                         "roots": [r for r, _ in files],
                                         "ids": [p for _, p in files]})


def delete_named_sql(tenant: str, project: str, ids: Sequence[str]) -> Batch:
    """Delete what each id names, in one transaction: a document of its own with that id, or
    a part with that id (a document that holds parts goes with its last one, and is named by
    none of the ids). Counts both."""
    own = _documents_deleted(_OWN_BY_ID, {**_params(tenant, project, ids),
                                          "parts": CHUNKS_SOURCE_TYPE})
    parts = delete_chunks_sql(tenant, project, ids, _PARTS)
    return Batch(own.statements + parts.statements,
                 counted=(*own.counted, *(len(own.statements) + i for i in parts.counted)))


def clear_sql(tenant: str, project: str) -> Batch:
    """Delete every document of one project, counting them."""
    return _documents_deleted(sql.SQL(""), {"tenant": tenant, "project": project})


def delete_chunks_sql(tenant: str, project: str, ids: Sequence[str] | None,
                      filters: SearchFilters | None = None) -> Batch:
    """Delete chunks by id and/or filters, counting them. Their documents lose their content
    hash (adding the same content again writes it again, instead of a no-op over the gap);
    documents left without chunks go."""
    where, params = _chunk_selection(tenant, project, ids, filters)
    gone = deleted_chunks_logged(sql.SQL(
        "x.tenant_id = %(tenant)s AND x.project_key = %(project)s AND x.id IN (SELECT c.id {where})"
    ).format(where=where))
    return Batch([
        (sql.SQL(
            "WITH {gone}, "
            "stale AS (UPDATE kb_documents d SET content_hash = '' WHERE d.tenant_id = %(tenant)s "
            "AND d.id IN (SELECT document_id FROM gone)) "
            "SELECT count(*) FROM gone").format(gone=gone), params),
        (sql.SQL(
            "DELETE FROM kb_documents d WHERE {scope} AND d.content_hash = '' AND NOT EXISTS "
            "(SELECT 1 FROM kb_chunks c WHERE c.tenant_id = d.tenant_id "
            "AND c.document_id = d.id)").format(scope=_SCOPE), params),
    ], counted=(0,))


def _chunk(row: Mapping[str, Any]) -> StoredChunk:
    emb = row.get("embedding")
    return StoredChunk(id=row["chunk_uid"], document_id=row["document_uid"], text=row["text"],
                       order=int(row["chunk_order"]), heading_path=row["heading_path"] or "",
                       metadata=MappingProxyType(dict(row["chunk_metadata"] or {})),
                       embedding=None if emb is None else tuple(vector_array(emb).tolist()))


def chunks_from_rows(rows: Sequence[Mapping[str, Any]]) -> list[StoredChunk]:
    return [_chunk(r) for r in rows]


def documents_from_rows(documents: Sequence[Mapping[str, Any]],
                        chunks: Sequence[Mapping[str, Any]]) -> list[StoredDocument]:
    """One :class:`StoredDocument` per row of ``documents``, in their order, with its rows of
    ``chunks`` (the two reads of :func:`get_documents_sql`)."""
    by_doc: dict[str, list[StoredChunk]] = {}
    for row in chunks:
        by_doc.setdefault(row["document_uid"], []).append(_chunk(row))
    out = []
    for head in documents:
        doc_id = head["document_uid"]
        its = tuple(by_doc.get(doc_id, ()))
        if head["record_metadata"] is not None:  # added from memory: exactly as given
            metadata = dict(head["record_metadata"])
        else:  # a file: its frontmatter
            metadata = {k: v for k, v in (head["frontmatter"] or {}).items() if k != "_derived"}
        # a record's text as given; a file's rebuilt from its chunks; a document of chunks
        # added by id: its chunks'
        if head["content"] is not None:
            text = head["content"]
        elif head["source_type"] == CHUNKS_SOURCE_TYPE:
            text = _PARAGRAPH.join(c.text for c in its)
        else:
            text = file_text(its)
        out.append(StoredDocument(
            id=doc_id, text=text, metadata=MappingProxyType(metadata), chunks=its,
            title=head["title"], source_type=head["source_type"],
            is_canonical=bool(head["is_canonical"]), canonical_type=head["canonical_type"],
            canonical_status=head["canonical_status"], slug=head["slug"]))
    return out


_PARAGRAPH = "\n\n"  # (the chunker's joiner)


def file_text(chunks: Sequence[StoredChunk]) -> str:
    r"""A file's text from its chunks (in order), as the file had it: each heading where the
    heading path changes, as a Markdown heading of its depth in the path (the chunks hold the
    path, not the heading lines), and the whole paragraphs that a chunk of a long section
    repeats from the chunk before it (the chunker's overlap) once.

    >>> from kb_retriever.models import StoredChunk
    >>> c = lambda i, text, path: StoredChunk(str(i), "f.md", text, i, path, {})
    >>> print(file_text([c(0, "a\n\nb", "T"), c(1, "b\n\nc", "T"), c(2, "d", "T > U")]))
    # T
    <BLANKLINE>
    a
    <BLANKLINE>
    b
    <BLANKLINE>
    c
    <BLANKLINE>
    ## U
    <BLANKLINE>
    d
    """
    parts: list[str] = []
    trail: list[str] = []
    previous: list[str] = []
    for chunk in chunks:
        path = [h for h in chunk.heading_path.split(" > ") if h]
        paragraphs = chunk.text.split(_PARAGRAPH)
        if path == trail and previous:
            paragraphs = paragraphs[_repeated(previous, paragraphs):]
        else:
            kept = next((i for i, (a, b) in enumerate(zip(trail, path, strict=False))
                         if a != b),
                        min(len(trail), len(path)))
            parts += ["#" * min(depth + 1, 6) + " " + heading
                      for depth, heading in enumerate(path) if depth >= kept]
            trail = path
        previous = chunk.text.split(_PARAGRAPH)
        parts.append(_PARAGRAPH.join(paragraphs))
    return _PARAGRAPH.join(p for p in parts if p)


def _repeated(previous: list[str], paragraphs: list[str]) -> int:
    """How many of ``paragraphs``' first paragraphs end ``previous`` (never all of them)."""
    for n in range(min(len(previous), len(paragraphs) - 1), 0, -1):
        if paragraphs[:n] == previous[-n:]:
            return n
    return 0


# An id names one thing (decision 0007): a document of its own (kb_documents.source_path) or a
# part, a chunk of a document that holds parts (source type "chunks"), by its chunk_uid.
_PARTS = SearchFilters(source_types=(CHUNKS_SOURCE_TYPE,))
_PARTS_WITH_IDS = sql.SQL(
    "SELECT c.chunk_uid FROM kb_chunks c JOIN kb_documents d ON d.tenant_id = c.tenant_id "
    "AND d.id = c.document_id WHERE c.tenant_id = %(tenant)s AND c.project_key = %(project)s "
    "AND c.chunk_uid = ANY(%(ids)s) AND d.source_type = %(parts)s")
_DOCUMENTS_WITH_IDS = sql.SQL(
    "SELECT d.source_path FROM kb_documents d WHERE {scope} AND d.source_path = ANY(%(ids)s) "
    "AND d.source_type <> %(parts)s").format(scope=_SCOPE)


def other_kind_sql(tenant: str, project: str, ids: Sequence[str], *, parts: bool
                   ) -> tuple[sql.SQL | sql.Composed, dict[str, Any]]:
    """The ids among ``ids`` that the other kind holds (one row each): written as parts
    (``parts``), the documents of their own with these ids; else the parts with these ids.
    The writer runs it, and :func:`delete_other_kind_sql` of what it found, in its write's
    transaction under the ids' locks, so two writers of one id leave the later one."""
    params = {**_params(tenant, project, ids), "parts": CHUNKS_SOURCE_TYPE}
    return (_DOCUMENTS_WITH_IDS if parts else _PARTS_WITH_IDS), params


def delete_other_kind_sql(tenant: str, project: str, found: Sequence[str], *,
                          parts: bool) -> Batch:
    """Delete what :func:`other_kind_sql` found: documents of their own, or parts."""
    if parts:
        return delete_documents_sql(tenant, project, found)
    return delete_chunks_sql(tenant, project, found, _PARTS)
