"""Weighted Reciprocal Rank Fusion (reference §8).

The search fuses its two candidate legs with it (``pipeline.fuse_legs``), and the framework
adapters fuse lists coming from other retrievers.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import TypeVar

__all__ = ["DEFAULT_RRF_K", "fuse_rrf"]

K = TypeVar("K", bound=Hashable)

#: k=60: Cormack, Clarke & Büttcher (SIGIR 2009), the value the reference ships (KB_RRF_K).
DEFAULT_RRF_K = 60


def fuse_rrf(
    ranked_lists: Sequence[Sequence[K]],
    weights: Sequence[float],
    k: int = DEFAULT_RRF_K,
) -> list[tuple[K, float]]:
    """Fuse ranked lists of keys into one list of ``(key, score)``, best first.

    Each list contributes ``weight / (k + rank)`` with 1-based ranks; a key found in several
    lists sums its contributions. A key repeated inside one list counts once, at its best rank.
    The sort is stable: equal scores keep first-seen order (earlier lists first).

    >>> [(key, round(s, 4)) for key, s in fuse_rrf([["a", "b"], ["b", "c"]], [0.7, 0.3])]
    [('b', 0.0162), ('a', 0.0115), ('c', 0.0048)]

    Raises ``ValueError`` when the number of weights differs from the number of lists or
    ``k`` is negative.
    """
    if len(weights) != len(ranked_lists):
        raise ValueError(
            f"fuse_rrf needs one weight per list: got {len(weights)} weights "
            f"for {len(ranked_lists)} lists"
        )
    if k < 0:
        raise ValueError(f"rrf k must be >= 0, got {k}")
    scores: dict[K, float] = {}  # dicts keep insertion order = first-seen order
    for keys, weight in zip(ranked_lists, weights, strict=True):
        seen: set[K] = set()
        for rank, key in enumerate(keys, start=1):
            if key in seen:
                continue
            seen.add(key)
            scores[key] = scores.get(key, 0.0) + weight / (k + rank)
    return sorted(scores.items(), key=lambda item: -item[1])
