"""The weight tuner on hand-built candidate pools (pure: no database)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

from kb_retriever.bench.dataset import BenchQuery
from kb_retriever.bench.tune import Pool, split, tune
from kb_retriever.models import Candidate, DocumentRef
from kb_retriever.settings import Settings

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _cand(i: int, key: str, text: str, sim: float) -> Candidate:
    doc = DocumentRef(id=i, tenant_id="t", project_key="p", doc_key=key, title=key,
                      source_path=f"{key}.md")
    return Candidate(chunk_id=i, text=text, heading_path="", chunk_order=0, document=doc,
                     vector_similarity=sim, fused_score=sim)


def _pool(n: int) -> Pool:
    # The right doc shares the query's rare words but has the lower cosine: only a higher
    # keyword weight puts it first.
    word = f"zeta{n}"
    q = BenchQuery(id=f"q{n:02d}", query=f"{word} rotation policy",
                   relevance={f"right{n}": 3})
    cands = (
        _cand(2 * n, f"wrong{n}", "general notes about many unrelated things", 0.62),
        _cand(2 * n + 1, f"right{n}", f"the {word} rotation policy is monthly", 0.50),
        # A weak third candidate keeps min-max from pinning the right doc's vector signal at 0.
        _cand(1000 + n, f"other{n}", "completely different subject matter", 0.20),
    )
    return Pool(q, cands)


def test_split_is_deterministic_and_disjoint():
    queries = [BenchQuery(id=f"q{i}", query="x") for i in range(20)]
    train, held = split(queries, 0.7, seed=0)
    assert len(train) == 14 and len(held) == 6
    assert {q.id for q in train}.isdisjoint(q.id for q in held)
    assert split(list(reversed(queries)), 0.7, seed=0)[1] == list(reversed(held))
    assert split(queries, 0.7, seed=1) != (train, held)


def test_tune_finds_the_keyword_weight_and_reports_held_out():
    pools = [_pool(n) for n in range(10)]
    settings = Settings(keyword_weight=0.0, heading_weight=0.0, tag_overlap_weight=0.0)
    out = tune(pools, settings, k=1, now=NOW)
    assert out["train_ndcg_before"] == 0.0 and out["heldout_ndcg_before"] == 0.0
    assert out["train_ndcg_after"] == 1.0 and out["heldout_ndcg_after"] == 1.0
    assert out["weights_after"]["keyword_weight"] > 0
    assert "KB_RERANK_KEYWORD_WEIGHT=" + str(out["weights_after"]["keyword_weight"]) in out["env"]
    assert out["train_queries"] + out["heldout_queries"] == 10


def test_tune_keeps_weights_when_nothing_helps():
    # Every pool is already perfect under the defaults: no step can beat it, nothing moves.
    pools = []
    for n in range(6):
        p = _pool(n)
        right = next(c for c in p.candidates if c.document.doc_key.startswith("right"))
        pools.append(Pool(p.query, (replace(right, vector_similarity=0.9, fused_score=0.9),
                                    *[c for c in p.candidates if c is not right])))
    out = tune(pools, Settings(), k=1, now=NOW)
    assert out["train_ndcg_before"] == 1.0 and out["heldout_ndcg_before"] == 1.0
    assert out["env"] == [] and out["weights_after"] == out["weights_before"]


def test_queries_that_grade_nothing_do_not_dilute_the_tuners_ndcg():
    """The tuner averaged every non-refusal query, those grading nothing at 0: a perfect set
    plus as many warning-only queries read 0.5 where the benchmark says 1.0, and a held-out
    set of none read 0.0."""
    pools = []
    for n in range(6):
        p = _pool(n)
        right = next(c for c in p.candidates if c.document.doc_key.startswith("right"))
        pools.append(Pool(p.query, (replace(right, vector_similarity=0.9, fused_score=0.9),
                                    *[c for c in p.candidates if c is not right])))
    warned = [Pool(replace(p.query, id=f"w{p.query.id}", relevance={},
                           expect_rejected=("wrong0",)), p.candidates) for p in pools]
    out = tune([*pools, *warned], Settings(), k=1, now=NOW)
    assert out["train_ndcg_before"] == 1.0 and out["heldout_ndcg_before"] == 1.0
    alone = tune(pools[:1], Settings(), k=1, now=NOW)  # one query: none held out
    assert alone["heldout_queries"] == 0 and alone["heldout_ndcg_before"] is None
