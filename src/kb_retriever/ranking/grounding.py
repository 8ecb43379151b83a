"""The deterministic refusal gate (reference §16), calibrated on raw evidence (fix of §24.5).

In the reference, min-max normalisation gives the top candidate a vector signal of 1.0, so its
score is >= 0.55 and the 0.25 score threshold always passes: the gate degenerated into "one
chunk above the 0.30 similarity floor". Here the score side of the OR gate uses the raw cosine
in place of the normalised vector signal, which is what the 0.25 threshold was calibrated for.
"""

from __future__ import annotations

from collections.abc import Iterable

from kb_retriever.models import Hit
from kb_retriever.settings import Settings

__all__ = ["evidence_score", "is_grounded", "should_refuse"]


def evidence_score(hit: Hit, settings: Settings) -> float:
    """The hit's score recomputed on raw evidence, without the @mention boost.

    ``Wv·raw_similarity + Wk·keyword + Wh·heading + (additive − mention_boost) + canonical``.
    For a reranked hit this is its total with the normalised vector term swapped for the raw
    one. For a pass-through hit (reranking off) the rank-based fused score is not evidence, so
    only the raw similarity and the canonical adjustment count.
    """
    s = hit.scores
    similarity = _similarity(hit) or 0.0
    lexical = settings.keyword_weight * s.keyword + settings.heading_weight * s.heading
    return (
        settings.vector_weight * similarity + lexical + (s.additive - s.mention_boost) + s.canonical
    )


def is_grounded(hit: Hit, settings: Settings) -> bool:
    """True when the hit is real evidence: raw cosine similarity >= ``refusal_min_similarity``
    or :func:`evidence_score` >= ``refusal_min_rerank_score``."""
    similarity = _similarity(hit)
    if similarity is not None and similarity >= settings.refusal_min_similarity:
        return True
    return evidence_score(hit, settings) >= settings.refusal_min_rerank_score


def should_refuse(hits: Iterable[Hit], settings: Settings) -> bool:
    """True when fewer than ``refusal_min_chunks`` hits are grounded; always true for no hits.

    Example: ``if should_refuse(result.primary, settings): return "__NO_GROUNDED_ANSWER__"``.
    """
    needed = settings.refusal_min_chunks
    grounded = 0
    seen_any = False
    for hit in hits:
        seen_any = True
        if grounded >= needed:
            break
        if is_grounded(hit, settings):
            grounded += 1
    return not seen_any or grounded < needed


def _similarity(hit: Hit) -> float | None:
    return hit.similarity if hit.similarity is not None else hit.scores.raw_similarity
