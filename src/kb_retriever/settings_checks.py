"""The checks of :class:`~kb_retriever.settings.Settings` beyond each field's type and bounds:
the values read from comma lists and names, and the settings that must agree with each
other. Each raises ``ValueError`` with what to set; the settings turn it into a
:class:`~kb_retriever.errors.ConfigError` naming the variable.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from .vocabulary import EDGE_TYPE_WEIGHTS, FTS_LANGUAGES

if TYPE_CHECKING:
    from .settings import Settings

__all__ = ["edge_types", "fts_language", "replica_urls", "time_zone", "together"]

# A comma that starts another connection string (a URI, or a ``key=value`` one): those in
# ``postgresql://u@r1:5432,r2:5432/kb`` or ``host=r1,r2`` list one server's hosts.
_NEXT_CONNINFO = re.compile(r",\s*(?=postgres(?:ql)?://|[A-Za-z_]+\s*=)")


def edge_types(value: Any) -> Any:
    """``KB_GRAPH_EXPANSION_EDGE_TYPES``: a comma list or a sequence of known edge types."""
    if isinstance(value, str):
        value = [part.strip() for part in value.split(",")]
    if isinstance(value, (list, tuple)):
        items = tuple(str(v).strip() for v in value if str(v).strip())
        unknown = [v for v in items if v not in EDGE_TYPE_WEIGHTS]
        if unknown:
            raise ValueError(
                f"unknown edge type(s) {unknown}; valid: {', '.join(EDGE_TYPE_WEIGHTS)}")
        return items
    return value


def replica_urls(value: Any) -> Any:
    """``KB_REPLICA_URLS``: connection strings, split where another one starts.

    >>> replica_urls("postgresql://u@r1,r2/kb, host=r3 dbname=kb")
    ('postgresql://u@r1,r2/kb', 'host=r3 dbname=kb')
    """
    if isinstance(value, str):
        value = [part.strip() for part in _NEXT_CONNINFO.split(value)]
    if isinstance(value, (list, tuple)):
        if not all(isinstance(v, str) for v in value):
            raise ValueError("replica URLs must be strings")
        return tuple(v.strip() for v in value if v.strip())
    return value


def time_zone(value: str) -> str:
    """``KB_PROMPT_TIMEZONE``: an IANA name the tz database knows (UTC needs none)."""
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    try:
        if value.strip().upper() != "UTC":  # UTC needs no tz database (prompt/compose.py)
            ZoneInfo(value.strip())
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"unknown time zone {value!r}; an IANA name such as UTC or "
                         "Europe/Rome") from None
    return value.strip()


def fts_language(value: str) -> str:
    """``KB_FTS_LANGUAGE``: one of the languages PostgreSQL stems."""
    value = value.strip().lower()
    if value not in FTS_LANGUAGES:
        raise ValueError(f"unknown FTS language {value!r}; valid: {', '.join(FTS_LANGUAGES)}")
    return value


def together(s: Settings) -> None:
    """The settings that must agree: pool sizes, the HNSW build, the limits, the fusion's
    weights."""
    if s.pool_min_size > s.pool_max_size:
        raise ValueError("pool_min_size must be <= pool_max_size")
    if s.hnsw_ef_construction < 2 * s.hnsw_m:
        raise ValueError("KB_HNSW_EF_CONSTRUCTION must be at least twice KB_HNSW_M "
                         f"({s.hnsw_ef_construction} < 2 x {s.hnsw_m})")
    if s.default_limit > s.max_limit:
        raise ValueError(f"KB_DEFAULT_LIMIT ({s.default_limit}) must be <= KB_MAX_LIMIT "
                         f"({s.max_limit}): every search would fail")
    if s.hybrid_semantic_weight == 0 and (s.hybrid_fts_weight == 0
                                          or not s.hybrid_search_enabled):
        raise ValueError("KB_HYBRID_SEMANTIC_WEIGHT is 0 and no full-text leg runs (its weight "
                         "is 0 or hybrid search is off): every fused score would be 0 and the "
                         "order that of the chunk ids")
