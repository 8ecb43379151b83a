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

import functools
import itertools
import logging
import queue
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..checks import valid_name
from ..embedding import Embedder
from ..errors import InputError, KbError
from ..models import DocumentDraft
from ..store.bulk_copy import BulkSession, connect
from ..store.read_cache import WRITES
from .recalibrate import calibrate_project
from .validate import json_metadata

__all__ = ["BulkReport", "bulk_load"]

logger = logging.getLogger(__name__)


@dataclass
class BulkReport:
    """What a :func:`bulk_load` wrote: ``documents`` new documents, ``updated`` stored ones
    replaced by another version, ``unchanged`` stored ones given again as they were; ``chunks``
    the chunks written (of the new and the replaced documents), in ``load_s`` seconds (COPY
    and commits, without the index builds of ``index_build_s``)."""

    documents: int = 0
    chunks: int = 0
    updated: int = 0
    unchanged: int = 0
    load_s: float = 0.0
    index_build_s: dict[str, float] = field(default_factory=dict)

    @property
    def chunks_per_second(self) -> float:
        return self.chunks / self.load_s if self.load_s else 0.0

    def add(self, other: BulkReport) -> None:
        """Count ``other``'s documents and chunks in this report too."""
        self.documents += other.documents
        self.chunks += other.chunks
        self.updated += other.updated
        self.unchanged += other.unchanged


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


def _checked(items: Iterable[tuple[str, DocumentDraft, Sequence[Any]]], dimension: int
             ) -> Iterator[tuple[str, DocumentDraft, Sequence[Any]]]:
    """The items, each checked before it is queued: a project name as the knowledge base
    takes it, each document and slug once in the load (two batches with one document ran at
    once and the load failed on the key, or the older version won; two documents with one
    slug failed it as a StoreError naming neither), at least one chunk, metadata that JSON
    holds (a NaN was the server's error), and one finite vector of ``dimension`` per chunk (a
    short list was a raw ValueError in a writer, a NaN or another dimension a DataError that
    aborted the load)."""
    seen: set[int] = set()  # hashes: a million documents' paths would hold 100 MB
    slugs: dict[int, str] = {}  # (canonical documents only have slugs)
    for project, draft, vectors in items:
        valid_name("project", project)
        key = hash((project, draft.source_path))
        if key in seen:
            raise InputError(f"bulk_load: {draft.source_path} appears twice in project "
                             f"{project!r}: give each document once")
        seen.add(key)
        if draft.slug:
            owner = slugs.setdefault(hash((project, draft.slug)), draft.source_path)
            if owner != draft.source_path:
                raise InputError(f"bulk_load: {draft.source_path} has the slug {draft.slug!r} "
                                 f"of {owner} in project {project!r}: a slug names one document")
        if not draft.chunks:
            raise InputError(f"bulk_load: {draft.source_path} has no chunks (an empty "
                             "document): leave it out, as an ingest does")
        _check_metadata(draft)
        _check_vectors(draft, vectors, dimension)
        yield project, draft, vectors


def _check_metadata(draft: DocumentDraft) -> None:
    json_metadata(draft.frontmatter, f"bulk_load: {draft.source_path}'s frontmatter")
    if draft.record_metadata is not None:
        json_metadata(draft.record_metadata, f"bulk_load: {draft.source_path}'s metadata")
    for chunk in draft.chunks:
        if chunk.metadata:
            json_metadata(chunk.metadata,
                          f"bulk_load: {draft.source_path}: the metadata of chunk {chunk.order}")


def _check_vectors(draft: DocumentDraft, vectors: Sequence[Any], dimension: int) -> None:
    try:
        values = np.asarray(vectors, dtype=np.float32).reshape(len(vectors), -1)
    except (TypeError, ValueError):  # ragged, or not numbers
        values = np.zeros((0, 0), dtype=np.float32)
    if values.shape != (len(draft.chunks), dimension) or not np.isfinite(values).all():
        raise InputError(
            f"bulk_load: {draft.source_path} needs one finite vector of {dimension} numbers "
            f"for each of its {len(draft.chunks)} chunks; got {len(vectors)} vectors, not so")


def _by_project(batch: list[tuple[str, DocumentDraft, Sequence[Any]]],
                ) -> dict[str, list[tuple[DocumentDraft, Sequence[Any]]]]:
    out: dict[str, list[tuple[DocumentDraft, Sequence[Any]]]] = {}
    for project, draft, vectors in batch:
        out.setdefault(project, []).append((draft, vectors))
    return out


def _write_batch(session: BulkSession, tenant: str, project: str,
                 batch: list[tuple[DocumentDraft, Sequence[Any]]], report: BulkReport) -> None:
    paths = [d.source_path for d, _ in batch]  # (each once: _checked)
    with session.transaction():
        existing = session.present(tenant, project, paths)
        fresh = [(d, e) for d, e in batch if d.source_path not in existing]
        for draft, embs in batch:  # already present: the atomic replace path, hash-checked
            if draft.source_path in existing:
                status = session.write_document(tenant, project, draft, embs)
                report.updated += status == "updated"
                report.unchanged += status == "unchanged"
                report.documents += status == "added"  # (deleted meanwhile: written anew)
                report.chunks += len(draft.chunks) if status != "unchanged" else 0
        if fresh:
            session.copy_documents(tenant, project, fresh)
            report.chunks += sum(len(d.chunks) for d, _ in fresh)
            report.documents += len(fresh)


def _write_groups(session: BulkSession, tenant: str,
                  groups: dict[str, list[tuple[DocumentDraft, Sequence[Any]]]]) -> BulkReport:
    """Write one batch's projects (in the caller's transaction); what it wrote."""
    done = BulkReport()
    for project, batch in groups.items():
        _write_batch(session, tenant, project, batch, done)
    return done


