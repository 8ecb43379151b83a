"""The worked example of reference/retrieval-pipeline.md on examples/kb/ (default embedder)."""

from __future__ import annotations

import pytest

from kb_retriever import Origin, compose_prompt

pytestmark = pytest.mark.db

QUESTION = "what cache layer did we standardise on?"
# a question about the rejected Memcached record (the worked example is about the current
# state, and since decision 0009's amendment of 2026-12-05 the ⚠ block warns only about a
# record the question is about)
PROPOSAL = "can we use memcached as shared cache?"


@pytest.fixture(scope="module")
def result(example_kb):
    return example_kb.search(QUESTION)


@pytest.fixture(scope="module")
def proposal(example_kb):
    return example_kb.search(PROPOSAL)


def _slugs(hits):
    return [h.document.slug or h.document.doc_key for h in hits]


def test_accepted_decision_ranks_first(result):
    assert _slugs(result.primary)[0] == "dec-cache-v2"
    assert "blog-redis-notes" in _slugs(result.primary)


def test_superseded_decision_still_retrievable_but_penalised(result, example_kb):
    slugs = _slugs(result.primary) + _slugs(result.runner_up)
    assert "dec-cache-v1" in slugs
    v1 = next(h for h in result.primary + result.runner_up if h.document.slug == "dec-cache-v1")
    v2 = result.primary[0]
    assert v1.scores.canonical_penalty == pytest.approx(0.40)
    assert v1.score < v2.score
    # without the penalty v1 would be close to v2: the trust gradient, not relevance, orders them
    assert v1.score + 0.40 > v2.score - 0.25


def test_graph_expansion_and_rejected_injection(result, proposal):
    expanded = {h.document.slug: h for h in result.expanded}
    assert "mod-session-store" in expanded
    hit = expanded["mod-session-store"]
    assert hit.origin is Origin.GRAPH_EXPANSION
    assert hit.edge_type == "depends_on" and hit.from_slug == "dec-cache-v2" and hit.hop == 1
    # the current-state question is about the accepted decision: no warning, and the rejected
    # record takes no slot of the context either
    assert result.rejected == ()
    assert "rej-memcached-2023" not in _slugs(result.primary + result.expanded)
    # a question about the rejected record: its decision first, then the record, and the warning
    assert _slugs(proposal.primary)[:2] == ["dec-cache-v2", "rej-memcached-2023"]
    assert _slugs(proposal.rejected) == ["rej-memcached-2023"]
    rej = proposal.rejected[0]
    assert rej.similarity is not None and rej.similarity >= 0.40


def test_meta_contract(result):
    meta = result.meta
    for key in ("primary_count", "expanded_count", "rejected_count", "runner_up_count",
                "retrieval_ms", "search_strategy", "retrieval_stats", "should_refuse"):
        assert key in meta
    assert meta["should_refuse"] is False
    stats = meta["retrieval_stats"]
    assert stats["candidates_pre_threshold"] >= stats["candidates_post_threshold"] > 0
    assert set(meta["search_strategy"]) >= {
        "semantic_enabled", "fts_enabled", "fusion_method", "graph_expansion_enabled",
        "rejected_injection_enabled", "filters_applied"}


def test_prompt_has_three_blocks(proposal):
    prompt = compose_prompt(proposal, project="default")
    assert "## ⚠ REJECTED APPROACHES" in prompt
    assert "## 📎 RELATED CONTEXT" in prompt
    assert "## Context" in prompt
    assert prompt.index("REJECTED") < prompt.index("RELATED") < prompt.index("## Context")


def test_unrelated_question_refuses(example_kb):
    result = example_kb.search("what is the best recipe for a chocolate souffle?")
    assert result.meta["should_refuse"] is True


def test_hybrid_finds_exact_error_code(example_kb):
    result = example_kb.search("ERR_PAYMENT_TIMEOUT_504", limit=3)
    assert any("ERR_PAYMENT_TIMEOUT_504" in h.text for h in result.primary)
    assert result.primary[0].document.doc_key == "inc-2026-03-payment-timeouts"
