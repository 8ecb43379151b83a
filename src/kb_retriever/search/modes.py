"""Per-search choices of the candidate legs: :class:`Legs`.

The framework adapters map their stores' query modes onto it (LlamaIndex's ``HYBRID`` with
``alpha``, ``TEXT_SEARCH``; a vector store's "k results, however dissimilar"), so a mode is a
value on the request, never a change to the knowledge base's settings.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError

__all__ = ["Legs"]


def _weight(name: str, value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) \
            or value < 0:
        raise ConfigError(f"{name} must be a finite number >= 0, got {value!r}")
    return float(value)


@dataclass(frozen=True)
class Legs:
    """How one search gathers its candidates; None keeps the settings' value.

    ``vector_weight`` / ``text_weight``: the weighted RRF's weights of the vector and full-text
    legs (``KB_HYBRID_SEMANTIC_WEIGHT`` / ``KB_HYBRID_FTS_WEIGHT``). A leg weighted 0 adds no
    candidates: ``text_weight=0`` runs the vector leg alone, ``vector_weight=0`` keeps only what
    the full-text leg matched (the rerank still reads every signal). ``min_similarity``: the
    vector leg's cosine floor (``KB_MIN_SIMILARITY``); -1 keeps every neighbour, as a vector
    store returns its k nearest however far. ``context_cutoff``: the adaptive cutoff's share of
    the best evidence (``KB_CONTEXT_CUTOFF``); 0 returns ``limit`` hits when that many exist,
    as a vector store promises.

    >>> Legs(vector_weight=0.25, text_weight=0.75).weights((0.7, 0.3))
    (0.25, 0.75)
    >>> Legs(text_weight=-1)
    Traceback (most recent call last):
    ...
    kb_retriever.errors.ConfigError: text_weight must be a finite number >= 0, got -1
    """

    vector_weight: float | None = None
    text_weight: float | None = None
    min_similarity: float | None = None
    context_cutoff: float | None = None

    def __post_init__(self) -> None:
        vector = _weight("vector_weight", self.vector_weight)
        text = _weight("text_weight", self.text_weight)
        if vector == 0 and text == 0:
            raise ConfigError("vector_weight and text_weight cannot both be 0")
        floor = self.min_similarity
        if floor is not None and (isinstance(floor, bool) or not isinstance(floor, int | float)
                                  or not -1.0 <= floor <= 1.0):
            raise ConfigError(f"min_similarity must be between -1 and 1, got {floor!r}")
        cut = self.context_cutoff
        if cut is not None and (isinstance(cut, bool) or not isinstance(cut, int | float)
                                or not 0.0 <= cut <= 1.0):
            raise ConfigError(f"context_cutoff must be between 0 and 1, got {cut!r}")
        object.__setattr__(self, "vector_weight", vector)
        object.__setattr__(self, "text_weight", text)

    def weights(self, default: tuple[float, float]) -> tuple[float, float]:
        """(vector, full-text) RRF weights: these, else ``default`` (the settings')."""
        return (default[0] if self.vector_weight is None else self.vector_weight,
                default[1] if self.text_weight is None else self.text_weight)

    def floor(self, default: float) -> float:
        return default if self.min_similarity is None else float(self.min_similarity)

    def cutoff(self, default: float) -> float:
        return default if self.context_cutoff is None else float(self.context_cutoff)
