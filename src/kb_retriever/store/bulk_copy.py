"""What a bulk load asks of the store: binary COPY of many documents per transaction, and the
search indexes dropped and built again around it (``write/bulk.py`` orchestrates).

A :class:`BulkSession` is a connection of its own with typed methods; :func:`connect` opens one.
Each step of a load runs in a transaction of its own with no statement timeout (a load is
maintenance work), set for that transaction only, and nothing is prepared: so a load also goes
through a transaction pooler (PgBouncer's ``pool_mode = transaction``), where a session's
settings and prepared statements stay on whichever server connection ran them.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

import psycopg
from pgvector.psycopg import register_vector
from psycopg import sql

from ..errors import IngestError
from ..models import DocumentDraft
from .columns import DOCUMENT_COLUMNS, document_values
from .connection import translated
from .distribution import is_citus
from .session import Session
from .spaces import bind, index_memory, matching
from .stats import log_document_chunks
from .writer import chunk_rows, copy_chunks, edge_rows, insert_edges, refuse_taken_slugs

__all__ = ["BulkSession", "connect"]

T = TypeVar("T")

logger = logging.getLogger(__name__)

# The full-text index; with the loaded model's HNSW index, the two whose maintenance
# dominates incremental inserts.
_FTS_INDEX = "kb_chunks_tsv_ix"
_SLUG_KEY = "kb_documents_slug_uq"
_DOC_COLS = ("tenant_id", "project_key", "source_path", *(c for c, _ in DOCUMENT_COLUMNS))
_DOC_TYPES = ["text", "text", "text", *(t for _, t in DOCUMENT_COLUMNS)]
_COPY_DOCS = f"COPY kb_documents ({', '.join(_DOC_COLS)}) FROM STDIN WITH (FORMAT BINARY)"
_NO_TIMEOUT = "SELECT set_config('statement_timeout', '0', true)"
_IDS = ("SELECT source_path, id FROM kb_documents WHERE tenant_id = %s AND project_key = %s "
        "AND source_path = ANY(%s)")


@contextlib.contextmanager
def connect(url: str, *, model_id: str | None, dimension: int) -> Iterator[BulkSession]:
    """A :class:`BulkSession` on a connection of its own to ``url``, writing the embeddings of
    ``model_id`` (None: the database's only model of ``dimension``, ``spaces.matching``)."""
    with translated(), psycopg.connect(url, autocommit=True, connect_timeout=10,
                                       prepare_threshold=None) as conn:
        register_vector(conn)
        yield BulkSession(conn, distributed=is_citus(conn),
                          space=matching(conn, model_id, dimension))


class BulkSession(Session):
    """A :class:`~kb_retriever.store.session.Session` with the bulk load's own operations."""

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        """A transaction with no statement timeout."""
        with self.conn.transaction():
            self.conn.execute(_NO_TIMEOUT)
            yield

    def raced(self, write: Callable[[], T]) -> T:
        """``write()`` in a :meth:`transaction`, run once more when another writer created one
        of its new documents meanwhile (another load's batch, an ingest: the COPY failed on
        the document's key, and the second run finds it stored and replaces it), or took one
        of their slugs (the second run names it). Locking a batch's documents instead would
        take one lock per document: past the server's lock table
        (``max_locks_per_transaction``) at large batches."""
        for last in (False, True):
            try:
                with self.transaction():
                    return write()
            except psycopg.errors.UniqueViolation as exc:
                slug = exc.diag.constraint_name == _SLUG_KEY
                if not (slug or "source_path" in str(exc)):
                    raise
                if last and slug:
                    raise IngestError("bulk_load: a slug of a new document is already used by "
                                      "another document of the project") from None
                if last:
                    raise
        raise AssertionError("unreachable")

    def present(self, tenant: str, project: str, paths: Sequence[str]) -> set[str]:
        """Which of ``paths`` the project holds already."""
        return {str(r[0]) for r in self.conn.execute(_IDS, [tenant, project, list(paths)])}

    def copy_documents(self, tenant: str, project: str,
                       items: Sequence[tuple[DocumentDraft, Sequence[Any]]]) -> None:
        """COPY new documents (none of them stored yet), their chunks and edges, in the
        caller's transaction; their chunks are logged for the statistics."""
        bind(self.conn, tenant, project, self.space)
        refuse_taken_slugs(self.conn, tenant, project, [d for d, _ in items])
        with self.conn.cursor() as cur, cur.copy(_COPY_DOCS) as copy:
            copy.set_types(_DOC_TYPES)
            for d, _ in items:
                copy.write_row((tenant, project, d.source_path, *document_values(d).values()))
        ids: dict[str, int] = dict(self.conn.execute(
            _IDS, [tenant, project, [d.source_path for d, _ in items]]).fetchall())
        copy_chunks(self.conn, (row for d, embs in items
                                for row in chunk_rows(tenant, project, ids[d.source_path], d,
                                                      embs, self.space)))
        log_document_chunks(self.conn, tenant, project, list(ids.values()))
        insert_edges(self.conn, [row for d, _ in items
                                 for row in edge_rows(tenant, project, ids[d.source_path], d)])

    def drop_search_indexes(self) -> list[tuple[str, str]]:
        """Drop the loaded model's HNSW index and the GIN index; their (name, definition), to
        build them again."""
        names = [n for n in (self.space.index_name, _FTS_INDEX) if n is not None]
        with self.transaction():
            saved = [(str(n), str(d)) for n, d in self.conn.execute(
                "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = current_schema() "
                "AND tablename = 'kb_chunks' AND indexname = ANY(%s)", [names])]
            for name, _ in saved:  # name comes from the catalog and our allow-list
                self.conn.execute(sql.SQL("DROP INDEX {}").format(sql.Identifier(name)))
        return saved

    def build_indexes(self, saved: Sequence[tuple[str, str]]) -> dict[str, float]:
        """Build the indexes :meth:`drop_search_indexes` dropped; seconds per index."""
        took = {}
        for name, definition in saved:
            t = time.perf_counter()
            with self.transaction():
                index_memory(self.conn, self.space.id)  # the HNSW graph built in memory
                self.conn.execute(definition)  # the exact definition read from pg_indexes
            took[name] = round(time.perf_counter() - t, 3)
        return took

    def analyze(self) -> None:
        """Fresh planner statistics for the loaded tables."""
        with self.transaction():
            self.conn.execute("ANALYZE kb_documents, kb_chunks, kb_edges")

    def settle(self, tenant: str, project: str) -> None:
        """:meth:`Session.settle` with no statement timeout (the log it folds after a load
        holds every chunk loaded): never raises, the load being saved."""
        try:
            with self.transaction():
                super().settle(tenant, project)
        except psycopg.Error as exc:
            logger.warning("statistics of %s/%s not settled: %s", tenant, project, exc)
