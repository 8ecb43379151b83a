"""Writing documents: one transaction per document, so readers see the old or the new version.

The chunk rows go in with binary COPY; the embedding cache is filled beforehand (its own
transactions: it only ever holds vectors that are correct for their text and model).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from pathlib import PurePath
from typing import Any

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from ..errors import IngestError
from ..models import DocumentDraft
from ..ranking.text import MAX_HEADING_CHARS, clip_words, fts_prefix
from ..vocabulary import fts_language
from .by_id import delete_documents_sql, delete_other_kind_sql, other_kind_sql
from .columns import as_json, document_values
from .retry import retried
from .spaces import Space, bind
from .stats import deleted_chunks_logged, log_document_chunks

logger = logging.getLogger(__name__)

PieceKey = Callable[[Mapping[str, Any]], Hashable]
"""Of a chunk's metadata: which chunks of one text are the same piece (:func:`merge_chunks`)."""

_LOCK_SQL = "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))"
# Several keys in one order (their sort), so two writers that lock keys in common never wait
# on each other crosswise.
_LOCK_ALL_SQL = ("SELECT pg_advisory_xact_lock(hashtextextended(k, 0)) "
                 "FROM (SELECT DISTINCT k FROM unnest(%s::text[]) AS u(k) ORDER BY k) s")
_COPY_CHUNKS = (
    "COPY kb_chunks (tenant_id, document_id, project_key, chunk_order, heading_path, text, "
    "text_hash, search_prefix, metadata, embedding, chunk_uid, fts_lang, model) "
    "FROM STDIN WITH (FORMAT BINARY)"
)
_COPY_TYPES = ["text", "int8", "text", "int4", "text", "text", "text", "text", "jsonb", "vector",
               "text", "text", "int2"]
# A document's chunks (all of them, or those of ``uids``) deleted, their lexemes logged as removed.
_DELETE_CHUNKS = sql.SQL("WITH {} SELECT count(*) FROM gone").format(deleted_chunks_logged(sql.SQL(
    "x.tenant_id = %(tenant)s AND x.document_id = %(doc)s "
    "AND (%(uids)s::text[] IS NULL OR x.chunk_uid = ANY(%(uids)s::text[]))")))


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
    """``ANALYZE kb_documents`` once, when it has never had statistics, so chunk inserts check
    their foreign key by the primary key.

    Until ``kb_documents`` has statistics, PostgreSQL plans the foreign-key check that every
    chunk insert runs (``tenant_id = $1 AND id = $2``) on the (tenant_id, project_key,
    source_path) index, filtering on ``id``, and the connection keeps that plan: each insert then
    reads every document of the tenant, so loading gets quadratically slower (100k chunks: 960
    million index entries read, 60 s instead of 12 s). New statistics invalidate the cached plan.
    Once it has statistics, autovacuum keeps them: a write never analyses a table again, and
    ``SKIP_LOCKED`` leaves it to a concurrent ANALYZE rather than waiting for it.
    """
    row = conn.execute("SELECT reltuples FROM pg_class WHERE oid = 'kb_documents'::regclass"
                       ).fetchone()
    if row is not None and row[0] < 0:  # never analysed (PostgreSQL 14+: -1)
        conn.execute("ANALYZE (SKIP_LOCKED) kb_documents")


def doc_lock_key(tenant: str, project: str, source_path: str, *, kind: str = "kb-doc") -> str:
    """The advisory lock key of a document's id (``kind`` ``kb-file``: of a file's path)."""
    return "\x1f".join((kind, tenant, project, source_path))


