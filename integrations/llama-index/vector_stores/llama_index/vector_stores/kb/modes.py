"""``VectorStoreQueryMode`` resolved once into how the pipeline searches (:class:`Mode`).

DEFAULT is the pipeline as configured: the vector leg and, with query text, the full-text
leg, fused by weighted RRF. HYBRID sets the fusion weights from ``alpha`` (vector ``alpha``,
full text ``1 - alpha``; without ``alpha`` the settings' weights), TEXT_SEARCH keeps the
full-text leg's matches only, MMR reorders the pipeline's best ``fetch_k`` by maximal marginal
relevance (``mmr_threshold`` is lambda, as in LlamaIndex's stores). Every other mode (SVM, the
regressions, SPARSE, SEMANTIC_HYBRID) raises :class:`kb_retriever.InputError`: the pipeline has
no such ranking, and ignoring the mode would hide it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from llama_index.core.vector_stores.types import VectorStoreQuery, VectorStoreQueryMode

from kb_retriever import ConfigError, InputError, Settings
from kb_retriever.search.modes import Legs

__all__ = ["SUPPORTED_MODES", "Mode", "resolve_mode"]

SUPPORTED_MODES = (VectorStoreQueryMode.DEFAULT, VectorStoreQueryMode.HYBRID,
                   VectorStoreQueryMode.TEXT_SEARCH, VectorStoreQueryMode.MMR)
# MMR picks among this many times top_k of the pipeline's best (LlamaIndex's PGVectorStore
# prefetches by a factor as well; ``mmr_prefetch_factor`` / ``mmr_prefetch_k`` override it).
_MMR_PREFETCH_FACTOR = 4
_MMR_LAMBDA = 0.5


@dataclass(frozen=True)
class Mode:
    """How one query runs: its text (None: by embedding alone), the legs, and for MMR how
    many to fetch and lambda."""

    text: str | None
    legs: Legs
    fetch_k: int
    mmr_lambda: float | None = None  # None: no MMR


def _positive(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{name} must be a positive integer, got {value!r}")
    return value


def _top_k(query: VectorStoreQuery, settings: Settings) -> int:
    """``similarity_top_k``, which a query returns whenever that many nodes exist: one search
    returns at most ``max_limit`` hits, so more than that is an error, not fewer nodes."""
    top = _positive("similarity_top_k", query.similarity_top_k)
    if top > settings.max_limit:
        raise InputError(f"similarity_top_k is {top}, above the {settings.max_limit} hits one "
                         "search returns at most (KB_MAX_LIMIT, Settings.max_limit, up to "
                         "10000): ask for fewer, or raise KB_MAX_LIMIT")
    return top


def _mmr(query: VectorStoreQuery, kwargs: Mapping[str, Any]) -> tuple[int, float]:
    lam = _MMR_LAMBDA if query.mmr_threshold is None else query.mmr_threshold
    if isinstance(lam, bool) or not isinstance(lam, int | float) or not 0.0 <= lam <= 1.0:
        raise ConfigError(f"mmr_threshold (MMR's lambda) must be between 0 and 1, got {lam!r}")
    top = query.similarity_top_k
    if kwargs.get("mmr_prefetch_k") is not None:
        return max(top, _positive("mmr_prefetch_k", kwargs["mmr_prefetch_k"])), float(lam)
    factor = kwargs.get("mmr_prefetch_factor", _MMR_PREFETCH_FACTOR)
    if (isinstance(factor, bool) or not isinstance(factor, int | float)
            or not math.isfinite(factor) or factor < 1):  # inf, nan: a raw error from int()
        raise ConfigError(f"mmr_prefetch_factor must be a finite number >= 1, got {factor!r}")
    return max(top, int(top * factor)), float(lam)


def resolve_mode(query: VectorStoreQuery, settings: Settings, *, floor: float,
                 kwargs: Mapping[str, Any]) -> Mode:
    """The :class:`Mode` of ``query`` (``floor``: the vector leg's similarity floor).

    >>> from llama_index.core.vector_stores.types import VectorStoreQuery
    >>> m = resolve_mode(VectorStoreQuery(query_str="cache", mode="hybrid", alpha=0.25),
    ...                  Settings(), floor=-1.0, kwargs={})
    >>> m.legs.vector_weight, m.legs.text_weight
    (0.25, 0.75)
    """
    mode = VectorStoreQueryMode(query.mode)
    if mode not in SUPPORTED_MODES:
        raise InputError(f"query mode {mode.value!r} is not supported by KBVectorStore; "
                         f"supported: {', '.join(m.value for m in SUPPORTED_MODES)}")
    text = query.query_str if query.query_str and query.query_str.strip() else None
    if text is None and query.query_embedding is None:
        raise InputError("KBVectorStore.query needs query_str or query_embedding")
    top = _top_k(query, settings)
    if mode == VectorStoreQueryMode.TEXT_SEARCH:
        if text is None:
            raise InputError("text_search mode needs query_str")
        return Mode(text, Legs(vector_weight=0.0, text_weight=1.0, min_similarity=floor,
                                context_cutoff=0.0), top)
    if mode == VectorStoreQueryMode.HYBRID:
        alpha = query.alpha
        if alpha is None:
            weights = (settings.hybrid_semantic_weight, settings.hybrid_fts_weight)
        elif isinstance(alpha, bool) or not isinstance(alpha, int | float) \
                or not 0.0 <= alpha <= 1.0:
            raise ConfigError(f"alpha must be between 0 (full text) and 1 (vector), got {alpha!r}")
        else:
            weights = (float(alpha), 1.0 - float(alpha))
        if text is None and weights[0] == 0:
            raise InputError("hybrid mode with alpha=0 (full text only) needs query_str")
        return Mode(text, Legs(vector_weight=weights[0], text_weight=weights[1],
                               min_similarity=floor, context_cutoff=0.0), top)
    # similarity_top_k when they exist: no adaptive cutoff (decision 0014)
    legs = Legs(min_similarity=floor, context_cutoff=0.0)
    if mode == VectorStoreQueryMode.MMR:
        fetch_k, lam = _mmr(query, kwargs)
        return Mode(text, legs, fetch_k, lam)
    return Mode(text, legs, top)
