from __future__ import annotations

from kb_retriever.models import Hit
from kb_retriever.ranking import diversify

from .factories import make_doc, make_hit


def ranked(doc_ids: list[int]) -> list[Hit]:
    """Hits best first; chunk ids 1..n, document ids as given."""
    n = len(doc_ids)
    return [make_hit(i + 1, doc=make_doc(d), score=float(n - i)) for i, d in enumerate(doc_ids)]


def ids(hits: list[Hit]) -> list[int]:
    return [h.chunk_id for h in hits]


def test_cap_two_keeps_two_per_doc_of_six() -> None:
    hits = ranked([1, 1, 1, 2, 2, 2])
    top, rest = diversify(hits, limit=4, max_per_doc=2)
    assert ids(top) == [1, 2, 4, 5]
    assert ids(rest) == [3, 6]


def test_cap_zero_disables() -> None:
    top, rest = diversify(ranked([1, 1, 1, 1]), limit=10, max_per_doc=0)
    assert ids(top) == [1, 2, 3, 4] and rest == []


def test_over_cap_hits_are_deferred_and_fill_the_limit() -> None:
    hits = ranked([1, 1, 1, 1, 2])
    top, rest = diversify(hits, limit=4, max_per_doc=2)
    # Scan keeps 1, 2 (doc 1) and 5 (doc 2); the best deferred hit (3) fills the fourth slot.
    assert ids(top) == [1, 2, 3, 5]
    assert ids(rest) == [4]


def test_fill_uses_deferred_in_score_order() -> None:
    top, _ = diversify(ranked([7, 7, 7, 7, 7]), limit=4, max_per_doc=1)
    assert ids(top) == [1, 2, 3, 4]


def test_result_shorter_than_limit_only_when_not_enough_hits() -> None:
    top, rest = diversify(ranked([1, 1]), limit=5, max_per_doc=1)
    assert ids(top) == [1, 2] and rest == []


def test_scan_stops_at_limit() -> None:
    top, rest = diversify(ranked([1, 2, 3, 4]), limit=2, max_per_doc=3)
    assert ids(top) == [1, 2] and ids(rest) == [3, 4]


def test_limit_zero() -> None:
    top, rest = diversify(ranked([1, 2]), limit=0, max_per_doc=3)
    assert top == [] and ids(rest) == [1, 2]


def test_empty() -> None:
    assert diversify([], limit=5, max_per_doc=3) == ([], [])


def test_duplicate_uids_are_ignored() -> None:
    hit = make_hit(1, score=1.0)
    top, rest = diversify([hit, hit, make_hit(2, score=0.5)], limit=5, max_per_doc=3)
    assert ids(top) == [1, 2] and rest == []


def test_output_keeps_rank_order() -> None:
    hits = ranked([1, 1, 2, 1, 3])
    top, rest = diversify(hits, limit=4, max_per_doc=1)
    assert ids(top) == [1, 2, 3, 5]
    assert [h.score for h in top] == sorted((h.score for h in top), reverse=True)
    assert ids(rest) == [4]
