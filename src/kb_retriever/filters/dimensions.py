"""Search filters: one validated, frozen object (reference §4.1, with its §24 fixes).

Within a dimension values are OR-ed, between dimensions AND-ed. ``metadata`` takes
MongoDB-style operators on chunk metadata and document frontmatter keys. The keys ``$and``,
``$or`` and ``$not`` take filter expressions (``filter_expr``: any field, nested, the syntax of
LangChain's ``filter=``), AND-ed with the dimensions::

    {"tags": ["cache"], "$or": [{"canonical_type": "decision"}, {"team": {"$like": "plat%"}}]}
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from ..checks import check_text
from ..errors import FilterError
from ..models import CANONICAL_TYPES, SOURCE_TYPES
from .expressions import OPERATORS, Expr, as_datetime, is_row_id, parse_expr, parse_metadata

__all__ = ["METADATA_OPERATORS", "SearchFilters", "parse_filters", "where_filters"]

#: The operators of the ``metadata`` dimension: those of the filter expressions (one parser,
#: filter_expr.parse_metadata), with ``$and``/``$or``/``$not`` groups.
METADATA_OPERATORS = OPERATORS
_MAX_VALUES = 1000  # per dimension; bounds parameter arrays (reference caps at 50/1000)


@dataclass(frozen=True)
class SearchFilters:
    """Optional narrowing of a search. Empty filters narrow nothing."""

    source_types: tuple[str, ...] = ()
    canonical_types: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    languages: tuple[str, ...] = ()
    doc_ids: tuple[int, ...] = ()
    folder_globs: tuple[str, ...] = ()
    date_from: datetime | None = None
    date_to: datetime | None = None
    # conditions on metadata keys (filter_expr.MetaCond), whatever their names
    metadata: Expr | None = None
    where: Expr | None = None  # the top-level $and/$or/$not expressions, AND-ed together

    def is_empty(self) -> bool:
        return not any(
            (self.source_types, self.canonical_types, self.tags, self.languages, self.doc_ids,
             self.folder_globs, self.date_from, self.date_to, self.metadata, self.where)
        )

    def narrows_documents(self) -> bool:
        """Whether the filters narrow the documents a search sees beyond ``doc_ids`` (which pin
        the primary ones): what graph expansion and the ⚠ block apply."""
        return not replace(self, doc_ids=()).is_empty()

    def count(self) -> int:
        """How many dimensions are set (``meta.search_strategy.filters_applied``)."""
        return sum(
            bool(v)
            for v in (self.source_types, self.canonical_types, self.tags, self.languages,
                      self.doc_ids, self.folder_globs, self.date_from, self.date_to, self.metadata,
                      self.where)
        )


VALID_KEYS = (
    "source_types", "canonical_types", "tags", "languages", "doc_ids", "folder_globs",
    "date_from", "date_to", "metadata", "$and", "$or", "$not",
)


def _str_list(key: str, value: Any, *, allowed: tuple[str, ...] | None = None) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, (list, tuple, set, frozenset)):
        raise FilterError(f"filter {key!r} takes a list of strings, got {type(value).__name__}")
    out = []
    for v in value:
        if not isinstance(v, str) or not v.strip() or len(v) > 255:
            raise FilterError(f"filter {key!r} has an invalid value {v!r}")
        check_text(v, f"filter {key!r}", FilterError)
        v = v.strip()
        if allowed is not None and v not in allowed:
            raise FilterError(f"filter {key!r}: {v!r} is not one of {', '.join(allowed)}")
        out.append(v)
    if len(out) > _MAX_VALUES:
        raise FilterError(f"filter {key!r} has more than {_MAX_VALUES} values")
    return tuple(dict.fromkeys(out))


def _date(key: str, value: Any, *, end: bool) -> datetime | None:
    if value is None or value == "":
        return None
    return as_datetime(f"filter {key!r}", value, end=end)


def _where(f: Mapping[str, Any]) -> Expr | None:
    exprs = {k: f[k] for k in ("$and", "$or", "$not") if k in f}
    return parse_expr(exprs) if exprs else None


def where_filters(expression: Mapping[str, Any] | None) -> SearchFilters:
    """:class:`SearchFilters` for a bare filter expression, where every key is a field or
    ``$and``/``$or``/``$not`` (LangChain's ``filter=`` syntax)."""
    if expression is None or (isinstance(expression, Mapping) and not expression):
        return SearchFilters()
    return SearchFilters(where=parse_expr(expression))


def parse_filters(filters: SearchFilters | Mapping[str, Any] | None) -> SearchFilters:
    """Validate a mapping into :class:`SearchFilters`; unknown keys raise :class:`FilterError`."""
    if filters is None:
        return SearchFilters()
    if isinstance(filters, SearchFilters):
        return filters
    if not isinstance(filters, Mapping):
        raise FilterError(f"filters must be a mapping, got {type(filters).__name__}")
    unknown = sorted(str(k) for k in filters if k not in VALID_KEYS)
    if unknown:
        raise FilterError(f"unknown filter key(s) {unknown}; valid: {', '.join(VALID_KEYS)}")
    f = filters
    doc_ids: tuple[int, ...] = ()
    if f.get("doc_ids"):
        raw = f["doc_ids"]
        if not isinstance(raw, (list, tuple)) or not all(is_row_id(x) for x in raw):
            raise FilterError("filter 'doc_ids' takes a list of positive integers")
        doc_ids = tuple(dict.fromkeys(raw))
    langs = _str_list("languages", f.get("languages") or ())
    if any(len(x) != 2 or not x.isalpha() for x in langs):
        raise FilterError("filter 'languages' takes 2-letter ISO-639-1 codes")
    out = SearchFilters(
        source_types=_str_list("source_types", f.get("source_types") or (), allowed=SOURCE_TYPES),
        canonical_types=_str_list(
            "canonical_types", f.get("canonical_types") or (), allowed=CANONICAL_TYPES
        ),
        tags=_str_list("tags", f.get("tags") or ()),
        languages=tuple(x.lower() for x in langs),
        doc_ids=doc_ids,
        folder_globs=_str_list("folder_globs", f.get("folder_globs") or ()),
        date_from=_date("date_from", f.get("date_from"), end=False),
        date_to=_date("date_to", f.get("date_to"), end=True),
        metadata=parse_metadata(f.get("metadata") or {}),
        where=_where(f),
    )
    if out.date_from and out.date_to and out.date_to < out.date_from:
        raise FilterError("filter 'date_to' is before 'date_from'")
    return out
