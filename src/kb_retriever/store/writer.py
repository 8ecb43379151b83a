"""Writing documents: one transaction per document, so readers see the old or the new version.

The chunk rows go in with binary COPY; the embedding cache is filled beforehand (its own
transactions: it only ever holds vectors that are correct for their text and model).
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from ..models import DocumentDraft
from ..textclip import MAX_HEADING_CHARS, clip_words
from .rows import vector_array

logger = logging.getLogger(__name__)

_LOCK_SQL = "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))"
_COPY_CHUNKS = (
    "COPY kb_chunks (tenant_id, document_id, project_key, chunk_order, heading_path, text, "
    "text_hash, search_prefix, metadata, embedding, chunk_uid) FROM STDIN WITH (FORMAT BINARY)"
)
_COPY_TYPES = ["text", "int8", "text", "int4", "text", "text", "text", "text", "jsonb", "vector",
               "text"]


def text_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def chunk_uids(draft: DocumentDraft) -> list[str]:
    """The stable id of each chunk: the caller's, else derived from the document's id (its
    ``source_path``) and the chunk's text, so an unchanged chunk keeps its id when its
    document changes. ``occurrence`` tells apart equal texts within one document; migration
    0003 computes the same values in SQL for chunks written before it.

    >>> from kb_retriever.models import ChunkDraft
    >>> d = DocumentDraft("a.md", "a", "A", "markdown", "h", (ChunkDraft(0, "x"), ChunkDraft(1, "x")))
    >>> a, b = chunk_uids(d)
    >>> len(a), a != b, a == chunk_uids(d)[0]
    (32, True, True)
    """
    seen: dict[str, int] = {}
    out = []
    for chunk in draft.chunks:
        occurrence = seen.get(chunk.text, 0)
        seen[chunk.text] = occurrence + 1
        if chunk.uid is not None:
            out.append(chunk.uid)
            continue
        key = "\x1f".join((draft.source_path, str(occurrence), chunk.text))
        out.append(hashlib.sha256(key.encode("utf-8")).hexdigest()[:32])
    return out


def refresh_document_stats(conn: psycopg.Connection) -> None:
    """``ANALYZE kb_documents``, early in a load, so chunk inserts check their foreign key by the
    primary key.

    Until ``kb_documents`` has statistics, PostgreSQL plans the foreign-key check that every
    chunk insert runs (``tenant_id = $1 AND id = $2``) on the (tenant_id, project_key,
    source_path) index, filtering on ``id``, and the connection keeps that plan: each insert then
    reads every document of the tenant, so loading gets quadratically slower (100k chunks: 960
    million index entries read, 60 s instead of 12 s). New statistics invalidate the cached plan.
    """
    conn.execute("ANALYZE kb_documents")


def doc_lock_key(tenant: str, project: str, source_path: str) -> str:
    return "\x1f".join(("kb-doc", tenant, project, source_path))


def existing_hash(conn: psycopg.Connection, tenant: str, project: str, source_path: str) -> str | None:
    return existing_version(conn, tenant, project, source_path)[0]


def existing_version(conn: psycopg.Connection, tenant: str, project: str,
                     source_path: str) -> tuple[str | None, str | None]:
    """(content hash, ingest root) of the stored document at ``source_path``, or Nones."""
    row = conn.execute(
        "SELECT content_hash, source_root FROM kb_documents WHERE tenant_id = %s "
        "AND project_key = %s AND source_path = %s",
        [tenant, project, source_path],
    ).fetchone()
    return (None, None) if row is None else (row[0], row[1])


def cached_embeddings(conn: psycopg.Connection, tenant: str, model_id: str,
                      hashes: Sequence[str]) -> dict[str, Any]:
    rows = conn.execute(
        "SELECT text_hash, embedding FROM kb_embedding_cache WHERE tenant_id = %s "
        "AND model_id = %s AND text_hash = ANY(%s)",
        [tenant, model_id, list(hashes)],
    ).fetchall()
    return {h: vector_array(e) for h, e in rows}


def store_embeddings(conn: psycopg.Connection, tenant: str, model_id: str,
                     items: Sequence[tuple[str, Any]]) -> None:
    if not items:
        return
    with conn.cursor() as cur:
        cur.executemany(
            "INSERT INTO kb_embedding_cache (tenant_id, model_id, text_hash, embedding) "
            "VALUES (%s, %s, %s, %s) ON CONFLICT DO NOTHING",
            [(tenant, model_id, h, e) for h, e in items],
        )


def document_values(draft: DocumentDraft) -> dict[str, Any]:
    """The draft's value for each of :data:`~kb_retriever.store.columns.DOCUMENT_COLUMNS`, in
    that order."""
    values = {
        "doc_key": draft.doc_key, "title": draft.title, "source_type": draft.source_type,
        "content_hash": draft.content_hash, "doc_id": draft.doc_id, "slug": draft.slug,
        "is_canonical": draft.is_canonical, "canonical_type": draft.canonical_type,
        "canonical_status": draft.canonical_status,
        "retrieval_priority": draft.retrieval_priority,
        "generation_source": draft.generation_source, "evidence_tier": draft.evidence_tier,
        "tags": list(draft.tags), "owners": list(draft.owners), "summary": draft.summary,
        "language": draft.language, "doc_date": draft.doc_date,
        "frontmatter": Jsonb(json.loads(json.dumps(dict(draft.frontmatter), default=str))),
        "content": draft.content,
        "metadata": None if draft.record_metadata is None else Jsonb(dict(draft.record_metadata)),
    }
    return values


def chunk_rows(tenant: str, project: str, doc_pk: int, draft: DocumentDraft,
               embeddings: Sequence[Any]) -> Iterator[tuple[Any, ...]]:
    """The draft's kb_chunks rows, in ``_COPY_CHUNKS`` order."""
    prefix = clip_words(draft.title, MAX_HEADING_CHARS)
    for chunk, emb, uid in zip(draft.chunks, embeddings, chunk_uids(draft), strict=True):
        yield (tenant, doc_pk, project, chunk.order, chunk.heading_path, chunk.text,
               text_hash(chunk.text), f"{prefix} {chunk.heading_path}".strip(),
               Jsonb(json.loads(json.dumps(dict(chunk.metadata), default=str))), emb, uid)


