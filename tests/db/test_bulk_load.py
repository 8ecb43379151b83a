"""``bulk_load`` under real use: a document twice, an empty one, two loads and an ingest of
one document at once, a calibration that fails after the load, slugs that clash, metadata
JSON cannot hold, a load that replaces documents."""

from __future__ import annotations

import logging
import threading
from dataclasses import replace

import numpy as np
import psycopg
import pytest

from kb_retriever import HashingEmbedder, IngestError, InputError
from kb_retriever.write.bulk import bulk_load
from tests.db.test_doctor import DIM, _items

pytestmark = pytest.mark.db


def test_a_document_twice_in_a_load_or_empty_is_a_clear_input_error(make_kb):
    """Twice in two batches, two writers COPYed it at once ("duplicate key") or the older
    version replaced the newer; an empty document failed as "needs one finite vector … for
    each of its 0 chunks"."""
    kb = make_kb(embedder=HashingEmbedder(DIM))
    items = list(_items(3))
    with pytest.raises(InputError, match="d/0.md appears twice"):
        bulk_load(kb.url, [*items, items[0]], tenant="default", batch_docs=1)
    project, draft, _ = items[1]
    with pytest.raises(InputError, match="has no chunks"):
        bulk_load(kb.url, [(project, replace(draft, source_path="e.md", chunks=()), [])],
                  tenant="default", embedder=kb.embedder)
    with pytest.raises(InputError):
        bulk_load(kb.url, [(" default", *items[2][1:])], tenant="default")
    with pytest.raises(InputError):
        bulk_load(kb.url, items, tenant="")


def test_two_loads_of_one_corpus_at_once_both_succeed_with_each_document_once(make_kb):
    """Each load checked which documents existed without a lock: two loads (or a load and an
    ingest) of the same documents both COPYed the new ones, and one failed on the key."""
    kb = make_kb(embedder=HashingEmbedder(DIM))
    start = threading.Barrier(2)
    errors: list[BaseException] = []

    def load(seed: int) -> None:
        start.wait()
        try:
            bulk_load(kb.url, _items(120, seed=seed), tenant="default", batch_docs=10,
                      workers=2)
        except BaseException as exc:  # noqa: BLE001 (reported below)
            errors.append(exc)

    threads = [threading.Thread(target=load, args=(seed,)) for seed in (3, 4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=120)
    assert not errors, errors
    with psycopg.connect(kb.url) as conn:
        docs, paths = conn.execute("SELECT count(*), count(DISTINCT source_path) "
                                   "FROM kb_documents").fetchone()
        chunks = conn.execute("SELECT count(*) FROM kb_chunks").fetchone()[0]
    assert (docs, paths, chunks) == (120, 120, 600)


def test_a_calibration_that_fails_after_the_load_keeps_its_report(make_kb, monkeypatch):
    """The load was committed, then the embedder's failure in the calibration raised and the
    caller lost the report (an ingest postpones a calibration that fails)."""
    from kb_retriever.write import recalibrate

    monkeypatch.setattr(recalibrate, "_vectors", {})  # (the probes, kept per process and model)

    class Failing(HashingEmbedder):
        def embed_query(self, text: str) -> list[float]:
            raise ConnectionError("rate limited")

    warned: list[logging.LogRecord] = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = warned.append  # type: ignore[method-assign]
    log = logging.getLogger("kb_retriever.write.bulk")  # (the CLI's tests stop propagation)
    log.addHandler(handler)
    try:
        kb = make_kb(embedder=HashingEmbedder(DIM))
        report = bulk_load(kb.url, _items(5), tenant="default", embedder=Failing(DIM))
    finally:
        log.removeHandler(handler)
    assert (report.documents, report.chunks) == (5, 25)
    assert any("postponed" in r.getMessage() for r in warned)


def _stored(url: str, sql: str) -> list[tuple]:
    with psycopg.connect(url) as conn:
        return conn.execute(sql).fetchall()


def test_slugs_that_clash_are_clear_errors_and_the_stored_document_stays(make_kb):
    """Two new documents with one slug, or a new document with the slug of a stored one,
    failed the whole load with a StoreError ("duplicate key value violates unique constraint
    kb_documents_slug_uq"), naming neither document; an ingest names both."""
    kb = make_kb(embedder=HashingEmbedder(DIM))
    items = list(_items(3))
    project, draft, vectors = items[2]
    twin = (project, replace(draft, source_path="moved/2.md"), vectors)
    with pytest.raises(InputError, match=r"moved/2\.md.*'doc-2'.*d/2\.md"):
        bulk_load(kb.url, [*items, twin], tenant="default", batch_docs=10)
    bulk_load(kb.url, items, tenant="default")
    with pytest.raises(IngestError, match=r"moved/2\.md: slug 'doc-2' is already used by d/2\.md"):
        bulk_load(kb.url, [twin], tenant="default")
    assert _stored(kb.url, "SELECT source_path FROM kb_documents WHERE slug = 'doc-2'") \
        == [("d/2.md",)]


def test_chunk_metadata_json_cannot_hold_is_a_clear_error_and_numpy_numbers_stay_numbers(
        make_kb):
    """A NaN in a chunk's metadata stopped the load with the server's "invalid input syntax
    for type json"; a NumPy integer was stored as the string "7"."""
    kb = make_kb(embedder=HashingEmbedder(DIM))
    project, draft, vectors = next(_items(1))
    nan = replace(draft.chunks[0], metadata={"score": float("nan")})
    with pytest.raises(InputError, match="d/0.md"):
        bulk_load(kb.url, [(project, replace(draft, chunks=(nan, *draft.chunks[1:])), vectors)],
                  tenant="default")
    numbers = replace(draft.chunks[0], metadata={"page": np.int64(7), "w": np.float32(0.5),
                                                 "box": np.array([1, 2])})
    bulk_load(kb.url, [(project, replace(draft, chunks=(numbers, *draft.chunks[1:])), vectors)],
              tenant="default")
    assert _stored(kb.url, "SELECT metadata FROM kb_chunks WHERE metadata ? 'page'") \
        == [({"page": 7, "w": 0.5, "box": [1, 2]},)]


def test_a_load_that_replaces_documents_counts_their_chunks(make_kb):
    """``chunks`` (and so ``chunks_per_second``) counted only new documents' chunks: a load
    that replaced 3 documents reported 0 chunks written."""
    kb = make_kb(embedder=HashingEmbedder(DIM))
    bulk_load(kb.url, _items(4), tenant="default")
    again = [(p, replace(d, content_hash=d.content_hash + "-2") if i < 3 else d, v)
             for i, (p, d, v) in enumerate(_items(5))]
    report = bulk_load(kb.url, again, tenant="default")
    assert (report.documents, report.updated, report.unchanged, report.chunks) == (1, 3, 1, 20)
