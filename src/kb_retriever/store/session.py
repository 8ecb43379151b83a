"""One connection's typed operations: everything but a search that the knowledge base asks of
the store (the write side, calibration, the documents API, synonyms and projects).

A :class:`Session` wraps a pooled connection (``Pools.session`` / ``Pools.writing`` hand them
out); callers outside ``store/`` see typed methods and records, never SQL, cursors or rows.
:class:`AsyncSession` is the twin of what the async documents API needs; the two differ only
at the I/O line.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, NamedTuple, ParamSpec, TypeVar

import numpy as np
import psycopg
from psycopg import sql
from psycopg.rows import dict_row

from ..errors import StoreError
from ..models import DocumentDraft, DocumentSummary, ProjectSummary
from . import by_id, embedding_cache, spaces, stats, writer
from .columns import document_values
from .connection import atranslated, translated
from .retry import aretried, retried

__all__ = ["AsyncSession", "CalibrationState", "Session"]

Rows = list[dict[str, Any]]

# Reads of several statements see one snapshot (a document and its chunks, never a mix).
_SNAPSHOT = "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY"


def _top1(space: spaces.Space) -> sql.Composed:
    """The cosine of the project's chunk nearest ``v``, through the space's index."""
    return sql.SQL(
        "SELECT 1 - (c.embedding <=> %(v)s) AS sim FROM kb_chunks c "
        "WHERE c.tenant_id = %(tenant)s AND c.project_key = %(project)s AND c.model = {id} "
        "ORDER BY {dist} LIMIT 1").format(id=space.literal, dist=space.distance("c.embedding", "v"))


# The beginnings of up to 2,000 of a project's chunks: what its calibration tells its scripts by.
_TEXT_SAMPLE = ("SELECT left(text, 300) FROM kb_chunks WHERE tenant_id = %s AND project_key = %s "
                "LIMIT 2000")
_SAVE_CALIBRATION = (
    "INSERT INTO kb_scope_stats AS s (tenant_id, project_key, probe_model, probe_version, "
    "probe_similarity, calibrated_at) VALUES (%(tenant)s, %(project)s, %(model)s, %(version)s, "
    "%(sims)s, now()) ON CONFLICT (tenant_id, project_key) DO UPDATE SET "
    "probe_model = EXCLUDED.probe_model, probe_version = EXCLUDED.probe_version, "
    "probe_similarity = EXCLUDED.probe_similarity, calibrated_at = EXCLUDED.calibrated_at, "
    "writes_since_calibration = greatest(s.writes_since_calibration - %(counted)s, 0)"
)
# A project's calibration state (the row exists once its statistics were first folded:
# stats.py). Its chunks are the folded count plus the log's (exact, as the statistics readers
# count). _COUNT_WRITTEN counts a write and returns the state after; _CALIBRATION_STATE reads it.
_STATE = ("chunks + (SELECT coalesce(sum(l.chunks), 0) FROM kb_lexeme_log l WHERE l.tenant_id = "
          "%(tenant)s AND l.project_key = %(project)s) AS chunks, writes_since_calibration AS "
          "written, probe_model AS model, probe_version AS version, calibrated_at")
_SCOPE_ROW = " WHERE tenant_id = %(tenant)s AND project_key = %(project)s"
_COUNT_WRITTEN = ("UPDATE kb_scope_stats SET writes_since_calibration = writes_since_calibration"
                  " + %(n)s" + _SCOPE_ROW + " RETURNING " + _STATE)
_CALIBRATION_STATE = "SELECT " + _STATE + " FROM kb_scope_stats" + _SCOPE_ROW
_ADD_SYNONYMS = (
    "INSERT INTO kb_synonyms (tenant_id, project_key, term, synonyms) "
    "VALUES (%s, %s, %s, %s) ON CONFLICT (tenant_id, project_key, term) "
    "DO UPDATE SET synonyms = EXCLUDED.synonyms, enabled = true"
)
_PROJECTS = (
    "SELECT project_key, count(*) AS documents FROM kb_documents WHERE tenant_id = %s "
    "GROUP BY project_key ORDER BY project_key"
)
# Per project: documents, chunks and the bound model (counted apart: a join would multiply).
_PROJECT_SUMMARIES = (
    "SELECT d.project_key, d.documents, coalesce(c.chunks, 0) AS chunks, m.model_id, "
    "m.dimension FROM (SELECT project_key, count(*) AS documents FROM kb_documents "
    "WHERE tenant_id = %(tenant)s GROUP BY project_key) d "
    "LEFT JOIN (SELECT project_key, count(*) AS chunks FROM kb_chunks "
    "WHERE tenant_id = %(tenant)s GROUP BY project_key) c ON c.project_key = d.project_key "
    "LEFT JOIN kb_projects p ON p.tenant_id = %(tenant)s AND p.project_key = d.project_key "
    "LEFT JOIN kb_models m ON m.id = p.model ORDER BY d.project_key"
)
_DOCUMENT_SUMMARIES = (
    "SELECT d.source_path, d.doc_key, d.slug, d.title, d.source_type, d.canonical_type, "
    "d.canonical_status, (SELECT count(*) FROM kb_chunks c WHERE c.tenant_id = d.tenant_id "
    "AND c.document_id = d.id) AS chunks FROM kb_documents d "
    "WHERE d.tenant_id = %(tenant)s AND d.project_key = %(project)s AND (%(keys)s::text[] IS NULL "
    "OR d.source_path = ANY(%(keys)s::text[]) OR d.slug = ANY(%(keys)s::text[])) "
    "ORDER BY d.source_path"
)
# The documents ingested from one of the roots or from a folder inside one.
_UNDER_ROOTS = (
    "SELECT source_root, source_path FROM kb_documents WHERE tenant_id = %(tenant)s "
    "AND project_key = %(project)s AND EXISTS (SELECT 1 FROM unnest(%(roots)s::text[]) r "
    "WHERE source_root = r OR starts_with(source_root, rtrim(r, '/') || '/'))"
)
# The documents ingested from a folder inside the root, or from a folder that holds it.
_NEAR_ROOT = (
    "SELECT source_root, source_path FROM kb_documents WHERE tenant_id = %(tenant)s "
    "AND project_key = %(project)s AND (starts_with(source_root, rtrim(%(root)s, '/') || '/') "
    "OR starts_with(%(root)s, rtrim(source_root, '/') || '/'))"
)


P = ParamSpec("P")
T = TypeVar("T")


def _typed_errors(method: Callable[P, T]) -> Callable[P, T]:
    """``method`` with driver errors translated (``store.connection``): nothing of psycopg
    leaves a session."""
    @functools.wraps(method)
    def call(*args: P.args, **kwargs: P.kwargs) -> T:
        with translated():
            return method(*args, **kwargs)
    return call


def _atyped_errors(method: Callable[P, Awaitable[T]]) -> Callable[P, Awaitable[T]]:
    @functools.wraps(method)
    async def call(*args: P.args, **kwargs: P.kwargs) -> T:
        async with atranslated():
            return await method(*args, **kwargs)
    return call


class CalibrationState(NamedTuple):
    """A project's chunk count and writes since its last calibration, and what that
    calibration was made with."""

    chunks: int
    written: int
    model: str | None
    version: str | None
    calibrated_at: Any


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


class Session:
    """A pooled connection's typed operations (see the module docstring)."""

    def __init__(self, conn: psycopg.Connection[Any], *, distributed: bool = False,
                 space: spaces.Space | None = None) -> None:
        self.conn = conn
        # On Citus the coordinator's tables hold no rows and no statistics of their own: the
        # workers' autovacuum keeps the shards' (an ANALYZE here would touch every shard).
        self.distributed = distributed
        self._space = space  # the embedder's: the model this session writes and probes

    @property
    def space(self) -> spaces.Space:
        if self._space is None:
            raise StoreError("this session has no embedding model (open the knowledge base)")
        return self._space

    @property
    def broken(self) -> bool:
        return bool(self.conn.broken)

    # --- the embedding cache and the documents ---------------------------------------------
    @_typed_errors
    def cached_embeddings(self, tenant: str, model_id: str, dimension: int,
                          hashes: Sequence[str]) -> dict[str, np.ndarray]:
        return embedding_cache.cached_embeddings(self.conn, tenant, model_id, dimension, hashes)

    @_typed_errors
    def store_embeddings(self, tenant: str, model_id: str,
                         items: Sequence[tuple[str, Any]]) -> None:
        """Cache vectors for their texts (their own transaction)."""
        with self.conn.transaction():
            embedding_cache.store_embeddings(self.conn, tenant, model_id, items)

    @_typed_errors
    def holds_fields(self, tenant: str, project: str, draft: DocumentDraft) -> bool:
        """Whether the document of ``draft``'s id holds each of the draft's fields
        (``columns.document_values``), compared by the server in the columns' types."""
        values = document_values(draft)
        row = self.conn.execute(sql.SQL(
            "SELECT {} FROM kb_documents WHERE tenant_id = %(tenant)s "
            "AND project_key = %(project)s AND source_path = %(path)s").format(
            sql.SQL(" AND ").join(sql.SQL("{} IS NOT DISTINCT FROM {}").format(
                sql.Identifier(c), sql.Placeholder(c)) for c in values)),
            {**values, "tenant": tenant, "project": project, "path": draft.source_path},
        ).fetchone()
        return bool(row and row[0])

    @_typed_errors
    def stored_version(self, tenant: str, project: str,
                       path: str) -> tuple[str | None, str | None]:
        """(content hash, ingest root) of the document at ``path``, or Nones."""
        row = self.conn.execute(
            "SELECT content_hash, source_root FROM kb_documents WHERE tenant_id = %s "
            "AND project_key = %s AND source_path = %s", [tenant, project, path]).fetchone()
        return (None, None) if row is None else (row[0], row[1])

    @_typed_errors
    def prepare_writes(self) -> None:
        if not self.distributed:
            writer.refresh_document_stats(self.conn)

    @_typed_errors
    def write_document(self, tenant: str, project: str, draft: DocumentDraft,
                       embeddings: Sequence[Any], source_root: str | None = None,
                       seen_root: str | None = None) -> str:
        return writer.write_document(self.conn, tenant=tenant, project=project, draft=draft,
                                     embeddings=embeddings, space=self.space,
                                     source_root=source_root, seen_root=seen_root)

    @_typed_errors
    def merge_chunks(self, tenant: str, project: str, draft: DocumentDraft,
                     embeddings: Sequence[Any],
                     piece_key: writer.PieceKey = writer.whole_metadata) -> list[str]:
        return writer.merge_chunks(self.conn, tenant=tenant, project=project, draft=draft,
                                   embeddings=embeddings, space=self.space, piece_key=piece_key)

    # --- embedding models (store/spaces.py) ------------------------------------------------
    @_typed_errors
    def project_space(self, tenant: str, project: str) -> spaces.Space | None:
        """The embedding model the project is bound to (None: it never held chunks)."""
        return spaces.project_space(self.conn, tenant, project)

    def embeds_project(self, tenant: str, project: str) -> bool:
        """Whether the project is embedded with this session's model (only that model's
        probes can measure the project's null: another's find none of its chunks)."""
        bound = self.project_space(tenant, project)
        return bound is not None and self._space is not None and bound.id == self._space.id

    @_typed_errors
    def project_chunks(self, tenant: str, project: str) -> list[tuple[int, str, str]]:
        """(id, text hash, text) of every chunk of the project."""
        return spaces.project_chunks(self.conn, tenant, project)

    @_typed_errors
    def move_project(self, tenant: str, project: str, vectors: dict[str, np.ndarray],
                     embed: Callable[[Sequence[str]], Sequence[np.ndarray]]) -> int:
        """Move the project to this session's model, atomically; retried (``spaces.move_project``)."""
        return retried(lambda: spaces.move_project(self.conn, tenant, project, self.space,
                                                   vectors, embed))

    @_typed_errors
    def check_project(self, tenant: str, project: str) -> None:
        """A :class:`~kb_retriever.errors.SchemaError` before a write, when the project holds
        chunks of another embedding model than this session's."""
        spaces.check(self.conn, tenant, project, self.space)

    @_typed_errors
    def documents_under(self, tenant: str, project: str,
                        roots: Sequence[str]) -> list[tuple[str, str]]:
        """(ingest root, path) of the project's documents found under one of ``roots`` (from
        the root itself or a folder inside it)."""
        rows = self.conn.execute(_UNDER_ROOTS, {"tenant": tenant, "project": project,
                                                "roots": list(roots)}).fetchall()
        return [(str(root), str(path)) for root, path in rows]

    @_typed_errors
    def documents_near(self, tenant: str, project: str, root: str) -> list[tuple[str, str]]:
        """(ingest root, path) of the project's documents ingested from a folder inside
        ``root`` or from one that holds it: a file may be stored under either."""
        rows = self.conn.execute(_NEAR_ROOT, {"tenant": tenant, "project": project,
                                              "root": root}).fetchall()
        return [(str(r), str(path)) for r, path in rows]

    @_typed_errors
    def delete_documents(self, tenant: str, project: str, ids: Sequence[str]) -> int:
        return self.run(by_id.delete_documents_sql(tenant, project, ids))

    # --- statements of store.by_id -------------------------------------------------------
    @_typed_errors
    def read(self, stmts: Sequence[by_id.Statement], *, binary: bool = False) -> list[Rows]:
        """The rows of each statement, read in one snapshot when they are several; in
        PostgreSQL's binary format with ``binary`` (for vectors: 100 chunks with theirs took
        21 ms as text and 4 as binary; without vectors text is the cheaper)."""
        with self.conn.cursor(row_factory=dict_row, binary=binary) as cur:
            if len(stmts) < 2:
                return [cur.execute(*s).fetchall() for s in stmts]
            with self.conn.transaction():
                cur.execute(_SNAPSHOT)
                return [cur.execute(*s).fetchall() for s in stmts]

    @_typed_errors
    def run(self, batch: by_id.Batch) -> int:
        """``batch`` in one transaction (run again if PostgreSQL aborts it as a deadlock
        victim); its counted statements' counts, summed."""
        def transaction() -> list[int]:
            with self.conn.transaction():
                return [_count(self.conn.execute(*s)) for s in batch.statements]

        counts = retried(transaction)
        return sum(counts[i] for i in batch.counted)

    def settle(self, tenant: str, project: str) -> None:
        """After a write committed (``stats.settle``): never raises."""
        stats.settle(self.conn, tenant, project, analyze=not self.distributed)

    # --- calibration ---------------------------------------------------------------------
    @_typed_errors
    def count_written(self, tenant: str, project: str, chunks: int) -> CalibrationState | None:
        """Count ``chunks`` written against the project's calibration (0: only read it, no
        write); its state after."""
        with self.conn.cursor(row_factory=dict_row) as cur:
            row = cur.execute(_COUNT_WRITTEN if chunks else _CALIBRATION_STATE, {
                "n": chunks, "tenant": tenant, "project": project}).fetchone()
        return None if row is None else CalibrationState(
            int(row["chunks"]), int(row["written"]), row["model"], row["version"],
            row["calibrated_at"])

    @_typed_errors
    def top1_similarity(self, tenant: str, project: str, vector: Any) -> float | None:
        """The cosine of the project's chunk nearest ``vector`` (None: no chunk)."""
        row = self.conn.execute(_top1(self.space), {"v": vector, "tenant": tenant,
                                                    "project": project}).fetchone()
        return None if row is None else float(row[0])

    @_typed_errors
    def text_sample(self, tenant: str, project: str) -> list[str]:
        return [str(r[0]) for r in self.conn.execute(_TEXT_SAMPLE, [tenant, project])]

    @_typed_errors
    def save_calibration(self, tenant: str, project: str, *, model: str, version: str,
                         similarities: Sequence[float | None], counted: int) -> None:
        with self.conn.transaction():  # the writes counted since stay counted (not set to 0)
            self.conn.execute(_SAVE_CALIBRATION, {
                "tenant": tenant, "project": project, "model": model, "version": version,
                "sims": list(similarities), "counted": counted})

    # --- the catalog ---------------------------------------------------------------------
    @_typed_errors
    def add_synonyms(self, tenant: str, project: str, term: str,
                     synonyms: Sequence[str]) -> None:
        self.conn.execute(_ADD_SYNONYMS, [tenant, project, term, list(synonyms)])

    @_typed_errors
    def projects(self, tenant: str) -> dict[str, int]:
        """The tenant's projects that hold documents, with their document counts."""
        return {str(p): int(n) for p, n in self.conn.execute(_PROJECTS, [tenant]).fetchall()}

    @_typed_errors
    def project_summaries(self, tenant: str) -> list[ProjectSummary]:
        with self.conn.cursor(row_factory=dict_row) as cur:
            rows = cur.execute(_PROJECT_SUMMARIES, {"tenant": tenant}).fetchall()
        return [ProjectSummary(project=r["project_key"], documents=int(r["documents"]),
                               chunks=int(r["chunks"]), model_id=r["model_id"],
                               dimension=r["dimension"]) for r in rows]

    @_typed_errors
    def document_summaries(self, tenant: str, project: str,
                           keys: Sequence[str] | None = None) -> list[DocumentSummary]:
        """The project's documents in brief (``keys``: only those with one as id or slug)."""
        params = {"tenant": tenant, "project": project,
                  "keys": None if keys is None else list(keys)}
        with self.conn.cursor(row_factory=dict_row) as cur:
            rows = cur.execute(_DOCUMENT_SUMMARIES, params).fetchall()
        return [DocumentSummary(
            id=r["source_path"], doc_key=r["doc_key"], slug=r["slug"], title=r["title"],
            source_type=r["source_type"], canonical_type=r["canonical_type"],
            canonical_status=r["canonical_status"], chunks=int(r["chunks"])) for r in rows]


class AsyncSession:
    """The async twin of the documents API's part of :class:`Session`."""

    def __init__(self, conn: psycopg.AsyncConnection[Any], *, distributed: bool = False) -> None:
        self.conn = conn
        self.distributed = distributed

    @_atyped_errors
    async def read(self, stmts: Sequence[by_id.Statement], *, binary: bool = False) -> list[Rows]:
        async with self.conn.cursor(row_factory=dict_row, binary=binary) as cur:
            if len(stmts) < 2:
                return [await (await cur.execute(*s)).fetchall() for s in stmts]
            async with self.conn.transaction():
                await cur.execute(_SNAPSHOT)
                return [await (await cur.execute(*s)).fetchall() for s in stmts]

    @_atyped_errors
    async def run(self, batch: by_id.Batch) -> int:
        async def transaction() -> list[int]:
            async with self.conn.transaction():
                return [await _acount(await self.conn.execute(*s)) for s in batch.statements]

        counts = await aretried(transaction)
        return sum(counts[i] for i in batch.counted)

    async def settle(self, tenant: str, project: str) -> None:
        await stats.asettle(self.conn, tenant, project, analyze=not self.distributed)