def copy_chunks(conn: psycopg.Connection, rows: Iterable[tuple[Any, ...]]) -> None:
    """Binary COPY of :func:`chunk_rows` rows (of one document or many)."""
    with conn.cursor() as cur, cur.copy(_COPY_CHUNKS) as copy:
        copy.set_types(_COPY_TYPES)
        for row in rows:
            copy.write_row(row)


def edge_rows(tenant: str, project: str, doc_pk: int,
              draft: DocumentDraft) -> list[tuple[Any, ...]]:
    """The draft's kb_edges rows (a canonical document with a slug has edges)."""
    if not draft.slug:
        return []
    return [(tenant, project, draft.slug, e.to_slug, e.edge_type, e.weight, e.provenance, doc_pk)
            for e in draft.edges]


def insert_edges(conn: psycopg.Connection, rows: Sequence[tuple[Any, ...]]) -> None:
    if rows:
        with conn.cursor() as cur:
            cur.executemany(
                "INSERT INTO kb_edges (tenant_id, project_key, from_slug, to_slug, edge_type, "
                "weight, provenance, source_document_id) VALUES (%s, %s, %s, %s, %s, %s, %s, %s) "
                "ON CONFLICT (tenant_id, project_key, from_slug, to_slug, edge_type) DO NOTHING",
                rows,
            )


def write_document(conn: psycopg.Connection, *, tenant: str, project: str, draft: DocumentDraft,
                   embeddings: Sequence[Any], source_root: str | None = None) -> str:
    """Insert or replace one document atomically. Returns ``added``/``updated``/``unchanged``.

    Concurrent writers of the same document are serialised by an advisory lock, and the hash
    is re-checked under it, so two processes ingesting one folder leave one version.
    ``source_root`` is the ingest root the file was found under (for prune).
    """
    values = document_values(draft)
    if source_root is not None:
        values["source_root"] = source_root
    with conn.transaction():
        conn.execute(_LOCK_SQL, [doc_lock_key(tenant, project, draft.source_path)])
        row = conn.execute(
            "SELECT id, content_hash FROM kb_documents WHERE tenant_id = %s AND project_key = %s "
            "AND source_path = %s FOR UPDATE",
            [tenant, project, draft.source_path],
        ).fetchone()
        if row is not None and row[1] == draft.content_hash:
            return "unchanged"
        if draft.slug:
            # Another file in the project may already own the slug: fail this file only.
            clash = conn.execute(
                "SELECT source_path FROM kb_documents WHERE tenant_id = %s AND project_key = %s "
                "AND slug = %s AND source_path <> %s",
                [tenant, project, draft.slug, draft.source_path],
            ).fetchone()
            if clash is not None:
                from ..errors import IngestError

                raise IngestError(
                    f"{draft.source_path}: slug {draft.slug!r} is already used by {clash[0]}"
                )
        cols = list(values)
        if row is None:
            inserted = conn.execute(
                sql.SQL(
                    "INSERT INTO kb_documents (tenant_id, project_key, source_path, {cols}) "
                    "VALUES (%(tenant)s, %(project)s, %(path)s, {vals}) RETURNING id"
                ).format(
                    cols=sql.SQL(", ").join(map(sql.Identifier, cols)),
                    vals=sql.SQL(", ").join(sql.Placeholder(c) for c in cols),
                ),
                {**values, "tenant": tenant, "project": project, "path": draft.source_path},
            ).fetchone()
            assert inserted is not None  # INSERT ... RETURNING always returns the row
            doc_pk = inserted[0]
            status = "added"
        else:
            doc_pk = row[0]
            conn.execute(
                sql.SQL(
                    "UPDATE kb_documents SET {sets}, indexed_at = now() "
                    "WHERE tenant_id = %(tenant)s AND id = %(id)s"
                ).format(
                    sets=sql.SQL(", ").join(
                        sql.SQL("{} = {}").format(sql.Identifier(c), sql.Placeholder(c))
                        for c in cols
                    )
                ),
                {**values, "tenant": tenant, "id": doc_pk},
            )
            conn.execute("DELETE FROM kb_chunks WHERE tenant_id = %s AND document_id = %s",
                         [tenant, doc_pk])
            conn.execute("DELETE FROM kb_edges WHERE tenant_id = %s AND source_document_id = %s",
                         [tenant, doc_pk])
            status = "updated"
        copy_chunks(conn, chunk_rows(tenant, project, doc_pk, draft, embeddings))
        insert_edges(conn, edge_rows(tenant, project, doc_pk, draft))
    return status