def chunk_rows(tenant: str, project: str, doc_pk: int, draft: DocumentDraft,
               embeddings: Sequence[Any], space: Space) -> Iterator[tuple[Any, ...]]:
    """The draft's kb_chunks rows, in ``_COPY_CHUNKS`` order, embedded in ``space``."""
    prefix = clip_words(draft.title, MAX_HEADING_CHARS)
    lang = fts_language(draft.language)
    for chunk, emb, uid in zip(draft.chunks, embeddings, chunk_uids(draft), strict=True):
        yield (tenant, doc_pk, project, chunk.order, chunk.heading_path, chunk.text,
               text_hash(chunk.text), fts_prefix(prefix, chunk.heading_path, chunk.text, draft.language),
               Jsonb(as_json(chunk.metadata)), emb, uid, lang,
               space.id)


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
                   embeddings: Sequence[Any], space: Space, source_root: str | None = None,
                   seen_root: str | None = None) -> str:
    """Insert or replace one document atomically. Returns ``added``/``updated``/``unchanged``.

    Concurrent writers of the same document are serialised by an advisory lock, and the hash
    is re-checked under it, so two processes ingesting one folder leave one version; the
    transaction runs again when PostgreSQL aborts it as a deadlock victim (store/retry.py).
    ``source_root`` is the ingest root the file was found under (for prune); the embeddings
    are of ``space``'s model, which the project must use (``spaces.bind``). With a
    ``source_root``, the documents that hold the same file under another root (a folder
    ingested, then its parent; or both at once) are deleted in the same transaction, under a
    lock on the file, so the file stays one document. The document's root is checked under
    the lock to be ``seen_root`` (what the caller read, None: no root or no document) or this
    one: another root's ingest that wrote it meanwhile is an error, not overwritten;
    unchanged text under a new root (a moved folder) takes the new root.
    """
    values = document_values(draft)
    if source_root is not None:
        values["source_root"] = source_root
    with _keys_taken(draft):
        return retried(lambda: _write(conn, tenant, project, draft, embeddings, values,
                                      space, seen_root))


def whole_metadata(metadata: Mapping[str, Any]) -> str:
    """The default :data:`PieceKey`: chunks of one text are the same piece when all their
    metadata is."""
    return json.dumps(metadata, sort_keys=True)


def merge_chunks(conn: psycopg.Connection, *, tenant: str, project: str, draft: DocumentDraft,
                 embeddings: Sequence[Any], space: Space,
                 piece_key: PieceKey = whole_metadata) -> list[str]:
    """Add the draft's chunks to its document, or replace the chunks of the same ids, leaving
    the document's other chunks as they are; the document is created from the draft's fields
    when missing, and takes them when it exists. The ids of the chunks written (a chunk whose
    text and metadata are unchanged is not written again), atomically, as :func:`write_document`.

    A draft with a ``content_hash`` is a version of the document: when the stored document is
    another version, all its chunks are replaced (not when some of its chunks were deleted:
    its version is unknown then, and the draft's chunks join the rest); within one version, a
    chunk replaces a stored chunk that the draft does not name, of its text and of its
    ``piece_key`` (the same piece added again under a new id). Two chunks of one text that
    differ there (a page footer on two pages) are two pieces: both stay.
    """
    values = document_values(draft)
    with _keys_taken(draft):
        return retried(lambda: _merge(conn, tenant, project, draft, embeddings, values,
                                      space, piece_key))


@contextlib.contextmanager
def _keys_taken(draft: DocumentDraft) -> Iterator[None]:
    """A key another document of the project took meanwhile, as the draft's error."""
    try:
        yield
    except psycopg.errors.UniqueViolation as exc:
        what = {"kb_documents_slug_uq": f"slug {draft.slug!r}",
                "kb_chunks_uid_uq": "a chunk id"}.get(exc.diag.constraint_name or "", "a key")
        raise IngestError(f"{draft.source_path}: {what} is already used by another document "
                          "of the project") from None


def _claim(conn: psycopg.Connection, tenant: str, project: str,
           draft: DocumentDraft) -> tuple[int, str, str | None] | None:
    """Lock the draft's document (inside the caller's transaction): its (id, content hash,
    root), or None when it does not exist; raises when another document owns the draft's slug."""
    conn.execute(_LOCK_SQL, [doc_lock_key(tenant, project, draft.source_path)])
    row = conn.execute(
        "SELECT id, content_hash, source_root FROM kb_documents WHERE tenant_id = %s "
        "AND project_key = %s AND source_path = %s FOR UPDATE",
        [tenant, project, draft.source_path],
    ).fetchone()
    refuse_taken_slugs(conn, tenant, project, [draft])
    return None if row is None else (int(row[0]), str(row[1]), row[2])


