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


def test_fuse_legs_leaves_the_rows_unchanged_and_keeps_mentions_last():
    """The legs' rows are the reader's (and may be cached): fusion returns new records. A
    chunk both legs found takes the vector leg's row and both ranks; an @mentioned chunk
    neither found joins with score 0, after every found one."""
    import copy

    from kb_retriever.ranking.fusion import fuse_legs

    vec = [{"n_pre": 3, "chunk_id": 9, "vector_rank": 1, "leg": "v"},
           {"n_pre": 3, "chunk_id": 4, "vector_rank": 2, "leg": "v"},
           {"n_pre": 3, "chunk_id": 2, "vector_rank": None, "mention": True, "leg": "m"}]
    kw = [{"n_pre": 1, "chunk_id": 4, "fts_rank": 1, "fts_score": 0.25, "leg": "k"}]
    before = copy.deepcopy((vec, kw))
    fused, n_pre = fuse_legs(vec, kw, weights=(0.7, 0.3))
    assert (vec, kw) == before and n_pre == 4
    assert [(f.row["chunk_id"], f.row["leg"], f.vector_rank, f.fts_rank, f.fts_score)
            for f in fused] == [(4, "v", 2, 1, 0.25), (9, "v", 1, None, None),
                                (2, "m", None, None, None)]
    assert fused[-1].score == 0.0
    semantic, _ = fuse_legs(vec, None, weights=(0.7, 0.3))
    assert [f.row["chunk_id"] for f in semantic] == [9, 4, 2]
