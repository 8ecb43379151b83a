"""Benchmark metrics, reference §20 semantics with the §24.18 fix (precision@k divides by k).

Ranking metrics (nDCG@k with gain ``2^g − 1``, MRR, precision@k, recall@k) are computed by
``ranx`` (``ndcg_burges@k`` is the ``2^rel − 1`` variant) in :func:`ranking_metrics`, so the
reported numbers come from a library others can check. :func:`ndcg_at_k` is the same nDCG in
plain Python: the tuner evaluates it thousands of times, where ranx's per-call set-up would
dominate; a test pins the two to each other.
"""

from __future__ import annotations

import importlib.util
import math
import re
import warnings
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from ..errors import ConfigError

__all__ = [
    "answer_contained",
    "mean_or_one",
    "ndcg_at_k",
    "percentile",
    "ranking_metrics",
    "require_ranx",
    "unique_keys",
]

_WS = re.compile(r"\s+")
RANKING_METRICS = ("ndcg", "rr", "precision", "recall")


def unique_keys(keys: Iterable[str]) -> list[str]:
    """Doc keys de-duplicated keeping the first rank (the reference ranks documents, §24.18)."""
    return list(dict.fromkeys(keys))


def ndcg_at_k(ranked: Sequence[str], grades: Mapping[str, int], k: int) -> float:
    """nDCG@k, gain ``2^g − 1``; IDCG over all labelled grades; 0 when nothing is relevant."""
    if k <= 0:
        return 0.0
    ideal = sorted((g for g in grades.values() if g > 0), reverse=True)[:k]
    idcg = sum((2**g - 1) / math.log2(i + 2) for i, g in enumerate(ideal))
    if idcg == 0:
        return 0.0
    top = unique_keys(ranked)[:k]
    dcg = sum((2 ** grades.get(d, 0) - 1) / math.log2(i + 2) for i, d in enumerate(top))
    return min(1.0, max(0.0, dcg / idcg))


_NO_RANX = ("the benchmark needs ranx, which the core install leaves out: "
            "pip install 'kb-retriever[bench]'")


def require_ranx() -> None:
    """Fail at once, before a long benchmark run, when ranx (the ``bench`` extra) is missing;
    looks the package up without importing it (the import takes ~5 s: numba)."""
    if importlib.util.find_spec("ranx") is None:
        raise ConfigError(_NO_RANX)


def _ranx() -> tuple[Any, Any, Any]:
    """ranx's Qrels, Run and evaluate, imported only when there is work. ranx is the ``bench``
    extra: the core install leaves its stack (numba, scipy, pandas) out."""
    try:
        from ranx import Qrels, Run, evaluate
    except ImportError:
        raise ConfigError(_NO_RANX) from None
    return Qrels, Run, evaluate


def ranking_metrics(
    runs: Mapping[str, Sequence[str]], grades: Mapping[str, Mapping[str, int]], k: int
) -> dict[str, dict[str, float]]:
    """Per-query ``{"ndcg", "rr", "precision", "recall"}`` via ranx, for the ids in ``grades``.

    A query with no relevant document, or with nothing retrieved, scores 0 on all four
    (reference: empty relevant set ⇒ 0) without asking ranx, which cannot represent either.
    """
    zero = dict.fromkeys(RANKING_METRICS, 0.0)
    out = {qid: dict(zero) for qid in grades}
    scored = [
        qid for qid, g in grades.items()
        if any(v > 0 for v in g.values()) and unique_keys(runs.get(qid, ()))
    ]
    if not scored:
        return out
    Qrels, Run, evaluate = _ranx()

    qrels = Qrels({qid: {d: int(v) for d, v in grades[qid].items() if v > 0} for qid in scored})
    run = Run({
        # ranx ranks by score: give rank i the score n − i so the order is kept exactly.
        qid: {d: float(len(keys) - i) for i, d in enumerate(keys)}
        for qid in scored
        for keys in [unique_keys(runs[qid])]
    })
    names = [f"ndcg_burges@{k}", "mrr", f"precision@{k}", f"recall@{k}"]
    with warnings.catch_warnings():  # numba's type-safety notes (with raw ANSI codes) are
        warnings.simplefilter("ignore")  # ranx's business, not the user's
        values = evaluate(qrels, run, names, return_mean=False, make_comparable=True)
    # ranx reports queries sorted by id; map the arrays back through that order.
    order = list(qrels.keys())
    for name, metric in zip(names, RANKING_METRICS, strict=True):
        for qid, v in zip(order, np.asarray(values[name]).tolist(), strict=True):
            out[qid][metric] = float(v)
    return out


def answer_contained(expected: str, texts: Iterable[str], k: int) -> bool:
    """True when ``expected`` is a substring of one of the first ``k`` texts, comparing after
    collapsing whitespace and lower-casing both sides (reference answer-containment@k)."""
    needle = _norm(expected)
    if not needle or k <= 0:
        return False
    return any(needle in _norm(t) for t in list(texts)[:k])


def _norm(text: str) -> str:
    return _WS.sub(" ", text).strip().lower()


def mean_or_one(values: Iterable[float]) -> float:
    """Mean rounded to 4 dp; 1.0 for an empty subset (reference: nothing to miss)."""
    vals = list(values)
    return round(sum(vals) / len(vals), 4) if vals else 1.0


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (linear interpolation), rounded to 0.1 ms; 0 for no values."""
    if not values:
        return 0.0
    return round(float(np.percentile(np.asarray(values, dtype=float), q)), 1)
