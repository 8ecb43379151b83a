"""The reranker's signals, one row each: its name, its weight setting, its group, its function.

Everything that shows or tunes the score iterates :data:`SIGNALS`: the reranker sums the rows
of each group (``base``, then ``additive``), ``ScoreBreakdown`` has a field per row (its name),
``search --explain`` prints them, and the tuner searches their weights. Adding a signal is one
row here, its function, its :class:`~kb_retriever.models.ScoreBreakdown` field and a test.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import Any, Literal, NamedTuple

from kb_retriever.models import Candidate
from kb_retriever.settings import Settings

from .text import normalize_tags

__all__ = ["CANONICAL_TERMS", "RECENCY_BUCKETS", "SIGNALS", "Evidence", "Signal", "TERMS"]

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
    """One term of the score. ``weight`` names its :class:`Settings` field; ``None`` means the
    function returns the term already weighted (the @mention boost)."""

    name: str
    weight: str | None
    group: Literal["base", "additive"]
    value: Callable[[Evidence], float]

    def weighted(self, e: Evidence) -> tuple[float, float]:
        """(the signal, its weighted contribution)."""
        v = self.value(e)
        return v, (v if self.weight is None else getattr(e.settings, self.weight) * v)


def _tag_overlap(e: Evidence) -> float:
    return _jaccard(e.query_tags, _chunk_tags(e.candidate))


def _preamble(e: Evidence) -> float:
    panel = _flag(e.candidate.metadata.get("page_property_panel"))
    return 1.0 if e.asks_property and panel else 0.0


def _status_active(e: Evidence) -> float:
    return 1.0 if _flag(e.candidate.metadata.get("status_active")) else 0.0


def _mention(e: Evidence) -> float:
    hit = e.candidate.document.id in e.mention_doc_ids
    return e.settings.mention_boost_weight if hit else 0.0


#: The signals, in ScoreBreakdown's order (sums run in this order: the floats are reproducible).
SIGNALS: tuple[Signal, ...] = (
    Signal("vector", "vector_weight", "base", lambda e: e.vector),
    Signal("keyword", "keyword_weight", "base", lambda e: e.keyword),
    Signal("heading", "heading_weight", "base", lambda e: e.heading),
    Signal("tag_overlap", "tag_overlap_weight", "additive", _tag_overlap),
    Signal("preamble", "preamble_weight", "additive", _preamble),
    Signal("recency", "recency_weight", "additive", lambda e: _recency(e.candidate, e.now)),
    Signal("status_active", "status_active_weight", "additive", _status_active),
    Signal("mention_boost", None, "additive", _mention),
)
#: The canonical adjustment's terms and the sums, after the signals in ScoreBreakdown.
CANONICAL_TERMS = ("canonical_boost", "canonical_penalty")
TERMS = (*(s.name for s in SIGNALS), *CANONICAL_TERMS, "base", "additive", "canonical", "total")


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
