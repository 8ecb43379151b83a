"""The deterministic refusal gate (reference §16), calibrated on raw evidence (fix of §24.5)
and, on a calibrated scope, on the scope's own null (issue 16, decision 0009).

Calibrated: a query is grounded when ``margin(best cosine) + Wl·best keyword >=
refusal_min_evidence`` (:func:`refuse_calibrated`), where the margin measures the cosine
against what unrelated text scores in the same scope
(:class:`~kb_retriever.ranking.calibration.Calibration`). So an embedder that gives every
Italian text 0.45, or E5 that gives everything 0.8, does not defeat the gate, and a query
whose words the scope holds (an error code) is grounded by its keyword signal.
``KB_REFUSAL_RULE=absolute``, or a scope never calibrated, uses the absolute rule below.

In the reference, min-max normalisation gives the top candidate a vector signal of 1.0, so its
score is >= 0.55 and the 0.25 score threshold always passes: the gate degenerated into "one
chunk above the 0.30 similarity floor". Here the score side of the OR gate uses the raw cosine
in place of the normalised vector signal, which is what the 0.25 threshold was calibrated for.
"""

from __future__ import annotations

from collections.abc import Iterable

from kb_retriever.models import Hit
from kb_retriever.settings import Settings

from .calibration import Calibration
from .signals import SIGNALS

__all__ = ["calibrated_evidence", "evidence_score", "is_grounded", "refuse_calibrated",
           "should_refuse", "uses_calibration"]


def calibrated_evidence(hit: Hit, settings: Settings, calibration: Calibration) -> float:
    """``margin(cosine) + evidence_lexical_weight · keyword`` of ``hit`` on a calibrated scope."""
    return (calibration.margin(_similarity(hit) or 0.0)
            + settings.evidence_lexical_weight * hit.scores.keyword)


def refuse_calibrated(hits: list[Hit], settings: Settings, calibration: Calibration) -> bool:
    """The calibrated gate: refuse unless the query's evidence, ``margin(best cosine) +
    evidence_lexical_weight · best keyword signal`` over ``hits``, reaches
    ``refusal_min_evidence``. The best cosine and the best keyword match may be different
    chunks: a chunk close in meaning and another that holds the query's rare word are
    evidence together. ``refusal_min_chunks`` means what it means under the absolute rule:
    0 refuses only an empty result, and above 1 that many hits must each be grounded
    (:func:`calibrated_evidence`); it counted any hits here, grounded or not."""
    needed = settings.refusal_min_chunks
    if not hits or needed == 0:
        return not hits
    best_sim = max((_similarity(h) or 0.0) for h in hits)
    best_keyword = max(h.scores.keyword for h in hits)
    evidence = calibration.margin(best_sim) + settings.evidence_lexical_weight * best_keyword
    if evidence < settings.refusal_min_evidence:
        return True
    return needed > 1 and sum(calibrated_evidence(h, settings, calibration)
                              >= settings.refusal_min_evidence for h in hits) < needed


def uses_calibration(settings: Settings, calibration: Calibration | None) -> bool:
    """Whether the calibrated rule applies: ``KB_REFUSAL_RULE=calibrated`` on a calibrated
    scope (the gate, and the adaptive cutoff that shares its evidence)."""
    return (settings.refusal_rule == "calibrated" and calibration is not None
            and calibration.calibrated)


def evidence_score(hit: Hit, settings: Settings) -> float:
    """The hit's score recomputed on raw evidence, without the @mention boost.

    Each signal counts as its row of :data:`~kb_retriever.ranking.signals.SIGNALS` says
    (``Signal.evidence``), then the canonical adjustment: ``Wv·raw_similarity + Wk·keyword +
    Wh·heading + the additive signals but the @mention + canonical``. For a reranked hit this
    is its total with the normalised vector term swapped for the raw one. For a pass-through
    hit (reranking off) the rank-based fused score is not evidence and no signal was scored,
    so only the raw similarity and the canonical adjustment count.
    """
    s = hit.scores
    similarity = _similarity(hit) or 0.0
    total = 0.0
    for signal in SIGNALS:
        if signal.evidence is None:
            continue
        value = similarity if signal.evidence == "raw_similarity" else getattr(s, signal.name)
        total += signal.contribution(value, settings)
    return total + s.canonical


def is_grounded(hit: Hit, settings: Settings, calibration: Calibration | None = None) -> bool:
    """True when the hit is real evidence: on a calibrated scope, :func:`calibrated_evidence`
    >= ``refusal_min_evidence``; otherwise raw cosine similarity >= ``refusal_min_similarity``
    or :func:`evidence_score` >= ``refusal_min_rerank_score``."""
    if uses_calibration(settings, calibration):
        assert calibration is not None
        return calibrated_evidence(hit, settings, calibration) >= settings.refusal_min_evidence
    similarity = _similarity(hit)
    if similarity is not None and similarity >= settings.refusal_min_similarity:
        return True
    return evidence_score(hit, settings) >= settings.refusal_min_rerank_score


def should_refuse(hits: Iterable[Hit], settings: Settings,
                  calibration: Calibration | None = None) -> bool:
    """True when fewer than ``refusal_min_chunks`` hits are grounded; always true for no hits
    (on a calibrated scope, :func:`refuse_calibrated`: the query's evidence first).

    Example: ``if should_refuse(result.primary, settings): return "__NO_GROUNDED_ANSWER__"``.
    """
    if uses_calibration(settings, calibration):
        assert calibration is not None
        return refuse_calibrated(list(hits), settings, calibration)
    needed = settings.refusal_min_chunks
    grounded = 0
    seen_any = False
    for hit in hits:
        seen_any = True
        if grounded >= needed:
            break
        if is_grounded(hit, settings, calibration):
            grounded += 1
    return not seen_any or grounded < needed


def _similarity(hit: Hit) -> float | None:
    return hit.similarity if hit.similarity is not None else hit.scores.raw_similarity
