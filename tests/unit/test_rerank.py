"""Reference §21 RerankerTest, RerankerCanonicalTest, RerankerLayer4Test, AutoTier: pure tests."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import pytest

from kb_retriever.models import Origin
from kb_retriever.ranking import rerank
from kb_retriever.ranking.rerank import rank

from .factories import canonical_doc, make_candidate, make_doc, make_settings

NOW = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)


def scores_by_id(hits):  # type: ignore[no-untyped-def]
    return {h.chunk_id: h.score for h in hits}


class TestReranker:
    def test_empty_input(self) -> None:
        assert rerank("oauth", [], make_settings()) == []

    def test_stop_word_only_query_keeps_input_order(self) -> None:
        cands = [make_candidate(i, sim=0.1 * i, text="oauth") for i in range(1, 5)]
        hits = rerank("what is the", cands, make_settings())
        assert [h.chunk_id for h in hits] == [1, 2, 3, 4]
        assert all(h.scores.keyword == 0.0 and h.scores.vector == 0.0 for h in hits)

    def test_disabled_returns_input_order_with_fused_score(self) -> None:
        cands = [
            make_candidate(1, sim=0.2, text="nothing", fused_score=0.03),
            make_candidate(2, sim=0.9, text="oauth", fused_score=0.02),
        ]
        hits = rerank("oauth", cands, make_settings(reranking_enabled=False))
        assert [h.chunk_id for h in hits] == [1, 2]
        assert [h.score for h in hits] == [0.03, 0.02]
        first = hits[0].scores
        assert (first.base, first.additive, first.canonical, first.total) == (0.03, 0.0, 0.0, 0.03)
        assert first.fused_score == 0.03 and first.raw_similarity == 0.2

    def test_passthrough_still_applies_canonical_and_mention(self) -> None:
        cands = [
            make_candidate(1, doc=canonical_doc(1, "superseded"), fused_score=0.03),
            make_candidate(2, fused_score=0.02),
            make_candidate(3, fused_score=0.01),
        ]
        s = make_settings(reranking_enabled=False)
        hits = rerank("oauth", cands, s, mention_doc_ids=frozenset({3}))
        assert [h.chunk_id for h in hits] == [3, 2, 1]
        assert math.isclose(hits[0].scores.mention_boost, 0.5)
        assert math.isclose(hits[-1].scores.canonical_penalty, 0.4)
        assert math.isclose(hits[-1].scores.canonical_boost, 0.05)

    def test_a_cosine_the_embedder_cannot_read_weighs_nothing(self) -> None:
        """``cosine=False`` (the embedder does not read the question's script): the order
        stands on the words, and the breakdown still shows the cosine."""
        cands = [make_candidate(1, sim=0.95, text="別の話題"),
                 make_candidate(2, sim=0.30, text="基幹 システム の 移行")]
        read = rank("基幹 システム", cands, make_settings())
        unread = rank("基幹 システム", cands, make_settings(), cosine=False)
        assert [s.candidate.chunk_id for s in read] == [1, 2]
        assert [s.candidate.chunk_id for s in unread] == [2, 1]
        assert unread[1].terms["vector"] > 0 and unread[1].terms["base"] == 0.0

    def test_keyword_match_beats_higher_vector_only(self) -> None:
        cands = [
            make_candidate(1, sim=0.80, text="unrelated words"),
            make_candidate(2, sim=0.78, text="how to configure OAuth"),
        ]
        hits = rerank("oauth", cands, make_settings(normalize_scores=False))
        assert hits[0].chunk_id == 2

    def test_keyword_match_beats_higher_vector_only_normalised(self) -> None:
        cands = [
            make_candidate(1, sim=0.80, text="unrelated words"),
            make_candidate(2, sim=0.78, text="how to configure OAuth"),
            make_candidate(3, sim=0.40, text="filler"),
        ]
        assert rerank("oauth", cands, make_settings())[0].chunk_id == 2

    def test_breakdown_is_complete(self) -> None:
        cand = make_candidate(7, sim=0.6, text="oauth", heading="Auth > OAuth", vector_rank=1)
        hit = rerank("oauth", [cand], make_settings(), now=NOW)[0]
        b = hit.scores
        assert hit.origin is Origin.PRIMARY and hit.similarity == 0.6
        assert (b.vector, b.keyword, b.heading) == (1.0, 1.0, 1.0)
        assert math.isclose(b.base, 0.55 + 0.25 + 0.05)
        assert b.raw_similarity == 0.6 and b.vector_rank == 1 and b.fts_rank is None
        assert hit.score == b.total
        assert math.isclose(b.total, b.base + b.additive + b.canonical)

    def test_sorted_descending(self) -> None:
        cands = [make_candidate(i, sim=s) for i, s in enumerate([0.3, 0.9, 0.5, 0.7], 1)]
        hits = rerank("oauth", cands, make_settings())
        assert [h.chunk_id for h in hits] == [2, 4, 3, 1]

    def test_ties_keep_input_order(self) -> None:
        cands = [make_candidate(i, sim=0.5) for i in (5, 3, 9)]
        assert [h.chunk_id for h in rerank("oauth", cands, make_settings())] == [5, 3, 9]

    def test_missing_heading_and_vector_are_zero(self) -> None:
        cands = [make_candidate(1, text="oauth"), make_candidate(2, sim=0.5, text="x")]
        hit = {h.chunk_id: h for h in rerank("oauth", cands, make_settings())}[1]
        assert hit.scores.heading == 0.0 and hit.scores.vector == 0.0
        assert hit.scores.raw_similarity is None

    def test_stop_words_ignored_keyword_one(self) -> None:
        hit = rerank("come il OAuth", [make_candidate(1, text="OAuth setup")], make_settings())[0]
        assert hit.scores.keyword == 1.0


class TestRerankerCanonical:
    def test_accepted_canonical_beats_non_canonical_at_equal_vector(self) -> None:
        cands = [make_candidate(1, sim=0.5), make_candidate(2, doc=canonical_doc(2), sim=0.5)]
        assert rerank("cache", cands, make_settings())[0].chunk_id == 2

    def test_superseded_falls_below_non_canonical(self) -> None:
        cands = [
            make_candidate(1, doc=canonical_doc(1, "superseded"), sim=0.5),
            make_candidate(2, sim=0.5),
        ]
        assert [h.chunk_id for h in rerank("cache", cands, make_settings())] == [2, 1]

    @pytest.mark.parametrize(
        ("status", "penalty"),
        [("superseded", 0.4), ("deprecated", 0.4), ("archived", 0.6), ("draft", 0.0)],
    )
    def test_status_penalties(self, status: str, penalty: float) -> None:
        hit = rerank("cache", [make_candidate(1, doc=canonical_doc(1, status))], make_settings())[0]
        assert math.isclose(hit.scores.canonical_penalty, penalty)
        assert math.isclose(hit.scores.canonical, 0.05 - penalty)

    def test_priority_scales_boost(self) -> None:
        cands = [
            make_candidate(1, doc=canonical_doc(1, retrieval_priority=10)),
            make_candidate(2, doc=canonical_doc(2, retrieval_priority=90)),
        ]
        boosts = {
            h.chunk_id: h.scores.canonical_boost for h in rerank("x1", cands, make_settings())
        }
        assert math.isclose(boosts[1], 0.01) and math.isclose(boosts[2], 0.09)

    def test_non_canonical_unchanged(self) -> None:
        hit = rerank("cache", [make_candidate(1, sim=0.5)], make_settings())[0]
        assert (hit.scores.canonical_boost, hit.scores.canonical_penalty) == (0.0, 0.0)

    def test_canonical_disabled(self) -> None:
        cand = make_candidate(1, doc=canonical_doc(1, "archived", generation_source="auto"))
        hit = rerank("cache", [cand], make_settings(canonical_enabled=False))[0]
        assert hit.scores.canonical == 0.0


class TestRerankerAutoTier:
    def test_human_accepted_beats_auto_beats_raw(self) -> None:
        cands = [
            make_candidate(1, sim=0.5),
            make_candidate(2, doc=canonical_doc(2, generation_source="auto"), sim=0.5),
            make_candidate(3, doc=canonical_doc(3), sim=0.5),
        ]
        assert [h.chunk_id for h in rerank("cache", cands, make_settings())] == [3, 2, 1]

    def test_zero_penalty_ties(self) -> None:
        cands = [
            make_candidate(1, doc=canonical_doc(1, generation_source="auto"), sim=0.5),
            make_candidate(2, doc=canonical_doc(2), sim=0.5),
        ]
        scores = scores_by_id(rerank("cache", cands, make_settings(auto_tier_penalty=0.0)))
        assert scores[1] == scores[2]

    def test_non_canonical_auto_is_penalised_too(self) -> None:
        cands = [
            make_candidate(1, doc=make_doc(1, generation_source="auto"), sim=0.5),
            make_candidate(2, sim=0.5),
        ]
        hits = rerank("cache", cands, make_settings())
        assert [h.chunk_id for h in hits] == [2, 1]
        assert math.isclose(hits[1].scores.canonical_penalty, 0.02)


class TestRerankerLayer4:
    def _one(self, query: str, **kw):  # type: ignore[no-untyped-def]
        return rerank(query, [make_candidate(1, sim=0.5, **kw)], make_settings(), now=NOW)[0]

    def test_tag_overlap_from_search_tags(self) -> None:
        hit = self._one("billing retries", metadata={"search_tags": ["Billing", "retries"]})
        assert hit.scores.tag_overlap == 1.0
        assert math.isclose(hit.scores.additive, 0.05)

    def test_tag_overlap_falls_back_to_frontmatter_tags(self) -> None:
        hit = self._one("billing retries", doc=make_doc(1, tags=("billing", "ops", "x1")))
        assert math.isclose(hit.scores.tag_overlap, 1 / 4)

    def test_preamble_needs_property_query_and_panel(self) -> None:
        panel = {"page_property_panel": True}
        assert self._one("who owns the billing service?", metadata=panel).scores.preamble == 1.0
        assert self._one("billing service retries", metadata=panel).scores.preamble == 0.0
        assert self._one("who owns the billing service?").scores.preamble == 0.0
        assert self._one("Qual è lo stato del rilascio", metadata=panel).scores.preamble == 1.0

    @pytest.mark.parametrize(
        ("bucket", "value"),
        [("this_week", 1.0), ("this_month", 0.7), ("this_quarter", 0.4), ("older", 0.1), ("?", 0)],
    )
    def test_recency_bucket(self, bucket: str, value: float) -> None:
        assert self._one("billing", metadata={"recency_bucket": bucket}).scores.recency == value

    @pytest.mark.parametrize(
        ("age_days", "value"),
        [(-3, 1.0), (0, 1.0), (7, 1.0), (8, 0.7), (30, 0.7), (60, 0.4), (91, 0.1)],
    )
    def test_recency_from_doc_date_at_query_time(self, age_days: int, value: float) -> None:
        doc = make_doc(1, doc_date=NOW - timedelta(days=age_days))
        assert self._one("billing", doc=doc).scores.recency == value

    def test_naive_doc_date_is_utc(self) -> None:
        doc = make_doc(1, doc_date=(NOW - timedelta(days=2)).replace(tzinfo=None))
        assert self._one("billing", doc=doc).scores.recency == 1.0

    def test_bucket_wins_over_doc_date(self) -> None:
        doc = make_doc(1, doc_date=NOW)
        hit = self._one("billing", doc=doc, metadata={"recency_bucket": "older"})
        assert hit.scores.recency == 0.1

    def test_status_active(self) -> None:
        assert self._one("billing", metadata={"status_active": True}).scores.status_active == 1.0
        assert self._one("billing", metadata={"status_active": "false"}).scores.status_active == 0.0

    def test_legacy_chunk_has_no_additive(self) -> None:
        assert self._one("billing").scores.additive == 0.0

    def test_normalised_signal_preferred_over_raw(self) -> None:
        cands = [make_candidate(1, sim=0.40), make_candidate(2, sim=0.30)]
        hits = rerank("billing", cands, make_settings())
        assert [h.scores.vector for h in hits] == [1.0, 0.0]
        raw = rerank("billing", cands, make_settings(normalize_scores=False))
        assert [h.scores.vector for h in raw] == [0.40, 0.30]

    def test_equal_normalised_signals_ignore_raw_scale(self) -> None:
        s = make_settings()
        high = rerank("billing", [make_candidate(1, sim=0.9), make_candidate(2, sim=0.9)], s)
        low = rerank("billing", [make_candidate(1, sim=0.3), make_candidate(2, sim=0.3)], s)
        assert [h.score for h in high] == [h.score for h in low]

    def test_mention_boost_floats_doc_without_dropping_others(self) -> None:
        cands = [make_candidate(i, sim=s) for i, s in enumerate([0.9, 0.85, 0.8, 0.7], 1)]
        hits = rerank("billing", cands, make_settings(), mention_doc_ids=frozenset({3}))
        assert [h.chunk_id for h in hits] == [3, 1, 2, 4]
        assert math.isclose(hits[0].scores.mention_boost, 0.5)


class TestRerankerRobustness:
    def test_non_finite_similarity_counts_as_zero(self) -> None:
        cands = [make_candidate(1, sim=float("nan")), make_candidate(2, sim=0.5)]
        hits = rerank("billing", cands, make_settings(normalize_scores=False))
        assert [h.chunk_id for h in hits] == [2, 1]
        assert hits[1].scores.vector == 0.0

    def test_search_tags_as_comma_string(self) -> None:
        cand = make_candidate(1, metadata={"search_tags": "billing, Retries"})
        hit = rerank("billing retries", [cand], make_settings())[0]
        assert hit.scores.tag_overlap == 1.0

    def test_input_is_not_mutated(self) -> None:
        cands = (make_candidate(2, sim=0.1), make_candidate(1, sim=0.9))
        rerank("billing", cands, make_settings())
        assert [c.chunk_id for c in cands] == [2, 1]


def test_rank_builds_the_hits_of_rerank_on_demand() -> None:
    """rank() scores without building hits (a search builds only those it keeps): each
    Scored's hit equals rerank's, in the same order; as a runner-up only its origin differs."""
    import dataclasses

    from kb_retriever.ranking import diversify
    from kb_retriever.ranking.rerank import rank

    cands = [make_candidate(i, sim=0.1 * i, text="oauth rotation" if i % 2 else "keys",
                            doc=canonical_doc(i % 3) if i % 3 else make_doc(i % 3))
             for i in range(1, 9)]
    for settings in (make_settings(), make_settings(reranking_enabled=False)):
        hits = rerank("rotate the oauth keys", cands, settings, now=NOW)
        scored = rank("rotate the oauth keys", cands, settings, now=NOW)
        assert [s.hit() for s in scored] == hits and [s.score for s in scored] == [
            h.score for h in hits]
        assert [s.uid for s in scored] == [h.uid for h in hits]
        kept, rest = diversify(scored, 3, 1)
        assert [s.hit() for s in kept] == diversify(hits, 3, 1)[0]
        runner = rest[0].hit(Origin.RUNNER_UP)
        assert runner == dataclasses.replace(diversify(hits, 3, 1)[1][0], origin=Origin.RUNNER_UP)


def test_the_signal_table_is_the_breakdown() -> None:
    """Each signal is one row: a ScoreBreakdown field, a weight setting, a group."""
    from dataclasses import fields

    from kb_retriever import ScoreBreakdown, Settings
    from kb_retriever.ranking.signals import SIGNALS, TERMS

    names = [f.name for f in fields(ScoreBreakdown)]
    assert list(TERMS) == names[:len(TERMS)]
    for signal in SIGNALS:
        assert signal.group in ("base", "additive")
        assert signal.weight is None or signal.weight in Settings.model_fields
        assert signal.evidence in ("signal", "raw_similarity", None)


def test_the_table_owns_the_tuner_grid_and_every_scored_term() -> None:
    """The tuner's grid is the rows' grids; a scored candidate carries every term by name."""
    from kb_retriever import Settings
    from kb_retriever.bench.tune import GRIDS as TUNED
    from kb_retriever.ranking.rerank import rank
    from kb_retriever.ranking.signals import ADJUSTMENTS, GRIDS, SIGNALS, TERMS

    assert TUNED is GRIDS
    rows = [*SIGNALS, *ADJUSTMENTS]
    assert list(GRIDS) == [name for row in rows for name in row.grids]
    for name, grid in GRIDS.items():
        assert name in Settings.model_fields and grid
    cands = [make_candidate(1, sim=0.4, text="oauth"), make_candidate(2, sim=0.1)]
    for settings in (make_settings(), make_settings(reranking_enabled=False)):
        for s in rank("oauth", cands, settings, now=NOW):
            assert tuple(s.terms) == TERMS
            assert s.score == s.terms["total"] == (
                s.terms["base"] + s.terms["additive"] + s.terms["canonical"])