def refuse_taken_slugs(conn: psycopg.Connection, tenant: str, project: str,
                       drafts: Sequence[DocumentDraft]) -> None:
    """Raise :class:`IngestError` naming the first draft whose slug another document of the
    project owns (one statement for all the drafts)."""
    wanted = {d.slug: d.source_path for d in drafts if d.slug}
    if not wanted:
        return
    for slug, owner in conn.execute(
            "SELECT slug, source_path FROM kb_documents WHERE tenant_id = %s "
            "AND project_key = %s AND slug = ANY(%s)", [tenant, project, list(wanted)]):
        if owner != wanted[slug]:
            raise IngestError(f"{wanted[slug]}: slug {slug!r} is already used by {owner} "
                              "(a file moved? an ingest with --prune frees it)")


def _store_fields(conn: psycopg.Connection, tenant: str, project: str, draft: DocumentDraft,
                  values: dict[str, Any], doc_pk: int | None) -> int:
    """Insert the document's row (``doc_pk`` None) or update it, and replace its edges; its id."""
    cols = list(values)
    if doc_pk is None:
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
        doc_pk = int(inserted[0])
    else:
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
        conn.execute("DELETE FROM kb_edges WHERE tenant_id = %s AND source_document_id = %s",
                     [tenant, doc_pk])
    insert_edges(conn, edge_rows(tenant, project, doc_pk, draft))
    return doc_pk


def _write(conn: psycopg.Connection, tenant: str, project: str, draft: DocumentDraft,
           embeddings: Sequence[Any], values: dict[str, Any], space: Space,
           seen_root: str | None = None) -> str:
    root = values.get("source_root")
    with conn.transaction():
        bind(conn, tenant, project, space)
        if root is not None:  # before the claim: the draft may take their slug
            _take_file(conn, tenant, project, root, draft.source_path)
        stored = _claim(conn, tenant, project, draft)
        if root is not None and stored is not None and stored[2] not in (seen_root, root):
            raise IngestError(f"{draft.source_path}: an ingest of {stored[2]} wrote it meanwhile; "
                              "ingest the two roots into different projects, or their parent")
        _take_ids(conn, tenant, project, [draft.source_path], parts=False)
        if stored is not None and stored[1] == draft.content_hash:
            if root is not None and stored[2] != root:  # the same text, moved to this root
                conn.execute("UPDATE kb_documents SET source_root = %s WHERE tenant_id = %s "
                             "AND id = %s", [root, tenant, stored[0]])
            return "unchanged"
        doc_pk = _store_fields(conn, tenant, project, draft, values,
                               None if stored is None else stored[0])
        if stored is not None:
            conn.execute(_DELETE_CHUNKS, {"tenant": tenant, "project": project, "doc": doc_pk,
                                          "uids": None})
        copy_chunks(conn, chunk_rows(tenant, project, doc_pk, draft, embeddings, space))
        log_document_chunks(conn, tenant, project, doc_pk)
    return "added" if stored is None else "updated"


def _take_file(conn: psycopg.Connection, tenant: str, project: str, root: str,
               source_path: str) -> None:
    """Lock the file ``root``/``source_path`` (in the write's transaction) and delete the
    documents that hold it under another root's id: a folder and its parent ingested one
    after the other, or at once, where each read the project before the other wrote."""
    file = PurePath(root, source_path)
    conn.execute(_LOCK_SQL, [doc_lock_key(tenant, project, str(file), kind="kb-file")])
    others = [(str(folder), file.relative_to(folder).as_posix())
              for folder in file.parents if str(folder) != root]
    if not others:
        return
    held = [row[0] for row in conn.execute(
        "SELECT source_path FROM kb_documents WHERE tenant_id = %s AND project_key = %s "
        "AND (source_root, source_path) IN (SELECT * FROM unnest(%s::text[], %s::text[])) "
        "FOR UPDATE", [tenant, project, [r for r, _ in others], [p for _, p in others]])]
    if held:
        for statement in delete_documents_sql(tenant, project, held).statements:
            conn.execute(*statement)


