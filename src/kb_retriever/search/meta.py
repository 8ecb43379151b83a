"""What a search reports about itself: :class:`SearchMeta` (``SearchResult.meta``).

A typed record, and a read-only mapping of its JSON form, so ``result.meta.should_refuse`` and
``result.meta["should_refuse"]`` both work, and ``--json`` prints the shape DESIGN.md fixes.
:class:`Stopwatch` takes the stage timings the record carries.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from ..ranking.rejected_evidence import RejectedEvidence

__all__ = ["RetrievalStats", "SearchMeta", "SearchStrategy", "Stopwatch"]


@dataclass(frozen=True)
class SearchStrategy:
    """How the search ran: which legs, which fusion, which channels."""

    fts_enabled: bool
    fusion_method: str  # "rerank_weighted_sum", "rrf" or "semantic_only"
    fts_query_mode: str | None  # the full-text mode when the full-text leg ran
    graph_expansion_enabled: bool
    rejected_injection_enabled: bool
    filters_applied: int
    synonym_phrases: tuple[str, ...] = ()
    semantic_enabled: bool = True

    def to_dict(self) -> dict[str, Any]:
        return {
            "semantic_enabled": self.semantic_enabled,
            "fts_enabled": self.fts_enabled,
            "fusion_method": self.fusion_method,
            "candidate_fusion": "rrf" if self.fts_enabled else "semantic_only",
            "fts_query_mode": self.fts_query_mode,
            "graph_expansion_enabled": self.graph_expansion_enabled,
            "rejected_injection_enabled": self.rejected_injection_enabled,
            "filters_applied": self.filters_applied,
            "synonym_phrases": list(self.synonym_phrases),
        }


@dataclass(frozen=True)
class RetrievalStats:
    """How many candidates the legs matched, and the similarity range of the hits kept."""

    candidates_pre_threshold: int
    candidates_post_threshold: int
    min_score_used: float | None
    max_score_used: float | None
    primary_count: int = 0
    expanded_count: int = 0
    rejected_count: int = 0
    cut_to_runner_up: int = 0  # primary hits the adaptive cutoff moved to the runner-ups

    def to_dict(self) -> dict[str, Any]:
        return {
            "candidates_pre_threshold": self.candidates_pre_threshold,
            "candidates_post_threshold": self.candidates_post_threshold,
            "min_score_used": self.min_score_used,
            "max_score_used": self.max_score_used,
            "primary_count": self.primary_count,
            "expanded_count": self.expanded_count,
            "rejected_count": self.rejected_count,
            "cut_to_runner_up": self.cut_to_runner_up,
        }


@dataclass(frozen=True, eq=False)
class SearchMeta(Mapping[str, Any]):
    """The report of one search. As a mapping it is :meth:`to_dict`'s JSON form."""

    primary_count: int
    expanded_count: int
    rejected_count: int
    runner_up_count: int
    projects: tuple[str, ...]
    tenant: str
    retrieval_ms: float
    timings_ms: Mapping[str, float]
    search_strategy: SearchStrategy
    retrieval_stats: RetrievalStats
    should_refuse: bool
    calibrated: bool  # the scope's null similarity was measured (decision 0009)
    null_ceiling: float
    history_promoted: tuple[str, ...] = ()  # slugs of superseded decisions moved up
    rejected_evidence: tuple[RejectedEvidence, ...] = ()
    # the scope's frequencies of the query's lexemes (the BM25 idf inputs), for --explain
    lexeme_stats: Mapping[str, Any] | None = None
    # the rejected channel's null: null_ceiling, or higher with another script's probes
    warning_ceiling: float | None = None
    # with read replicas: which server answered ("primary", "replica 2") and, for a replica,
    # how far behind the primary it was when last measured (seconds); None without replicas
    server: str | None = None
    replica_lag_s: float | None = None

    @property
    def project_key(self) -> str | None:
        """The project searched, when it was one."""
        return self.projects[0] if len(self.projects) == 1 else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "primary_count": self.primary_count,
            "expanded_count": self.expanded_count,
            "rejected_count": self.rejected_count,
            "runner_up_count": self.runner_up_count,
            "project_key": self.project_key,
            "filters_selected": self.search_strategy.filters_applied,
            "projects": list(self.projects),
            "tenant": self.tenant,
            "retrieval_ms": self.retrieval_ms,
            "timings_ms": dict(self.timings_ms),
            "search_strategy": self.search_strategy.to_dict(),
            "retrieval_stats": self.retrieval_stats.to_dict(),
            "should_refuse": self.should_refuse,
            "calibration": {"calibrated": self.calibrated,
                            "null_ceiling": round(self.null_ceiling, 4),
                            "warning_ceiling": round(self.null_ceiling
                                                     if self.warning_ceiling is None
                                                     else self.warning_ceiling, 4)},
            "history_promoted": list(self.history_promoted),
            "rejected_evidence": [e.to_dict() for e in self.rejected_evidence],
            "lexeme_stats": self.lexeme_stats,
            **({"server": self.server, "replica_lag_s": self.replica_lag_s}
               if self.server is not None else {}),
        }

    @cached_property
    def _view(self) -> dict[str, Any]:
        return self.to_dict()

    def __getitem__(self, key: str) -> Any:
        return self._view[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._view)

    def __len__(self) -> int:
        return len(self._view)


class Stopwatch:
    """A search's stage timings: ``with watch.lap("rerank"): ...``, in milliseconds."""

    def __init__(self) -> None:
        self._start = time.perf_counter()
        self.laps: dict[str, float] = {}

    @contextmanager
    def lap(self, name: str) -> Iterator[None]:
        t = time.perf_counter()
        try:
            yield
        finally:
            self.laps[name] = (time.perf_counter() - t) * 1000.0

    def total_ms(self) -> float:
        return (time.perf_counter() - self._start) * 1000.0

    def rounded(self) -> dict[str, float]:
        return {k: round(v, 3) for k, v in self.laps.items()}
