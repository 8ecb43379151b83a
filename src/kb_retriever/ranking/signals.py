"""The score's terms, one row each: the reranker's signals and the canonical adjustment.

Everything that computes, shows or tunes the score iterates these tables, by name, never by
position: the reranker sums the signals of each group (``base``, then ``additive``) and the
adjustments (``canonical``) into a mapping keyed by :data:`TERMS`; ``ScoreBreakdown`` has a field
per term; ``search --explain`` prints them; the grounding gate's evidence reads each signal as
its row says (:attr:`Signal.evidence`); the tuner searches the grids the rows declare
(:data:`GRIDS`). Adding a signal is one row here, its function, its
:class:`~kb_retriever.models.ScoreBreakdown` field and a test.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from typing import Any, Literal, NamedTuple

from kb_retriever.models import Candidate, DocumentRef
from kb_retriever.settings import Settings

from .text import normalize_tags

__all__ = ["ADJUSTMENTS", "CANONICAL_TERMS", "GRIDS", "RECENCY_BUCKETS", "SIGNALS", "SUMS",
           "TERMS", "Adjustment", "Evidence", "Signal"]

# "Property" questions (status / owner / date) that a connector's page-property panel answers.
_PREAMBLE_PATTERNS = tuple(
    re.compile(p, re.IGNORECASE)
    for p in (
        r"^\s*(what'?s|what is)\s+the\s+status\b",
        r"^\s*who\s+owns?\b",
        r"^\s*when\s+was\b",
        r"^\s*who\s+is\s+the\s+owner\b",
        r"\bowner\s+of\b",
        r"^\s*qual\s*'?\s*è?\s*lo\s+stato\b",
        r"^\s*chi\s+(è\s+)?proprietari",
        r"^\s*quando\s+è\b",
    )
)

#: Recency signal per ingest-time bucket (reference §11).
RECENCY_BUCKETS: Mapping[str, float] = {
    "this_week": 1.0,
    "this_month": 0.7,
    "this_quarter": 0.4,
    "older": 0.1,
}
# The same buckets computed from the document date at query time: a week, a month (30 days) and
# a quarter (90 days), so the signal ages with the clock instead of freezing at ingest (§24.9).
_RECENCY_STEPS = (
    (timedelta(days=7), RECENCY_BUCKETS["this_week"]),
    (timedelta(days=30), RECENCY_BUCKETS["this_month"]),
    (timedelta(days=90), RECENCY_BUCKETS["this_quarter"]),
)
_FALSE_STRINGS = frozenset({"", "0", "false", "no", "off"})


class Evidence(NamedTuple):
    """What one candidate's signals read: the candidate, the query's derived parts, and the
    lexical scores computed over the whole pool beforehand."""

    candidate: Candidate
    vector: float  # the vector signal (normalised or raw cosine)
    keyword: float  # BM25 or coverage of the query words in the text
    heading: float  # coverage of the query words in the heading path
    query_tags: set[str]
    asks_property: bool  # a status/owner/date question
    now: datetime
    mention_doc_ids: frozenset[int]
    settings: Settings


@dataclass(frozen=True)
class Signal:
    """One relevance term of the score. ``weight`` names its :class:`Settings` field; ``None``
    means the function returns the term already weighted (the @mention boost).

    ``grid``: the weights the tuner tries (``bench/tune.py``; empty: not tuned). ``evidence``:
    how the grounding gate counts the term (``ranking/grounding.py``): ``"signal"`` as scored,
    ``"raw_similarity"`` with the raw cosine in place of the signal (a min-max normalised
    cosine says how a chunk compares with the pool, not whether it is close to the query), or
    ``None`` for not at all (an @mention is the user's wish, not evidence)."""

    name: str
    weight: str | None
    group: Literal["base", "additive"]
    value: Callable[[Evidence], float]
    grid: tuple[float, ...] = ()
    evidence: Literal["signal", "raw_similarity"] | None = "signal"

    def contribution(self, value: float, settings: Settings) -> float:
        """``value`` of this signal, weighted."""
        return value if self.weight is None else getattr(settings, self.weight) * value

    @property
    def grids(self) -> dict[str, tuple[float, ...]]:
        return {self.weight: self.grid} if self.weight is not None and self.grid else {}


@dataclass(frozen=True)
class Adjustment:
    """One term of the canonical adjustment (the trust gradient), already weighted:
    ``canonical = Σ sign · value``. ``grids``: the settings it reads that the tuner tries."""

    name: str
    sign: Literal[1, -1]
    value: Callable[[DocumentRef, Settings], float]
    grids: Mapping[str, tuple[float, ...]] = field(default_factory=dict)


Term = Signal | Adjustment  # a row of either table


def _tag_overlap(e: Evidence) -> float:
    if not e.query_tags:  # most questions name no tag: no chunk's tags to read
        return 0.0
    return _jaccard(e.query_tags, _chunk_tags(e.candidate))


def _preamble(e: Evidence) -> float:
    panel = _flag(e.candidate.metadata.get("page_property_panel"))
    return 1.0 if e.asks_property and panel else 0.0


def _status_active(e: Evidence) -> float:
    return 1.0 if _flag(e.candidate.metadata.get("status_active")) else 0.0


def _mention(e: Evidence) -> float:
    hit = e.candidate.document.id in e.mention_doc_ids
    return e.settings.mention_boost_weight if hit else 0.0


def _canonical_boost(doc: DocumentRef, s: Settings) -> float:
    if not s.canonical_enabled or not doc.is_canonical:
        return 0.0
    return s.priority_weight * doc.retrieval_priority


# A canonical status -> the setting of its penalty.
_STATUS_PENALTIES = {"superseded": "superseded_penalty", "deprecated": "deprecated_penalty",
                     "archived": "archived_penalty"}


def _canonical_penalty(doc: DocumentRef, s: Settings) -> float:
    """Status penalty plus auto-tier penalty, >= 0. Auto-generated docs pay the auto-tier
    penalty even when non-canonical (fix of §24.8): a machine-written page never outranks its
    human twin."""
    if not s.canonical_enabled:
        return 0.0
    auto = s.auto_tier_penalty if doc.generation_source == "auto" else 0.0
    status = _STATUS_PENALTIES.get(doc.canonical_status or "") if doc.is_canonical else None
    return auto if status is None else getattr(s, status) + auto


# The tuner's grids are absolute, around the defaults. The vector weight is searched too,
# although only ratios matter to the ranking, because the weights also feed the refusal gate's
# evidence score.
#: The signals, in ScoreBreakdown's order (sums run in this order: the floats are reproducible).
SIGNALS: tuple[Signal, ...] = (
    Signal("vector", "vector_weight", "base", lambda e: e.vector,
           grid=(0.3, 0.4, 0.5, 0.55, 0.6, 0.7, 0.8, 1.0), evidence="raw_similarity"),
    Signal("keyword", "keyword_weight", "base", lambda e: e.keyword,
           grid=(0.0, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5)),
    Signal("heading", "heading_weight", "base", lambda e: e.heading,
           grid=(0.0, 0.025, 0.05, 0.1, 0.15, 0.2)),
    Signal("tag_overlap", "tag_overlap_weight", "additive", _tag_overlap,
           grid=(0.0, 0.025, 0.05, 0.1, 0.15, 0.2)),
    Signal("preamble", "preamble_weight", "additive", _preamble),
    Signal("recency", "recency_weight", "additive", lambda e: _recency(e.candidate, e.now)),
    Signal("status_active", "status_active_weight", "additive", _status_active),
    Signal("mention_boost", None, "additive", _mention, evidence=None),
)
#: The canonical adjustment's terms, after the signals in ScoreBreakdown.
ADJUSTMENTS: tuple[Adjustment, ...] = (
    Adjustment("canonical_boost", 1, _canonical_boost,
               {"priority_weight": (0.0, 0.0005, 0.001, 0.002, 0.003, 0.005)}),
    Adjustment("canonical_penalty", -1, _canonical_penalty,
               {"superseded_penalty": (0.0, 0.1, 0.2, 0.3, 0.4, 0.6),
                "deprecated_penalty": (0.0, 0.1, 0.2, 0.3, 0.4, 0.6)}),
)
CANONICAL_TERMS = tuple(a.name for a in ADJUSTMENTS)
#: The sums: each signal group's, the adjustment's, and the score.
SUMS = ("base", "additive", "canonical", "total")
#: Every term of the score, in ScoreBreakdown's order: the keys of ``Scored.terms``.
TERMS = (*(s.name for s in SIGNALS), *CANONICAL_TERMS, *SUMS)
_ROWS: tuple[Term, ...] = (*SIGNALS, *ADJUSTMENTS)
#: Setting -> the values the tuner tries, in the order it tries the settings.
GRIDS: Mapping[str, tuple[float, ...]] = {
    name: grid for row in _ROWS for name, grid in row.grids.items()
}


def _chunk_tags(c: Candidate) -> set[str]:
    # Connector chunks carry search_tags; otherwise frontmatter tags count (fix of §24.9).
    raw = c.metadata.get("search_tags")
    if isinstance(raw, str):
        raw = raw.split(",")
    elif raw is not None and not isinstance(raw, (list, tuple, set, frozenset)):
        raw = [raw]
    return normalize_tags(raw) if raw else normalize_tags(c.document.tags)


def _jaccard(a: set[str], b: set[str]) -> float:
    if not a or not b:
        return 0.0
    return len(a & b) / len(a | b)


def _recency(c: Candidate, now: datetime) -> float:
    bucket = c.metadata.get("recency_bucket")
    if bucket is not None:
        return RECENCY_BUCKETS.get(str(bucket).strip().lower(), 0.0)
    doc_date = c.document.doc_date
    if doc_date is None:
        return 0.0
    age = now - _aware(doc_date)
    for limit, value in _RECENCY_STEPS:
        if age <= limit:  # a future date has a negative age: newest bucket
            return value
    return RECENCY_BUCKETS["older"]


def _aware(value: datetime | date) -> datetime:
    """A timezone-aware datetime; naive values and plain dates are taken as UTC."""
    if not isinstance(value, datetime):
        return datetime.combine(value, time(), UTC)
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def _flag(value: Any) -> bool:
    # Metadata comes from JSON written by connectors: "false"/"0" must not read as true.
    if isinstance(value, str):
        return value.strip().lower() not in _FALSE_STRINGS
    return bool(value)
