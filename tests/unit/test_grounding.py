"""Reference §21 RetrievalGroundingTest, with the raw-evidence calibration of §24.5."""

from __future__ import annotations

import math

from kb_retriever.models import ScoreBreakdown
from kb_retriever.ranking import evidence_score, is_grounded, rerank, should_refuse

from .factories import make_candidate, make_hit, make_settings

S = make_settings()


def test_grounded_by_similarity_alone() -> None:
    assert is_grounded(make_hit(1, score=0.0, similarity=0.45), S)
    assert not is_grounded(make_hit(1, score=0.0, similarity=0.44), S)


def test_grounded_by_raw_score_alone() -> None:
    # keyword 1.0 + heading 1.0 = 0.30 >= 0.25 even with similarity 0.
    b = ScoreBreakdown(keyword=1.0, heading=1.0, base=0.30, total=0.30)
    assert is_grounded(make_hit(1, score=0.30, similarity=0.0, scores=b), S)


def test_mention_boost_is_subtracted() -> None:
    b = ScoreBreakdown(mention_boost=0.5, additive=0.5, total=0.5)
    assert not is_grounded(make_hit(1, score=0.5, similarity=0.1, scores=b), S)


def test_normalised_vector_does_not_ground_a_weak_top_hit() -> None:
    # Reference weakness §24.5: the top candidate always gets vector signal 1.0 (score 0.55).
    cands = [make_candidate(1, sim=0.32), make_candidate(2, sim=0.31)]
    top = rerank("unrelated question", cands, S)[0]
    assert top.scores.vector == 1.0 and top.score >= 0.55
    assert math.isclose(evidence_score(top, S), 0.55 * 0.32)
    assert not is_grounded(top, S)
    assert should_refuse([top], S)


def test_evidence_score_swaps_vector_term_only() -> None:
    cands = [make_candidate(1, sim=0.40, text="oauth"), make_candidate(2, sim=0.10)]
    top = rerank("oauth", cands, S)[0]
    expected = top.score - 0.55 * top.scores.vector + 0.55 * 0.40
    assert math.isclose(evidence_score(top, S), expected)
    assert is_grounded(top, S)  # 0.22 + 0.25 keyword


def test_passthrough_hit_uses_raw_similarity_not_fused_score() -> None:
    b = ScoreBreakdown(base=0.3, total=0.3, fused_score=0.3)
    assert not is_grounded(make_hit(1, score=0.3, similarity=0.2, scores=b), S)


def test_similarity_falls_back_to_breakdown() -> None:
    hit = make_hit(1, score=0.0, similarity=None, scores=ScoreBreakdown())
    assert not is_grounded(hit, S)
    from dataclasses import replace

    hit = replace(hit, scores=replace(hit.scores, raw_similarity=0.9))
    assert is_grounded(hit, S)


def test_empty_refuses() -> None:
    assert should_refuse([], S)
    assert should_refuse([], make_settings(refusal_min_chunks=0))


def test_refuses_when_nothing_grounded() -> None:
    assert should_refuse([make_hit(1, score=0.1, similarity=0.2)], S)
    assert not should_refuse([make_hit(1, score=0.1, similarity=0.9)], S)


def test_min_chunks_two() -> None:
    s2 = make_settings(refusal_min_chunks=2)
    one = [make_hit(1, score=0.0, similarity=0.9), make_hit(2, score=0.0, similarity=0.1)]
    two = [make_hit(1, score=0.0, similarity=0.9), make_hit(2, score=0.0, similarity=0.5)]
    assert should_refuse(one, s2)
    assert not should_refuse(two, s2)


def test_accepts_any_iterable() -> None:
    assert not should_refuse(iter([make_hit(1, score=0.0, similarity=0.9)]), S)


def test_min_chunks_means_the_same_on_a_calibrated_scope() -> None:
    """The calibrated gate counted any hits against ``refusal_min_chunks``: with 0 it refused
    a weak hit the absolute rule keeps, with 3 it kept one strong and two junk hits the
    absolute rule refuses. A project's refusals changed when it was calibrated."""
    from kb_retriever.ranking.calibration import PROBE_VERSION, PROBES, Calibration

    calibration = Calibration.from_rows([{"probe_version": PROBE_VERSION,
                                          "probe_similarity": [0.2] * len(PROBES)}])
    weak = [make_hit(1, score=0.0, similarity=0.1)]
    mixed = [make_hit(1, score=0.0, similarity=0.9), make_hit(2, score=0.0, similarity=0.1),
             make_hit(3, score=0.0, similarity=0.1)]
    for chunks, hits, refused in ((0, weak, False), (3, mixed, True), (1, mixed, False),
                                  (1, weak, True)):
        for rule in ("absolute", "calibrated"):
            settings = make_settings(refusal_min_chunks=chunks, refusal_rule=rule)
            assert should_refuse(hits, settings, calibration) is refused, (chunks, rule)
