from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kb_retriever.ranking import fuse_rrf


def test_single_list_uses_one_based_ranks() -> None:
    fused = fuse_rrf([["a", "b"]], [1.0], k=60)
    assert fused == [("a", 1 / 61), ("b", 1 / 62)]


def test_weighted_sum_across_lists() -> None:
    fused = dict(fuse_rrf([[1, 2], [2, 3]], [0.7, 0.3]))
    assert math.isclose(fused[2], 0.7 / 62 + 0.3 / 61)
    assert math.isclose(fused[1], 0.7 / 61)
    assert math.isclose(fused[3], 0.3 / 62)


def test_both_lists_beat_one() -> None:
    assert [key for key, _ in fuse_rrf([[1, 2], [2, 3]], [0.5, 0.5])] == [2, 1, 3]


def test_ties_keep_first_seen_order() -> None:
    # "x" and "y" share rank 1 in equally weighted lists: the first list's key comes first.
    assert [key for key, _ in fuse_rrf([["x"], ["y"]], [1.0, 1.0])] == ["x", "y"]
    assert [key for key, _ in fuse_rrf([["y"], ["x"]], [1.0, 1.0])] == ["y", "x"]


def test_duplicate_inside_a_list_counts_once_at_best_rank() -> None:
    assert fuse_rrf([["a", "a"]], [1.0]) == [("a", 1 / 61)]


def test_empty_inputs() -> None:
    assert fuse_rrf([], []) == []
    assert fuse_rrf([[], []], [0.7, 0.3]) == []


def test_weight_count_must_match() -> None:
    with pytest.raises(ValueError, match="one weight per list"):
        fuse_rrf([["a"], ["b"]], [1.0])


def test_negative_k_rejected() -> None:
    with pytest.raises(ValueError, match="k must be"):
        fuse_rrf([["a"]], [1.0], k=-1)


def test_k_changes_the_gap() -> None:
    close = fuse_rrf([["a", "b"]], [1.0], k=1000)
    far = fuse_rrf([["a", "b"]], [1.0], k=1)
    assert close[0][1] / close[1][1] < far[0][1] / far[1][1]


@given(
    st.lists(st.lists(st.integers(0, 20), max_size=15), min_size=1, max_size=4),
    st.data(),
)
def test_properties(lists: list[list[int]], data: st.DataObject) -> None:
    weights = data.draw(st.lists(st.floats(0, 1), min_size=len(lists), max_size=len(lists)))
    fused = fuse_rrf(lists, weights)
    keys = [key for key, _ in fused]
    assert len(keys) == len(set(keys))
    assert set(keys) == {key for lst in lists for key in lst}
    scores = [score for _, score in fused]
    assert scores == sorted(scores, reverse=True)
    assert all(score >= 0 for score in scores)


def test_fuse_legs_takes_the_vector_legs_candidate_and_keeps_mentions_last():
    """Fusion returns new candidates with both legs' ranks. A chunk both legs found takes the
    vector leg's candidate; an @mentioned chunk neither found joins with score 0, after every
    found one."""
    from kb_retriever.models import Candidate, DocumentRef
    from kb_retriever.models.legs import LegHit, LegResult
    from kb_retriever.ranking.fusion import fuse_legs

    doc = DocumentRef(1, "t", "p", "d", "D", "d.md")

    def hit(rank, chunk, leg, score=None, mention=False):
        return LegHit(rank, score, mention, Candidate(chunk, leg, "", 0, doc))

    vec = LegResult((hit(1, 9, "v"), hit(2, 4, "v"), hit(None, 2, "m", mention=True)), 3)
    kw = LegResult((hit(1, 4, "k", 0.25),), 1)
    fused, n_pre = fuse_legs(vec, kw, weights=(0.7, 0.3))
    assert n_pre == 4
    assert [(c.chunk_id, c.text, c.vector_rank, c.fts_rank, c.fts_score)
            for c in fused] == [(4, "v", 2, 1, 0.25), (9, "v", 1, None, None),
                                (2, "m", None, None, None)]
    assert fused[-1].fused_score == 0.0
    assert vec.hits[0].candidate.vector_rank is None  # the legs' records are not changed
    semantic, _ = fuse_legs(vec, None, weights=(0.7, 0.3))
    assert [c.chunk_id for c in semantic] == [9, 4, 2]
