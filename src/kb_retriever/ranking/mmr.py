"""Maximal marginal relevance over ranked hits (Carbonell & Goldstein 1998).

Relevance is the pipeline's own final score (min-max scaled over the candidates), not a raw
cosine to the query, so the trust gradient still decides which hit comes first; redundancy is
the cosine between the candidates' vectors.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["mmr_order"]


def mmr_order(scores: Sequence[float], vectors: np.ndarray, k: int, lambda_mult: float) -> list[int]:
    """Indices of ``k`` candidates in MMR order: each next one maximises
    ``lambda_mult * relevance - (1 - lambda_mult) * max cosine to those already chosen``.

    >>> v = np.array([[1.0, 0.0], [1.0, 0.01], [0.0, 1.0]])
    >>> mmr_order([0.9, 0.8, 0.5], v, k=2, lambda_mult=0.5)
    [0, 2]
    >>> mmr_order([0.9, 0.8, 0.5], v, k=2, lambda_mult=1.0)
    [0, 1]
    """
    n = len(scores)
    if n == 0 or k <= 0:
        return []
    rel = np.asarray(scores, dtype=np.float64)
    span = rel.max() - rel.min()
    rel = (rel - rel.min()) / span if span > 0 else np.ones(n)
    unit = vectors / np.clip(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12, None)
    sims = unit @ unit.T
    chosen = [int(np.argmax(rel))]
    while len(chosen) < min(k, n):
        redundancy = sims[:, chosen].max(axis=1)
        value = lambda_mult * rel - (1 - lambda_mult) * redundancy
        value[chosen] = -np.inf
        chosen.append(int(np.argmax(value)))
    return chosen
