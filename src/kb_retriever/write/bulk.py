"""Bulk loading: many documents per transaction, binary COPY, vectors supplied by the caller.

For first loads and large re-imports. :func:`write_document` (one transaction per document)
stays the path for everyday ingestion; this one skips embedding (the caller passes vectors)
and can defer the HNSW and GIN builds to the end of the load, which is 10-40x faster than
inserting into indexed tables (reference/postgres-performance.md §2.2, §3.3).

Example::

    from kb_retriever.write.bulk import bulk_load

    with KnowledgeBase(embedder=my_embedder) as kb:
        items = ((project, draft, vectors) for draft, vectors in prepared)
        report = bulk_load(kb.url, items, tenant="acme", defer_indexes=True)
        print(report.chunks_per_second, report.index_build_s)
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import psycopg
from pgvector.psycopg import register_vector
from psycopg import sql

from ..embedding import Embedder
from ..errors import InputError
from ..models import DocumentDraft
from ..store.columns import DOCUMENT_COLUMNS
from ..store.connection import translated
from ..store.stats import log_document_chunks, settle
from ..store.writer import (
    chunk_rows,
    copy_chunks,
    document_values,
    edge_rows,
    insert_edges,
    refresh_document_stats,
    write_document,
)
from .recalibrate import calibrate_project

__all__ = ["BulkReport", "bulk_load"]

# The two indexes whose maintenance dominates incremental inserts.
_SEARCH_INDEXES = ("kb_chunks_hnsw_ix", "kb_chunks_tsv_ix")
_DOC_COLS = ("tenant_id", "project_key", "source_path", *(c for c, _ in DOCUMENT_COLUMNS))
_DOC_TYPES = ["text", "text", "text", *(t for _, t in DOCUMENT_COLUMNS)]
_COPY_DOCS = f"COPY kb_documents ({', '.join(_DOC_COLS)}) FROM STDIN WITH (FORMAT BINARY)"


@dataclass
class BulkReport:
    documents: int = 0
    chunks: int = 0
    updated: int = 0
    unchanged: int = 0
    load_s: float = 0.0  # COPY + commit, excluding index builds
    index_build_s: dict[str, float] = field(default_factory=dict)

    @property
    def chunks_per_second(self) -> float:
        return self.chunks / self.load_s if self.load_s else 0.0


def _batches(items: Iterable[tuple[str, DocumentDraft, Sequence[Any]]],
             size: int) -> Iterator[dict[str, list[tuple[DocumentDraft, Sequence[Any]]]]]:
    """Consecutive runs of ``size`` documents, grouped by project."""
    batch: list[tuple[str, DocumentDraft, Sequence[Any]]] = []
    for item in items:
        batch.append(item)
        if len(batch) >= size:
            yield _by_project(batch)
            batch = []
    if batch:
        yield _by_project(batch)


def _by_project(batch: list[tuple[str, DocumentDraft, Sequence[Any]]],
                ) -> dict[str, list[tuple[DocumentDraft, Sequence[Any]]]]:
    out: dict[str, list[tuple[DocumentDraft, Sequence[Any]]]] = {}
    for project, draft, vectors in batch:
        out.setdefault(project, []).append((draft, vectors))
    return out


def _maintenance_mem_mb(conn: psycopg.Connection) -> int:
    # The HNSW graph builds far faster when it fits (§3.2): ~2x the vector bytes, bounded.
    row = conn.execute(
        "SELECT count(*), coalesce(max(vector_dims(embedding)), 0) FROM kb_chunks"
    ).fetchone()
    rows, dim = (int(row[0]), int(row[1])) if row else (0, 0)
    need = rows * (dim * 4 + 256) * 2 // (1024 * 1024)
    return max(64, min(need, 4096))


def _write_batch(conn: psycopg.Connection, tenant: str, project: str,
                 batch: list[tuple[DocumentDraft, Sequence[Any]]], report: BulkReport) -> None:
    paths = [d.source_path for d, _ in batch]
    if len(set(paths)) != len(paths):
        raise InputError("bulk_load: the same source_path appears twice in one batch")
    with conn.transaction():
        existing = {r[0] for r in conn.execute(
            "SELECT source_path FROM kb_documents WHERE tenant_id = %s AND project_key = %s "
            "AND source_path = ANY(%s)", [tenant, project, paths])}
        fresh = [(d, e) for d, e in batch if d.source_path not in existing]
        for draft, embs in batch:  # already present: the atomic replace path, hash-checked
            if draft.source_path in existing:
                status = write_document(conn, tenant=tenant, project=project, draft=draft,
                                        embeddings=embs)
                report.updated += status == "updated"
                report.unchanged += status == "unchanged"
        if not fresh:
            return
        with conn.cursor() as cur, cur.copy(_COPY_DOCS) as copy:
            copy.set_types(_DOC_TYPES)
            for d, _ in fresh:
                copy.write_row((tenant, project, d.source_path, *document_values(d).values()))
        ids: dict[str, int] = dict(conn.execute(
            "SELECT source_path, id FROM kb_documents WHERE tenant_id = %s AND project_key = %s "
            "AND source_path = ANY(%s)", [tenant, project, [d.source_path for d, _ in fresh]]
        ).fetchall())
        copy_chunks(conn, (row for d, embs in fresh
                           for row in chunk_rows(tenant, project, ids[d.source_path], d, embs)))
        log_document_chunks(conn, tenant, project, list(ids.values()))
        report.chunks += sum(len(d.chunks) for d, _ in fresh)
        insert_edges(conn, [row for d, _ in fresh
                            for row in edge_rows(tenant, project, ids[d.source_path], d)])
        report.documents += len(fresh)


def _writer(url: str, tenant: str, work: queue.Queue[Any], report: BulkReport,
            errors: list[BaseException]) -> None:
    """One COPY stream: its own connection, batches from ``work`` until a ``None``."""
    try:
        with psycopg.connect(url, autocommit=True, connect_timeout=10) as conn:
            register_vector(conn)
            conn.execute("SET statement_timeout = 0")
            fresh_stats = False
            while (groups := work.get()) is not None:
                if errors:
                    continue  # drain: another stream failed, stop writing
                with conn.transaction():
                    for project, batch in groups.items():
                        _write_batch(conn, tenant, project, batch, report)
                if not fresh_stats:  # after the first batch: see refresh_document_stats
                    refresh_document_stats(conn)
                    fresh_stats = True
    except BaseException as exc:  # reported to the caller by bulk_load
        errors.append(exc)
        while work.get() is not None:  # keep the producer from blocking
            pass


def bulk_load(url: str, items: Iterable[tuple[str, DocumentDraft, Sequence[Any]]], *,
              tenant: str, batch_docs: int = 500, defer_indexes: bool = False,
              workers: int = 2, embedder: Embedder | None = None) -> BulkReport:
    """Write ``(project, draft, chunk_vectors)`` items, ``batch_docs`` documents per transaction.

    The database must have been opened once by :class:`KnowledgeBase` (schema and dimension
    fixed). Documents already present go through the normal atomic replace path.
    ``defer_indexes=True`` drops the HNSW and GIN indexes first and rebuilds them at the end
    (their build times are in ``index_build_s``): meanwhile searches scan exactly, so use it
    for first loads and maintenance windows, not on a live database. ``workers`` parallel
    COPY streams (one connection each) spread ``to_tsvector``, the dominant server-side cost,
    over the cores (reference/postgres-performance.md §3.3). With ``embedder`` (the one the
    knowledge base searches with) each project loaded is calibrated at the end, as an ingest
    calibrates it (the refusal gate's and rejected channel's null, decision 0009); without it
    those channels use their absolute thresholds until the project's next ingest.
    """
    report = BulkReport()
    with translated(), psycopg.connect(url, autocommit=True, connect_timeout=10) as conn:
        register_vector(conn)
        conn.execute("SET statement_timeout = 0")
        saved: list[tuple[str, str]] = []
        if defer_indexes:
            saved = conn.execute(
                "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = current_schema() "
                "AND tablename = 'kb_chunks' AND indexname = ANY(%s)", [list(_SEARCH_INDEXES)]
            ).fetchall()
            for name, _ in saved:  # name comes from the catalog and our allow-list
                conn.execute(sql.SQL("DROP INDEX {}").format(sql.Identifier(name)))
        t0 = time.perf_counter()
        n = max(1, workers)
        work: queue.Queue[Any] = queue.Queue(maxsize=2 * n)
        reports = [BulkReport() for _ in range(n)]
        errors: list[BaseException] = []
        threads = [threading.Thread(target=_writer, args=(url, tenant, work, r, errors),
                                    daemon=True) for r in reports]
        for th in threads:
            th.start()
        projects: set[str] = set()
        try:
            for groups in _batches(items, batch_docs):
                if errors:
                    break
                projects.update(groups)
                work.put(groups)
        finally:
            for _ in threads:
                work.put(None)
            for th in threads:
                th.join()
        if errors:
            raise errors[0]
        for r in reports:
            report.documents += r.documents
            report.chunks += r.chunks
            report.updated += r.updated
            report.unchanged += r.unchanged
        report.load_s = time.perf_counter() - t0
        if saved:
            conn.execute(sql.SQL("SET maintenance_work_mem = {}").format(
                sql.Literal(f"{_maintenance_mem_mb(conn)}MB")))
            for name, definition in saved:
                t = time.perf_counter()
                conn.execute(definition)  # the exact definition read from pg_indexes
                report.index_build_s[name] = round(time.perf_counter() - t, 3)
        t = time.perf_counter()
        conn.execute("ANALYZE kb_documents, kb_chunks, kb_edges")
        report.index_build_s["analyze"] = round(time.perf_counter() - t, 3)
        for project in sorted(projects):
            settle(conn, tenant, project)
        if embedder is not None:
            for project in sorted(projects):
                calibrate_project(conn, embedder, tenant=tenant, project=project)
    return report
