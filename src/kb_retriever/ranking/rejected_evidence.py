"""The rejected-approach channel on evidence (issue 16; decision 0009).

A rejected-approach document correlates with the query by the evidence the ranking uses, not
by one absolute cosine: its best chunk's cosine measured against the scope's null
(:class:`~kb_retriever.ranking.calibration.Calibration`), its keyword signal when a leg found
it, and an edge to or from one of the best primary documents (``related``, ``decision_for``,
a ``[[wikilink]]``...). ``evidence = margin(cosine) + Wk·keyword + edge bonus``; a document at
``rejected_min_evidence`` or above correlates.

Correlated documents are injected (the ``⚠`` block) unless the query is refused; documents
that do not correlate leave ``primary`` and ``expanded``, so a rejected idea never shows as
ordinary context without its warning.
"""

from __future__ import annotations

from collections.abc import Collection, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .calibration import Calibration

__all__ = ["RejectedEvidence", "correlate_rejected"]

# How many of the best primary documents an edge may come from to count as evidence: the ones
# the answer will rest on, not the tail of the list.
EDGE_SEEDS = 2


@dataclass(frozen=True)
class RejectedEvidence:
    """Why a rejected-approach document does or does not correlate with the query."""

    doc_id: int
    chunk_id: int  # its best chunk by cosine
    similarity: float
    margin: float  # the cosine above the scope's warning ceiling (Calibration.margin)
    keyword: float  # the keyword signal of its best candidate chunk, 0 when no leg found it
    linked: bool  # an edge to or from one of the best primary documents
    score: float
    # margin + keyword weight x keyword, without the edge bonus: the evidence the refusal gate
    # and the adaptive cutoff compare (grounding.calibrated_evidence)
    grounded: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"doc_id": self.doc_id, "chunk_id": self.chunk_id,
                "similarity": round(self.similarity, 4), "margin": round(self.margin, 4),
                "keyword": round(self.keyword, 4), "linked": self.linked,
                "score": round(self.score, 4)}


def correlate_rejected(
    best: Sequence[tuple[int, int, float]],
    *,
    keywords: Mapping[int, float],
    links: Mapping[int, Collection[Hashable]],
    seed_slugs: Collection[Hashable],
    calibration: Calibration,
    keyword_weight: float,
    edge_bonus: float,
) -> list[RejectedEvidence]:
    """Evidence for each rejected document, best first (ties: lower document id).

    ``best``: ``(doc_id, chunk_id, cosine)`` of each document's best chunk; ``keywords``:
    doc id -> its best keyword signal among the candidates; ``links``: doc id -> the slugs it
    has an edge with (either direction); ``seed_slugs``: the best primary documents' slugs.

    >>> c = Calibration((0.2,) * 32)
    >>> ev = correlate_rejected([(7, 70, 0.6), (8, 80, 0.3)], keywords={8: 0.4},
    ...                         links={8: {"dec-a"}}, seed_slugs={"dec-a"}, calibration=c,
    ...                         keyword_weight=1.5, edge_bonus=0.1)
    >>> [(e.doc_id, round(e.score, 3)) for e in ev]
    [(8, 0.825), (7, 0.5)]
    """
    out = []
    ceiling = calibration.warning_ceiling
    for doc_id, chunk_id, sim in best:
        margin = calibration.margin(sim, ceiling)
        keyword = float(keywords.get(doc_id, 0.0))
        linked = bool(set(links.get(doc_id, ())) & set(seed_slugs))
        grounded = margin + keyword_weight * keyword
        score = grounded + (edge_bonus if linked else 0.0)
        out.append(RejectedEvidence(doc_id, chunk_id, sim, margin, keyword, linked, score,
                                    grounded))
    return sorted(out, key=lambda e: (-e.score, e.doc_id))
