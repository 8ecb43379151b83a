"""Weighted Reciprocal Rank Fusion (reference §8).

The search fuses its two candidate legs with it (:func:`fuse_legs`), and the framework
adapters fuse lists coming from other retrievers.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from typing import TypeVar

from ..models import Candidate, construct
from ..models.legs import LegResult

__all__ = ["DEFAULT_RRF_K", "fuse_legs", "fuse_rrf"]

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
    scores = _rrf_scores([enumerate(keys, start=1) for keys in ranked_lists], weights, k)
    return sorted(scores.items(), key=lambda item: -item[1])


def _rrf_scores(ranked: Sequence[Iterable[tuple[int, K]]], weights: Sequence[float],
                k: int) -> dict[K, float]:
    """Each key's ``weight / (k + rank)`` summed over the lists of ``(rank, key)`` it is in,
    once per list (its first entry there); keys in first-seen order. ``fuse_rrf`` ranks by
    position, ``fuse_legs`` by the legs' own ranks (a pool has gaps)."""
    if len(weights) != len(ranked):
        raise ValueError(
            f"fuse_rrf needs one weight per list: got {len(weights)} weights "
            f"for {len(ranked)} lists"
        )
    if k < 0:
        raise ValueError(f"rrf k must be >= 0, got {k}")
    scores: dict[K, float] = {}  # dicts keep insertion order = first-seen order
    for pairs, weight in zip(ranked, weights, strict=True):
        seen: set[K] = set()
        for rank, key in pairs:
            if key in seen:
                continue
            seen.add(key)
            scores[key] = scores.get(key, 0.0) + weight / (k + rank)
    return scores


def fuse_legs(vector: LegResult, keyword: LegResult | None, *, weights: tuple[float, float],
              k: int = DEFAULT_RRF_K, pool: int = 0) -> tuple[list[Candidate], int]:
    """Weighted RRF of the search's two legs (``weights``: semantic, full-text): their
    candidates, best first, with the fusion's fields set; and how many matches both legs saw
    before their thresholds.

    A chunk found by both legs sums ``w / (k + rank)`` over them; an @mentioned chunk neither
    found joins with 0. Ties: lower chunk id first. Without ``keyword`` (semantic only) the
    vector rank alone scores. A chunk's candidate is the vector leg's when that leg found it.
    ``pool`` (0: all) keeps the best ``pool`` of the fused list and the @mentioned chunks
    neither leg found: the rerank pool, as ``store.sql.hybrid_sql`` cuts it (decision 0017).

    >>> from kb_retriever.models import Candidate, DocumentRef
    >>> from kb_retriever.models.legs import LegHit, LegResult
    >>> def hit(rank, chunk, score=None):
    ...     doc = DocumentRef(1, "t", "p", "d", "D", "d.md")
    ...     return LegHit(rank, score, False, Candidate(chunk, "", "", 0, doc))
    >>> vec = LegResult((hit(1, 5), hit(2, 7)), n_pre=2)
    >>> kw = LegResult((hit(1, 7, 0.5),), n_pre=9)
    >>> fused, n_pre = fuse_legs(vec, kw, weights=(0.7, 0.3))
    >>> [(c.chunk_id, c.vector_rank, c.fts_rank, round(c.fused_score, 5)) for c in fused], n_pre
    ([(7, 2, 1, 0.01621), (5, 1, None, 0.01148)], 11)
    >>> [c.chunk_id for c in fuse_legs(vec, kw, weights=(0.7, 0.3), pool=1)[0]]
    [7]
    """
    legs = [vector] if keyword is None else [vector, keyword]
    n_pre = sum(leg.n_pre for leg in legs)
    by_vec = {h.candidate.chunk_id: h for h in vector.hits if not h.mention}
    by_kw = {h.candidate.chunk_id: h for h in keyword.hits} if keyword is not None else {}
    # each leg's own ranks, not positions: a pool the store cut (hybrid_sql) has gaps
    scores = _rrf_scores([[(h.rank or 0, chunk_id) for chunk_id, h in leg.items()]
                          for leg in (by_vec, by_kw)], weights, k)
    # @mentioned chunks neither leg found join with 0
    mentioned = {h.candidate.chunk_id: h for h in vector.hits
                 if h.mention and h.candidate.chunk_id not in scores}
    order = sorted(scores, key=lambda c: (-scores[c], c))
    if pool:
        order = order[:pool]
    out = []
    for chunk_id in [*order, *sorted(mentioned)]:
        v, f = by_vec.get(chunk_id), by_kw.get(chunk_id)
        found = (v or f or mentioned[chunk_id]).candidate
        out.append(construct(Candidate, {
            **found.__dict__, "vector_rank": None if v is None else v.rank,
            "fts_rank": None if f is None else f.rank,
            "fts_score": None if f is None or f.score is None else float(f.score),
            "fused_score": float(scores.get(chunk_id, 0.0))}))
    return out, n_pre
