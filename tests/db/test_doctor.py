"""The doctor (recall probe), the bulk loader and the statement timeout, on a real PostgreSQL."""

from __future__ import annotations

import json

import numpy as np
import psycopg
import pytest

from kb_retriever import HashingEmbedder, InputError, Settings, StoreError
from kb_retriever.cli import main
from kb_retriever.doctor import check_index
from kb_retriever.models import ChunkDraft, DocumentDraft, EdgeDraft
from kb_retriever.store import diagnostics
from kb_retriever.write.bulk import bulk_load
from tests.conftest import fk_lookups_by_path_index

pytestmark = pytest.mark.db

DIM = 32


def _items(n_docs: int, *, project: str = "default", words: int = 30, seed: int = 3):
    rng = np.random.default_rng(seed)
    vocab = [f"word{i}" for i in range(400)]
    for j in range(n_docs):
        chunks = tuple(
            ChunkDraft(order=k, text=" ".join(rng.choice(vocab, words)), heading_path=f"H{k}")
            for k in range(5)
        )
        vecs = rng.standard_normal((5, DIM)).astype(np.float32)
        edges = (EdgeDraft("doc-1", "depends_on", 1.0, "frontmatter"),) if j == 0 else ()
        yield project, DocumentDraft(
            source_path=f"d/{j}.md", doc_key=str(j), title=f"Doc {j}", source_type="markdown",
            content_hash=f"h{j}", chunks=chunks, edges=edges, slug=f"doc-{j}",
            is_canonical=j < 2, canonical_type="decision" if j < 2 else None,
            canonical_status="accepted" if j < 2 else None,
        ), vecs


def _loaded(make_kb, n_docs: int = 60, **kw):
    kb = make_kb(embedder=HashingEmbedder(DIM), **kw)
    report = bulk_load(kb.url, _items(n_docs), tenant="default", batch_docs=25,
                       defer_indexes=True)
    return kb, report


def test_bulk_load_writes_documents_chunks_edges_and_rebuilds_indexes(make_kb):
    kb, report = _loaded(make_kb)
    assert (report.documents, report.chunks) == (60, 300)
    assert {"kb_chunks_hnsw_1", "kb_chunks_tsv_ix"} <= set(report.index_build_s)
    with psycopg.connect(kb.url) as conn:
        assert conn.execute("SELECT count(*) FROM kb_chunks").fetchone()[0] == 300
        assert conn.execute("SELECT count(*) FROM kb_edges").fetchone()[0] == 1
        valid = conn.execute(
            "SELECT bool_and(i.indisvalid) FROM pg_index i JOIN pg_class c "
            "ON c.oid = i.indexrelid WHERE c.relname IN ('kb_chunks_hnsw_1', 'kb_chunks_tsv_ix')"
        ).fetchone()[0]
        assert valid
    again = bulk_load(kb.url, _items(60), tenant="default")
    assert (again.documents, again.unchanged) == (0, 60)
    hits = kb.search("word1 word2", limit=5)
    assert hits.primary


def test_bulk_load_checks_chunk_foreign_keys_by_primary_key(make_kb):
    """Loading stays linear: without fresh statistics on kb_documents, the foreign-key check of
    every chunk insert scans all the tenant's documents through the source_path index."""
    kb = make_kb(embedder=HashingEmbedder(DIM))
    report = bulk_load(kb.url, _items(600), tenant="default", batch_docs=20)
    assert report.chunks == 3000
    read = fk_lookups_by_path_index(kb.url, documents=600)
    # Quadratic plan: ~3000 inserts x ~300 documents each = ~900,000 entries read.
    assert read < 60_000, read


def test_doctor_reports_recall_indexes_and_sizes(make_kb):
    kb, _ = _loaded(make_kb)
    with diagnostics.connect(kb.url) as store:
        r = check_index(store, tenant="default", project="default", samples=8, k=5,
                        ef_search=100)
    assert r.samples == 8 and r.chunks_in_scope == 300
    assert r.recall_at_k is not None and 0.0 <= r.recall_at_k <= 1.0
    assert r.approx_rows_mean == 5
    methods = {i["method"]: i for i in r.indexes}
    assert methods["hnsw"]["valid"] and methods["gin"]["valid"]
    assert r.sizes_mb["kb_chunks"] > 0
    with psycopg.connect(kb.url) as conn:
        buffers = conn.execute("SELECT pg_size_bytes(current_setting('shared_buffers'))"
                               ).fetchone()[0]
    assert r.shared_buffers_mb == round(buffers / 2**20, 2)
    assert not any("shared_buffers" in h for h in r.hints)  # a 300-chunk index fits


def test_doctor_hints_when_recall_is_low_or_index_missing(make_kb, monkeypatch):
    import kb_retriever.doctor as doctor

    kb, _ = _loaded(make_kb)
    monkeypatch.setattr(doctor, "RECALL_HINT_BELOW", 1.01)  # any recall counts as low
    with psycopg.connect(kb.url, autocommit=True) as conn:
        conn.execute("DROP INDEX kb_chunks_tsv_ix")
    with diagnostics.connect(kb.url) as store:
        r = check_index(store, tenant="default", project="default", samples=5, k=10,
                        ef_search=40)
    text = " ".join(r.hints)
    assert "KB_HNSW_EF_SEARCH" in text and "GIN" in text


