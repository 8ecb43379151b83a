"""Hypothesis properties of rerank and diversify."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from kb_retriever.models import CANONICAL_STATUSES, Candidate
from kb_retriever.ranking import diversify, rerank

from .factories import make_candidate, make_doc, make_settings

NOW = datetime(2025, 6, 1, tzinfo=UTC)
VOCAB = ["oauth", "token", "cache", "redis", "deploy", "deployment", "the", "il", "who", "owns"]
SETTINGS = [
    make_settings(),
    make_settings(normalize_scores=False),
    make_settings(reranking_enabled=False),
    make_settings(canonical_enabled=False, max_chunks_per_doc=1),
]

words = st.lists(st.sampled_from(VOCAB), max_size=6).map(" ".join)
finite = st.floats(-1, 1, allow_nan=False)
documents = st.builds(
    make_doc,
    st.integers(1, 4),
    is_canonical=st.booleans(),
    canonical_status=st.sampled_from((None, *CANONICAL_STATUSES)),
    retrieval_priority=st.integers(0, 100),
    generation_source=st.sampled_from(("human", "auto")),
    tags=st.lists(st.sampled_from(VOCAB), max_size=3).map(tuple),
    doc_date=st.none() | st.integers(-10, 400).map(lambda d: NOW - timedelta(days=d)),
)
metadata = st.fixed_dictionaries(
    {},
    optional={
        "search_tags": st.lists(st.sampled_from(VOCAB), max_size=3),
        "recency_bucket": st.sampled_from(("this_week", "this_month", "older", "bogus")),
        "status_active": st.booleans(),
        "page_property_panel": st.booleans(),
    },
)


@st.composite
def candidate_lists(draw: st.DrawFn) -> list[Candidate]:
    n = draw(st.integers(0, 12))
    return [
        make_candidate(
            chunk_id,
            doc=draw(documents),
            text=draw(words),
            heading=draw(words),
            sim=draw(st.none() | finite),
            metadata=draw(metadata),
            fused_score=draw(st.floats(0, 0.05)),
        )
        for chunk_id in range(1, n + 1)
    ]


queries = words | st.sampled_from(["who owns the cache?", "what is the", ""])
settings_variants = st.sampled_from(SETTINGS)
mentions = st.frozensets(st.integers(1, 4), max_size=2)


@given(queries, candidate_lists(), settings_variants, mentions)
def test_rerank_is_a_sorted_permutation_with_consistent_totals(q, cands, s, ment) -> None:  # type: ignore[no-untyped-def]
    hits = rerank(q, cands, s, mention_doc_ids=ment, now=NOW)
    ids = [h.chunk_id for h in hits]
    assert len(ids) == len(set(ids))
    assert sorted(ids) == sorted(c.chunk_id for c in cands)
    scores = [h.score for h in hits]
    assert scores == sorted(scores, reverse=True)
    for h in hits:
        b = h.scores
        assert h.score == b.total
        assert math.isclose(b.total, b.base + b.additive + b.canonical, abs_tol=1e-12)
        assert math.isclose(b.canonical, b.canonical_boost - b.canonical_penalty, abs_tol=1e-12)
        assert b.canonical_penalty >= 0
        assert 0.0 <= b.keyword <= 1.0 and 0.0 <= b.heading <= 1.0


@given(
    queries,
    candidate_lists().filter(bool),
    settings_variants,
    st.sampled_from(("superseded", "deprecated", "archived")),
    st.data(),
)
def test_penalties_never_raise_a_score(q, cands, s, status, data) -> None:  # type: ignore[no-untyped-def]
    i = data.draw(st.integers(0, len(cands) - 1))
    target = cands[i].chunk_id

    def score_with(**doc_fields: object) -> float:
        variant = list(cands)
        variant[i] = replace(cands[i], document=replace(cands[i].document, **doc_fields))
        hits = rerank(q, variant, s, now=NOW)
        return next(h.score for h in hits if h.chunk_id == target)

    accepted = score_with(is_canonical=True, canonical_status="accepted")
    assert score_with(is_canonical=True, canonical_status=status) <= accepted
    human = score_with(generation_source="human")
    assert score_with(generation_source="auto") <= human


@given(
    candidate_lists(),
    settings_variants,
    st.integers(0, 15),
    st.integers(0, 4),
)
def test_diversify_bounds_and_fill(cands, s, limit, cap) -> None:  # type: ignore[no-untyped-def]
    hits = rerank("oauth cache", cands, s, now=NOW)
    top, rest = diversify(hits, limit, cap)
    assert len(top) <= limit
    assert len(top) == min(limit, len(hits))  # fills the limit whenever enough hits exist
    uids = [h.uid for h in top + rest]
    assert len(uids) == len(set(uids))
    assert sorted(uids) == sorted(h.uid for h in hits)
    position = {h.uid: i for i, h in enumerate(hits)}
    assert [position[h.uid] for h in top] == sorted(position[h.uid] for h in top)
    assert [position[h.uid] for h in rest] == sorted(position[h.uid] for h in rest)
    per_doc = Counter(h.document.id for h in top)
    for h in rest:  # left out only because top is full or the document hit its cap
        assert len(top) == limit or (cap > 0 and per_doc[h.document.id] >= cap)