def _writer(url: str, tenant: str, model: tuple[str | None, int], work: queue.Queue[Any],
            report: BulkReport, errors: list[BaseException]) -> None:
    """One COPY stream: its own connection, batches from ``work`` until a ``None``."""
    try:
        with connect(url, model_id=model[0], dimension=model[1]) as session:
            fresh_stats = False
            while (groups := work.get()) is not None:
                if errors:
                    continue  # drain: another stream failed, stop writing
                report.add(session.raced(functools.partial(_write_groups, session, tenant,
                                                           groups)))
                if not fresh_stats:  # after the first batch: see Session.prepare_writes
                    session.prepare_writes()
                    fresh_stats = True
    except BaseException as exc:  # reported to the caller by bulk_load
        errors.append(exc)
        while work.get() is not None:  # keep the producer from blocking
            pass


def _dimension(items: Iterable[tuple[str, DocumentDraft, Sequence[Any]]]
               ) -> tuple[int | None, list[tuple[str, DocumentDraft, Sequence[Any]]],
                          Iterator[tuple[str, DocumentDraft, Sequence[Any]]]]:
    """The dimension of the items' first vector (None: no vector), the items read to find
    it, and the items all the same."""
    it = iter(items)
    seen: list[tuple[str, DocumentDraft, Sequence[Any]]] = []
    for item in it:
        seen.append(item)
        if len(item[2]):
            return len(item[2][0]), seen, itertools.chain(seen, it)
    return None, seen, iter(seen)


def _load(url: str, tenant: str, model: tuple[str | None, int],
          items: Iterable[tuple[str, DocumentDraft, Sequence[Any]]], batch_docs: int,
          workers: int, report: BulkReport) -> set[str]:
    """Write the items over ``workers`` connections, adding their counts to ``report``; the
    projects loaded. The first writer's error is raised once every writer has stopped."""
    n = max(1, workers)
    work: queue.Queue[Any] = queue.Queue(maxsize=2 * n)
    reports = [BulkReport() for _ in range(n)]
    errors: list[BaseException] = []
    threads = [threading.Thread(target=_writer, args=(url, tenant, model, work, r, errors),
                                daemon=True) for r in reports]
    for th in threads:
        th.start()
    projects: set[str] = set()
    try:
        for groups in _batches(_checked(items, model[1]), batch_docs):
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
        report.add(r)
    return projects


def _rebuild_after_failure(session: BulkSession, saved: Sequence[tuple[str, str]]) -> None:
    """Build again the indexes a deferred load dropped, when the load failed half-way: the
    batches before the error stay committed, and without them every search scanned exactly
    from then on, silently. A build that fails too is logged with what to run; the load's
    own error is the one raised."""
    try:
        session.build_indexes(saved)
    except BaseException as exc:
        _log_unbuilt(saved, f"bulk_load failed, and building its dropped search indexes again "
                            f"failed too ({exc})")
        if not isinstance(exc, Exception):
            raise


def _log_unbuilt(saved: Sequence[tuple[str, str]], what: str) -> None:
    logger.error("%s: run these statements to restore them: %s", what,
                 "; ".join(definition for _, definition in saved))


def bulk_load(url: str, items: Iterable[tuple[str, DocumentDraft, Sequence[Any]]], *,
              tenant: str, batch_docs: int = 500, defer_indexes: bool = False,
              workers: int = 2, embedder: Embedder | None = None,
              model_id: str | None = None) -> BulkReport:
    """Write ``(project, draft, chunk_vectors)`` items, ``batch_docs`` documents per transaction.

    The database must have been opened once by :class:`KnowledgeBase` with the vectors' model
    (schema migrated, the model's space made). The vectors are of ``embedder``'s model, else of
    ``model_id``'s, else of the database's only model of their dimension (several: an
    :class:`InputError`). Documents already present go through the normal atomic replace path.
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
    valid_name("tenant", tenant)
    model: tuple[str | None, int]
    if embedder is not None:
        model = (embedder.model_id, embedder.dimension)
    else:
        dimension, seen, items = _dimension(items)
        if dimension is None and seen:
            raise InputError("bulk_load: no item has a vector to tell its model by: pass "
                             "embedder=")
        if dimension is None:
            return report
        model = (model_id, dimension)
    with connect(url, model_id=model[0], dimension=model[1]) as session:
        saved = session.drop_search_indexes() if defer_indexes else []
        t0 = time.perf_counter()
        try:
            projects = _load(url, tenant, model, items, batch_docs, workers, report)
        except BaseException:
            WRITES.count(url)  # what it committed: the process's caches of ``url`` read again
            _rebuild_after_failure(session, saved)
            raise
        report.load_s = time.perf_counter() - t0
        if saved:  # (the load is committed: a build that fails says what to run)
            try:
                report.index_build_s.update(session.build_indexes(saved))
            except BaseException:
                _log_unbuilt(saved, "building its deferred search indexes failed")
                raise
        t = time.perf_counter()
        session.analyze()
        report.index_build_s["analyze"] = round(time.perf_counter() - t, 3)
        for project in sorted(projects):
            session.settle(tenant, project)
        if embedder is not None:
            for project in sorted(projects):
                try:  # the load is saved whatever happens here, as after an ingest
                    calibrate_project(session, embedder, tenant=tenant, project=project)
                except KbError as exc:
                    logger.warning("calibration of %s/%s postponed to its next write: %s",
                                   tenant, project, exc)
    WRITES.count(url)  # the knowledge bases of the process on ``url`` (kb.url) read again
    return report
