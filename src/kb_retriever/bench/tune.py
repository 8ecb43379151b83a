"""Tune the reranker weights on a benchmark: coordinate ascent on cached candidate pools.

The candidate SQL does not depend on the rerank weights, so each query's pool is fetched once
(primary + runner-up of one search, with the runner-up limit raised to the whole pool) and every
step re-runs only the pure ``rerank`` → ``diversify``: no database round trip per step.
Queries are split deterministically into train / held-out; only train guides the search, and
held-out nDCG is reported as it is, gain or loss.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from kb_retriever.models import Candidate, Hit, Origin
from kb_retriever.ranking import diversify, rerank, should_refuse
from kb_retriever.ranking.calibration import PROBES, Calibration
from kb_retriever.ranking.signals import GRIDS
from kb_retriever.settings import Settings

from .dataset import BenchQuery
from .metrics import ndcg_at_k, unique_keys
from .runner import QueryRun

__all__ = ["GRIDS", "Pool", "pools_from_runs", "split", "tune"]

MAX_ROUNDS = 5
MIN_GAIN = 1e-6  # a step must beat the current train nDCG by more than float noise


@dataclass(frozen=True)
class Pool:
    """A query and the candidate pool its search saw."""

    query: BenchQuery
    candidates: tuple[Candidate, ...]
    lexeme_stats: Any = None  # the query's lexeme frequencies (BM25 idf), from the search meta
    calibration: Calibration | None = None  # the scope's null, from the search meta


def _candidate(h: Hit) -> Candidate:
    s = h.scores
    return Candidate(
        chunk_id=h.chunk_id, text=h.text, heading_path=h.heading_path, chunk_order=h.chunk_order,
        document=h.document, vector_similarity=h.similarity, vector_rank=s.vector_rank,
        fts_rank=s.fts_rank, fused_score=s.fused_score, metadata=h.metadata,
        lexeme_tf=s.lexeme_tf, lexeme_count=s.lexeme_count,
    )


def pools_from_runs(runs: Sequence[QueryRun]) -> list[Pool]:
    """Candidate pools rebuilt from primary + runner-up hits, in the store's fused order (not
    the rejected records the channel took out of the ranking: the ranking never holds them)."""
    pools = []
    for r in runs:
        hits = [*r.result.primary,
                *(h for h in r.result.runner_up if h.origin is not Origin.REJECTED)]
        cands = sorted((_candidate(h) for h in hits), key=lambda c: -c.fused_score)
        pools.append(Pool(r.query, tuple(cands), r.result.meta.get("lexeme_stats"),
                          _calibration(r.result.meta.get("calibration"))))
    return pools


def _calibration(meta: Any) -> Calibration | None:
    """The gate's calibration as the search used it (its ceiling is all the gate reads)."""
    if not meta or not meta.get("calibrated"):
        return None
    return Calibration((float(meta["null_ceiling"]),) * len(PROBES))


def split(queries: Sequence[BenchQuery], train_fraction: float = 0.7,
          seed: int = 0) -> tuple[list[BenchQuery], list[BenchQuery]]:
    """Deterministic split: order by a seeded hash of the id (independent of file order)."""
    def key(q: BenchQuery) -> str:
        return hashlib.sha256(f"{seed}:{q.id}".encode()).hexdigest()

    ordered = sorted(queries, key=key)
    n_train = round(len(ordered) * train_fraction)
    train_ids = {q.id for q in ordered[:n_train]}
    train = [q for q in queries if q.id in train_ids]
    return train, [q for q in queries if q.id not in train_ids]


def _top(pool: Pool, settings: Settings, k: int, now: datetime) -> list[Hit]:
    ranked = rerank(pool.query.query, pool.candidates, settings, now=now,
                    lexeme_stats=pool.lexeme_stats)
    return diversify(ranked, k, settings.max_chunks_per_doc)[0]


def _mean_ndcg(pools: Sequence[Pool], settings: Settings, k: int, now: datetime
               ) -> float | None:
    """The mean nDCG@k over the queries that grade a document relevant (as the benchmark's
    own nDCG); None when none does (n/a, not 0: a query with only warnings or related
    documents to expect has no ranking to score)."""
    graded = [p for p in pools if p.query.relevant and not p.query.expect_refusal]
    if not graded:
        return None
    return sum(
        ndcg_at_k(unique_keys(h.document.doc_key for h in _top(p, settings, k, now)),
                  p.query.relevance, k)
        for p in graded
    ) / len(graded)


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def _refusal_accuracy(pools: Sequence[Pool], settings: Settings, k: int, now: datetime) -> float:
    ok = [should_refuse(_top(p, settings, k, now), settings, p.calibration)
          == p.query.expect_refusal
          for p in pools]
    return sum(ok) / len(ok) if ok else 1.0


def env_name(field_name: str) -> str:
    alias: Any = Settings.model_fields[field_name].validation_alias
    return str(alias.choices[0])


def tune(pools: Sequence[Pool], settings: Settings, *, k: int = 5, train_fraction: float = 0.7,
         seed: int = 0, now: datetime | None = None) -> dict[str, Any]:
    """Coordinate ascent over :data:`GRIDS` (the signal table's grids, ``ranking.signals``)
    maximising mean train nDCG@k; returns a report."""
    at = now or datetime.now(UTC)
    train_q, held_q = split([p.query for p in pools], train_fraction, seed)
    by_id = {p.query.id: p for p in pools}
    train = [by_id[q.id] for q in train_q]
    held = [by_id[q.id] for q in held_q]

    best = settings
    best_score = _mean_ndcg(train, best, k, at)
    history = []
    for round_no in range(1, MAX_ROUNDS + 1 if best_score is not None else 1):
        improved = False
        for name, grid in GRIDS.items():
            for value in grid:
                trial = best.model_copy(update={name: value})
                s = _mean_ndcg(train, trial, k, at)
                if s is not None and best_score is not None and s > best_score + MIN_GAIN:
                    best, best_score, improved = trial, s, True
                    history.append({"round": round_no, "weight": name, "value": value,
                                    "train_ndcg": round(s, 4)})
        if not improved:
            break

    before = {n: getattr(settings, n) for n in GRIDS}
    after = {n: getattr(best, n) for n in GRIDS}
    return {
        "k": k,
        "seed": seed,
        "train_queries": len(train),
        "heldout_queries": len(held),
        "train_ndcg_before": _rounded(_mean_ndcg(train, settings, k, at)),
        "train_ndcg_after": _rounded(best_score),
        "heldout_ndcg_before": _rounded(_mean_ndcg(held, settings, k, at)),
        "heldout_ndcg_after": _rounded(_mean_ndcg(held, best, k, at)),
        # The weights also feed the grounding gate, so show its accuracy on all queries too.
        "refusal_accuracy_before": round(_refusal_accuracy(pools, settings, k, at), 4),
        "refusal_accuracy_after": round(_refusal_accuracy(pools, best, k, at), 4),
        "weights_before": before,
        "weights_after": after,
        "steps": history,
        "env": [f"{env_name(n)}={v}" for n, v in after.items() if v != before[n]],
    }


def pool_check(runs: Sequence[QueryRun], pools: Sequence[Pool], settings: Settings,
               k: int) -> int:
    """How many queries' live rankings the cached pools reproduce with the live settings.

    Anything below ``len(runs)`` means the pools miss candidates (e.g. a too small runner-up
    limit) and the tuning numbers would not transfer to live search.
    """
    at = datetime.now(UTC)
    return sum(
        r.ranked == unique_keys(h.document.doc_key for h in _top(p, settings, k, at))
        for r, p in zip(runs, pools, strict=True)
    )