def _take_ids(conn: psycopg.Connection, tenant: str, project: str, ids: Sequence[str], *,
              parts: bool) -> None:
    """Delete what the other kind holds under ``ids`` (by_id.other_kind_sql), in the write's
    transaction and under the ids' locks (a document's is its claim's, a part's its merge's):
    an id names one thing, and of two writers of one id, the later one stays."""
    if found := [row[0] for row in conn.execute(*other_kind_sql(tenant, project, ids,
                                                                  parts=parts))]:
        for statement in delete_other_kind_sql(tenant, project, found, parts=parts).statements:
            conn.execute(*statement)


def _merge(conn: psycopg.Connection, tenant: str, project: str, draft: DocumentDraft,
           embeddings: Sequence[Any], values: dict[str, Any], space: Space,
           piece_key: PieceKey) -> list[str]:
    uids = chunk_uids(draft)
    with conn.transaction():
        bind(conn, tenant, project, space)
        conn.execute(_LOCK_ALL_SQL, [[doc_lock_key(tenant, project, key)
                                      for key in (*uids, draft.source_path)]])
        _take_ids(conn, tenant, project, uids, parts=True)
        stored = _claim(conn, tenant, project, draft)
        doc_pk = _store_fields(conn, tenant, project, draft, values,
                               None if stored is None else stored[0])
        have = {r[0]: (int(r[1]), r[2], r[3]) for r in conn.execute(
            "SELECT chunk_uid, chunk_order, text_hash, metadata FROM kb_chunks "
            "WHERE tenant_id = %s AND document_id = %s", [tenant, doc_pk])}
        versioned = bool(draft.content_hash)
        # (a stored hash of "": some of its chunks were deleted, by_id.delete_chunks_sql: which
        # version it holds is not known, and what stays is not another version's)
        if versioned and stored is not None and stored[1] not in ("", draft.content_hash):
            replaced_all, have = list(have), {}  # another version: none of its chunks stay
        else:
            replaced_all = []
        # (text hash, piece key) -> the stored chunks of that piece, in order, that the draft
        # does not name: each stands for one new chunk of the same piece (two alike are two)
        by_piece: dict[tuple[str, Hashable], list[str]] = {}
        named = set(uids)
        for uid, (_, text_hash, metadata) in sorted(have.items(), key=lambda kv: kv[1][0]):
            if versioned and uid not in named:
                by_piece.setdefault((text_hash, piece_key(metadata)), []).append(uid)
        last = max((order for order, _, _ in have.values()), default=-1)
        rows, written, replaced = [], [], list(replaced_all)
        for row, uid in zip(chunk_rows(tenant, project, doc_pk, draft, embeddings, space),
                            uids, strict=True):
            old = have.get(uid)
            twins = by_piece.get((row[6], piece_key(row[8].obj))) if old is None else None
            twin = twins.pop(0) if twins else None
            if old is not None and (old[1], old[2]) == (row[6], row[8].obj):
                continue  # the same text and metadata: nothing to write
            if old is not None or twin is not None:
                replaced.append(uid if old is not None else twin)  # type: ignore[arg-type]
                order = (old or have[twin])[0]  # type: ignore[index]
            else:
                last += 1
                order = last
            rows.append((*row[:3], order, *row[4:]))
            written.append(uid)
        if replaced:
            conn.execute(_DELETE_CHUNKS, {"tenant": tenant, "project": project, "doc": doc_pk,
                                          "uids": replaced})
        copy_chunks(conn, rows)
        log_document_chunks(conn, tenant, project, doc_pk, uids=written)
    return written
