"""Weighted Reciprocal Rank Fusion (reference §8).

The search fuses its two candidate legs with it (:func:`fuse_legs`), and the framework
adapters fuse lists coming from other retrievers.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import Any, NamedTuple, TypeVar

__all__ = ["DEFAULT_RRF_K", "Fused", "fuse_legs", "fuse_rrf"]

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


class Fused(NamedTuple):
    """One candidate of the fused legs: its row (the vector leg's when that leg found the
    chunk, else the full-text leg's) and what fusion gave it."""

    row: Mapping[str, Any]
    vector_rank: int | None
    fts_rank: int | None
    fts_score: float | None
    score: float


def fuse_legs(vector_rows: Sequence[Mapping[str, Any]],
              keyword_rows: Sequence[Mapping[str, Any]] | None, *,
              weights: tuple[float, float], k: int = DEFAULT_RRF_K) -> tuple[list[Fused], int]:
    """Weighted RRF of the search's two legs (``weights``: semantic, full-text), best first.

    Returns the candidates and how many matches both legs saw before the threshold (each
    leg's ``n_pre``, on every one of its rows). A chunk found by both legs sums
    ``w / (k + rank)`` over them; an @mentioned chunk neither found (``mention``) joins with 0.
    Ties: lower chunk id first. Without ``keyword_rows`` (semantic only) the vector rank alone
    scores. The rows are not changed.

    >>> vec = [{"n_pre": 2, "chunk_id": 5, "vector_rank": 1}, {"n_pre": 2, "chunk_id": 7,
    ...        "vector_rank": 2}]
    >>> kw = [{"n_pre": 9, "chunk_id": 7, "fts_rank": 1, "fts_score": 0.5}]
    >>> fused, n_pre = fuse_legs(vec, kw, weights=(0.7, 0.3))
    >>> [(f.row["chunk_id"], f.vector_rank, f.fts_rank, round(f.score, 5)) for f in fused], n_pre
    ([(7, 2, 1, 0.01621), (5, 1, None, 0.01148)], 11)
    """
    legs = [vector_rows] if keyword_rows is None else [vector_rows, keyword_rows]
    n_pre = sum(int(rows[0]["n_pre"]) for rows in legs if rows)
    # The legs' ranks are 1..n (row_number over what the leg returns), so rank order is list
    # order for fuse_rrf; an empty leg's one row carries only its count (chunk_id NULL).
    vec = sorted((r for r in vector_rows if r["chunk_id"] is not None and not r.get("mention")),
                 key=lambda r: r["vector_rank"])
    kw = sorted((r for r in keyword_rows or () if r["chunk_id"] is not None),
                key=lambda r: r["fts_rank"])
    by_vec = {r["chunk_id"]: r for r in vec}
    by_kw = {r["chunk_id"]: r for r in kw}
    lists = [list(by_vec)] if keyword_rows is None else [list(by_vec), list(by_kw)]
    scores = dict(fuse_rrf(lists, list(weights[: len(lists)]), k=k))
    # @mentioned chunks neither leg found join with 0
    mentioned = {r["chunk_id"]: r for r in vector_rows
                 if r.get("mention") and r["chunk_id"] not in scores}
    scores.update(dict.fromkeys(mentioned, 0.0))
    out = []
    for chunk_id in sorted(scores, key=lambda c: (-scores[c], c)):
        v, f = by_vec.get(chunk_id), by_kw.get(chunk_id)
        row = v or f or mentioned[chunk_id]
        out.append(Fused(row, None if v is None else v["vector_rank"],
                         None if f is None else f["fts_rank"],
                         None if f is None else f["fts_score"], scores[chunk_id]))
    return out, n_pre