def test_doctor_cli_prints_json_and_exits_zero(make_kb, capsys):
    kb, _ = _loaded(make_kb, n_docs=10)
    assert main(["--database-url", kb.url, "doctor", "--samples", "3", "--k", "5", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["samples"] == 3 and "recall_at_k" in out and out["indexes"]


def test_doctor_on_an_empty_scope_says_so(make_kb):
    kb, _ = _loaded(make_kb, n_docs=3)
    with diagnostics.connect(kb.url) as store:
        r = check_index(store, tenant="default", project="nope", samples=3, k=5)
    assert r.recall_at_k is None and any("no chunks" in h for h in r.hints)


def test_statement_timeout_fails_fast_with_a_store_error(make_kb, new_database):
    """A 1 ms statement_timeout must surface as StoreError naming the timeout.

    Whether a statement outlives 1 ms depends on the machine, so the query is made heavy (a
    long OR query over a few hundred long chunks); if no attempt times out, the test skips
    rather than pass vacuously.
    """
    kb, _ = _loaded(make_kb, n_docs=80)
    with psycopg.connect(kb.url, autocommit=True) as conn:
        conn.execute("UPDATE kb_chunks SET text = repeat(text || ' ', 40)")
    slow = type(kb)(Settings(statement_timeout_ms=1), embedder=HashingEmbedder(DIM),
                    database_url=kb.url).open()
    try:
        query = " ".join(f"word{i}" for i in range(400))
        for _ in range(5):
            try:
                slow.search(query, limit=20)
            except StoreError as exc:
                assert "statement_timeout" in str(exc) or "timeout" in str(exc).lower()
                return
        pytest.skip("no statement outlived a 1 ms timeout on this machine")
    finally:
        slow.close()


def test_a_deferred_bulk_load_that_fails_half_way_gives_the_indexes_back(make_kb):
    """The load dropped the HNSW and GIN indexes and built them at its end only: an error on
    the way (here the caller's items) left the batches before it committed and every search
    after it without its indexes, silently."""
    kb = make_kb(embedder=HashingEmbedder(DIM))

    def failing():
        for n, item in enumerate(_items(60)):
            if n == 40:
                raise RuntimeError("the source database went away")
            yield item

    with pytest.raises(RuntimeError, match="went away"):
        bulk_load(kb.url, failing(), tenant="default", batch_docs=25, defer_indexes=True)
    with psycopg.connect(kb.url) as conn:
        indexes = {r[0]: r[1] for r in conn.execute(
            "SELECT c.relname, i.indisvalid FROM pg_index i JOIN pg_class c "
            "ON c.oid = i.indexrelid WHERE c.relname IN ('kb_chunks_hnsw_1', 'kb_chunks_tsv_ix')")}
        assert indexes == {"kb_chunks_hnsw_1": True, "kb_chunks_tsv_ix": True}
        assert conn.execute("SELECT count(*) FROM kb_documents").fetchone()[0] >= 25


@pytest.mark.parametrize("vectors", [
    np.ones((4, DIM), dtype=np.float32),  # one vector short
    np.ones((5, DIM + 1), dtype=np.float32),  # another model's dimension
    np.full((5, DIM), np.nan, dtype=np.float32),
    [[1.0] * DIM] * 4 + [[1.0] * 3],  # ragged
])
def test_bulk_load_items_with_wrong_vectors_are_input_errors(make_kb, vectors):
    """A document with fewer vectors than chunks was a raw ValueError in a writer thread
    (``zip(strict=True)``); a NaN or another dimension a DataError that stopped the load."""
    kb = make_kb(embedder=HashingEmbedder(DIM))
    project, draft, _ = next(iter(_items(1)))
    with pytest.raises(InputError, match="one finite vector"):
        bulk_load(kb.url, [(project, draft, vectors)], tenant="default", embedder=kb.embedder)


def test_doctor_names_every_invalid_index_and_how_to_mend_it_without_blocking(make_kb):
    """The doctor kept one index per access method: an INVALID HNSW index of one model hid
    behind a valid one of another, and a leftover ``_new`` index of an interrupted reindex
    got the hint ``REINDEX INDEX``, which blocks the table's searches and writes while the
    whole index is built."""
    kb, _ = _loaded(make_kb)
    with psycopg.connect(kb.url, autocommit=True) as conn:
        for name in ("kb_chunks_hnsw_0_new", "kb_chunks_hnsw_a"):  # sorted before _1
            conn.execute(f"CREATE INDEX {name} ON kb_chunks USING hnsw "
                         f"((embedding::vector({DIM})) vector_cosine_ops) WHERE model = 1")
            conn.execute("UPDATE pg_index SET indisvalid = false "
                         f"WHERE indexrelid = '{name}'::regclass")
    with diagnostics.connect(kb.url) as store:
        r = check_index(store, tenant="default", project="default", samples=3, k=5)
    text = " ".join(r.hints)
    assert "DROP INDEX CONCURRENTLY kb_chunks_hnsw_0_new" in text
    assert "REINDEX INDEX CONCURRENTLY kb_chunks_hnsw_a" in text
    assert "REINDEX INDEX kb_" not in text
