"""``doctor --reindex`` under real use: two at once, one that stopped half-way, and the
searches that run meanwhile."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import psycopg
import pytest

from kb_retriever import Settings
from kb_retriever.doctor import check_index
from kb_retriever.store import diagnostics
from tests.db.test_doctor import _loaded

pytestmark = pytest.mark.db

_HNSW = ("SELECT c.relname, i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
         "JOIN pg_am a ON a.oid = c.relam WHERE i.indrelid = 'kb_chunks'::regclass "
         "AND a.amname = 'hnsw' ORDER BY 1")


def _reindex(url: str, m: int = 8):
    with diagnostics.connect(url) as store:
        return check_index(store, tenant="default", project="default", samples=3, k=5,
                           settings=Settings(hnsw_m=m), reindex=True)


def test_two_reindexes_at_once_both_end_with_one_valid_index(make_kb):
    """Both built ``kb_chunks_hnsw_1_new`` at once: one failed on the other's index (or
    dropped it under it), and the model's index could end missing."""
    kb, _ = _loaded(make_kb, n_docs=200)
    with ThreadPoolExecutor(2) as pool:
        reports = list(pool.map(lambda m: _reindex(kb.url, m), (8, 12)))
    assert all(r.reindexed for r in reports)
    with psycopg.connect(kb.url) as conn:
        assert conn.execute(_HNSW).fetchall() == [("kb_chunks_hnsw_1", True)]
        (m,) = conn.execute("SELECT hnsw_m FROM kb_models WHERE id = 1").fetchone()
    assert m in (8, 12)


def test_a_reindex_stopped_after_the_drop_is_finished_and_searches_keep_an_index(make_kb):
    """A reindex stopped between the old index's drop and the rename left the only index
    named ``_new``: the next reindex dropped it first, and every search scanned the table
    while the index was built again."""
    kb, _ = _loaded(make_kb, n_docs=200)
    with psycopg.connect(kb.url, autocommit=True) as conn:
        conn.execute("ALTER INDEX kb_chunks_hnsw_1 RENAME TO kb_chunks_hnsw_1_new")
    with diagnostics.connect(kb.url) as store:
        hints = " ".join(check_index(store, tenant="default", project="default", samples=3,
                                     k=5).hints)
    assert "kb_chunks_hnsw_1_new" in hints and "doctor --reindex" in hints
    # a reader holds the table while the reindex runs: each step that waits for it shows
    # what searches have meanwhile
    with psycopg.connect(kb.url) as reader, psycopg.connect(kb.url, autocommit=True) as watch:
        reader.execute("SELECT count(*) FROM kb_chunks WHERE model = 1")
        seen: list[list[tuple[str, bool]]] = []
        worker = threading.Thread(target=_reindex, args=(kb.url,))
        worker.start()
        for _ in range(20):
            seen.append(watch.execute(_HNSW).fetchall())
            time.sleep(0.05)
        reader.rollback()
        worker.join(timeout=120)
    assert not worker.is_alive()
    assert all(any(valid for _, valid in state) for state in seen), seen
    with psycopg.connect(kb.url) as conn:
        assert conn.execute(_HNSW).fetchall() == [("kb_chunks_hnsw_1", True)]
