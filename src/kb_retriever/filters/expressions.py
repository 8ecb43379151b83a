"""The filter expression language: ``$and``, ``$or``, ``$not`` over field conditions.

The syntax is the one LangChain vector stores (langchain-postgres) accept, so a LangChain
``filter=`` passes through unchanged, and the LlamaIndex adapter converts ``MetadataFilters``
into it::

    {"$and": [{"canonical_type": "decision"},
              {"$or": [{"tags": {"$in": ["cache", "redis"]}}, {"team": {"$like": "plat%"}}]},
              {"$not": {"canonical_status": "superseded"}}]}

A field is one of :data:`TYPED_FIELDS` (document and chunk columns, typed) or any other key, read from
the chunk's metadata and then the document's frontmatter; ``metadata.<key>`` is always that
metadata key, one named like a column (``metadata.language``) included. A bare value means ``$eq``.
Parsing validates everything; rendering (``store.filter_sql``) binds every value.

>>> parse_expr({"tags": {"$in": ["cache"]}, "team": "platform"})
And(items=(Cond(field='tags', op='$in', value=('cache',)), Cond(field='team', op='$eq', value='platform')))
>>> parse_expr({"metadata.language": "python"})
MetaCond(field='language', op='$eq', value='python')
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, time
from typing import Any, Literal

from ..checks import check_text
from ..errors import FilterError

__all__ = ["And", "Cond", "Expr", "METADATA_PREFIX", "MetaCond", "Not", "OPERATORS", "Or",
           "TYPED_FIELDS", "parse_expr", "parse_metadata"]

OPERATORS = ("$eq", "$ne", "$in", "$nin", "$gt", "$gte", "$lt", "$lte", "$between", "$like",
             "$ilike", "$exists")
_ORDERED = ("$gt", "$gte", "$lt", "$lte", "$between")

FieldKind = Literal["text", "bool", "int", "tags", "date"]
#: Document (and two chunk) columns a filter can name, and their kinds: ``heading_path`` and
#: ``chunk_uid`` (a chunk's stable id, ``Hit.chunk_uid``) are the chunk's. Any other field is
#: metadata.
TYPED_FIELDS: dict[str, FieldKind] = {
    "source_type": "text", "canonical_type": "text", "canonical_status": "text", "slug": "text",
    "doc_key": "text", "source_path": "text", "title": "text", "language": "text",
    "evidence_tier": "text", "heading_path": "text", "chunk_uid": "text", "is_canonical": "bool",
    "retrieval_priority": "int", "tags": "tags", "doc_date": "date",
}
#: A field written ``metadata.<key>`` names that metadata key, whatever its name.
METADATA_PREFIX = "metadata."
_FIELD = re.compile(r"^[A-Za-z_][A-Za-z0-9_\-]{0,63}$")
MAX_DEPTH = 16  # deeper trees are generated, not written: refuse before recursion costs
MAX_CONDITIONS = 200
_MAX_LIST = 1000


@dataclass(frozen=True)
class Cond:
    field: str
    op: str
    value: Any


@dataclass(frozen=True)
class MetaCond(Cond):
    """A condition on a metadata key, whatever its name (the ``metadata`` filter dimension:
    a key ``tags`` there is a metadata key, not the document's tags)."""


@dataclass(frozen=True)
class And:
    items: tuple[Expr, ...]


@dataclass(frozen=True)
class Or:
    items: tuple[Expr, ...]


@dataclass(frozen=True)
class Not:
    item: Expr


Expr = Cond | And | Or | Not


def is_bigint(v: int) -> bool:
    """Whether PostgreSQL can compare ``v`` as a number (a bigint); 10**400 is none."""
    return -(2**63) <= v < 2**63


def is_row_id(v: Any) -> bool:
    """A positive integer that fits a bigint id column (``bool`` is not one)."""
    return isinstance(v, int) and not isinstance(v, bool) and 1 <= v < 2**63


def parse_expr(value: Any) -> Expr:
    """Validate a filter expression (a mapping) into a frozen tree; :class:`FilterError` on
    anything malformed, naming the valid operators or fields."""
    return _parse(value, 0, [0], metadata=False)


def parse_metadata(value: Any) -> Expr | None:
    """:func:`parse_expr` for the ``metadata`` filter dimension: every field is a metadata key
    (:class:`MetaCond`). An empty mapping is no condition (None).

    >>> parse_metadata({"tags": "x", "$not": {"team": {"$in": ["a"]}}}).items
    (MetaCond(field='tags', op='$eq', value='x'), Not(item=MetaCond(field='team', op='$in', value=('a',))))
    """
    if isinstance(value, Mapping) and not value:
        return None
    if not isinstance(value, Mapping):
        raise FilterError("filter 'metadata' takes a mapping {key: value | {$op: value}}")
    return _parse(value, 0, [0], metadata=True)


def _parse(value: Any, depth: int, counter: list[int], *, metadata: bool) -> Expr:
    if depth > MAX_DEPTH:
        raise FilterError(f"filter is nested more than {MAX_DEPTH} levels deep")
    if not isinstance(value, Mapping) or not value:
        raise FilterError("a filter expression is a non-empty mapping of fields and $and/$or/$not")
    items: list[Expr] = []
    for key, operand in value.items():
        if key in ("$and", "$or"):
            if not isinstance(operand, list | tuple) or not operand:
                raise FilterError(f"{key} takes a non-empty list of filter expressions")
            parts = tuple(_parse(x, depth + 1, counter, metadata=metadata) for x in operand)
            items.append(And(parts) if key == "$and" else Or(parts))
        elif key == "$not":
            items.append(Not(_parse(operand, depth + 1, counter, metadata=metadata)))
        elif isinstance(key, str) and key.startswith("$"):
            raise FilterError(f"unknown filter operator {key!r} at this level; valid: $and, "
                              "$or, $not, or a field name")
        else:
            items.extend(_conditions(key, operand, counter, metadata=metadata))
    return items[0] if len(items) == 1 else And(tuple(items))


def _day(v: Any) -> bool:
    """Whether ``v`` names a day alone: a date, or an ISO date without a time (``2026-03-01``,
    or the basic format ``20260301``)."""
    if isinstance(v, str):
        try:
            date.fromisoformat(v.strip())
        except ValueError:
            return False
        return True
    return isinstance(v, date) and not isinstance(v, datetime)


def _conditions(field: Any, operand: Any, counter: list[int], *, metadata: bool) -> list[Expr]:
    if isinstance(field, str) and field.startswith(METADATA_PREFIX) and not metadata:
        field, metadata = field[len(METADATA_PREFIX):], True
    if not isinstance(field, str) or not _FIELD.match(field):
        raise FilterError(f"filter field {field!r:.80} is invalid: letters, digits, '_' and '-'")
    ops = operand if isinstance(operand, Mapping) else {"$eq": operand}
    if not ops:
        raise FilterError(f"filter field {field!r} has no condition")
    out: list[Expr] = []
    for op, v in ops.items():
        if op not in OPERATORS:
            raise FilterError(f"filter operator {op!r:.40} is unknown; valid: {', '.join(OPERATORS)}")
        counter[0] += 1
        if counter[0] > MAX_CONDITIONS:
            raise FilterError(f"a filter has at most {MAX_CONDITIONS} conditions")
        if metadata:
            out.append(MetaCond(field, op, _value(field, None, op, v)))
            continue
        kind = TYPED_FIELDS.get(field)
        days = [v] if op in ("$eq", "$ne") else v if op in ("$in", "$nin") else None
        if kind == "date" and isinstance(days, list | tuple) and days and any(map(_day, days)):
            _value(field, kind, "$in", list(days))  # the list's own checks
            on_days = [Cond(field, "$between", _value(field, kind, "$between", [d, d]))
                       if _day(d) else Cond(field, "$eq", _value(field, kind, "$eq", d))
                       for d in days]  # each whole day, not its midnight; a datetime itself
            either = on_days[0] if len(on_days) == 1 else Or(tuple(on_days))
            out.append(either if op in ("$eq", "$in") else Not(either))
            continue
        out.append(Cond(field, op, _value(field, kind, op, v)))
    return out


def _value(field: str, kind: FieldKind | None, op: str, v: Any) -> Any:
    if kind == "tags" and op in _ORDERED:
        raise FilterError(f"tags take $eq, $ne, $in, $nin, $like, $ilike or $exists, not {op}")
    if kind == "bool" and op not in ("$eq", "$ne", "$exists"):
        raise FilterError(f"{field} takes $eq, $ne or $exists")
    if op == "$exists":
        if not isinstance(v, bool):
            raise FilterError(f"{field} $exists takes true or false")
        return v
    if op in ("$in", "$nin"):
        if not isinstance(v, list | tuple | set | frozenset) or len(v) > _MAX_LIST:
            raise FilterError(f"{field} {op} takes a list of at most {_MAX_LIST} values")
        return tuple(_scalar(field, kind, op, x) for x in v)
    if op == "$between":
        if not isinstance(v, list | tuple) or len(v) != 2:
            raise FilterError(f"{field} $between takes [low, high]")
        low = _scalar(field, kind, "$gte", v[0])
        high = _scalar(field, kind, "$lte", v[1])  # a date-only bound takes its whole day
        if type(low) is not type(high) and not {type(low), type(high)} <= {int, float}:
            raise FilterError(f"{field} $between takes two values of one type")
        return (low, high)
    if op in ("$like", "$ilike"):
        if not isinstance(v, str) or kind in ("bool", "int", "date"):
            raise FilterError(f"{field} {op} takes a text pattern (% and _ are wildcards, "
                              "\\ makes the next character literal)")
        if (len(v) - len(v.rstrip("\\"))) % 2:  # a last backslash escapes nothing
            raise FilterError(f"{field} {op}: the pattern ends in a lone \\ (the escape "
                              "character: write \\\\ for a backslash)")
        return _scalar(field, kind, op, v)
    return _scalar(field, kind, op, v)


def _scalar(field: str, kind: FieldKind | None, op: str, v: Any) -> Any:
    if kind == "date":
        # A date-only bound: $gt and $lte mean after / up to the end of that day, $lt and $gte
        # from its start (the typed date_from/date_to filters read it the same way).
        return as_datetime(field, v, end=op in ("$gt", "$lte"))
    if kind == "bool":
        if not isinstance(v, bool):
            raise FilterError(f"{field} takes true or false")
        return v
    if kind == "int":
        if isinstance(v, bool) or not isinstance(v, int) or not -(2**15) <= v < 2**15:
            raise FilterError(f"{field} takes a whole number")
        return v
    if kind in ("text", "tags"):
        if not isinstance(v, str):
            raise FilterError(f"{field} takes text, not {type(v).__name__}")
        if field == "language":  # stored lower-case, as the languages dimension reads it
            v = v.lower()
    if v is None or isinstance(v, bool):
        return v
    if isinstance(v, list | tuple) and not v and kind is None:
        return ()  # an empty list (LlamaIndex's IS_EMPTY); hashable, and JSON's [] still
    if isinstance(v, int):
        if not is_bigint(v):
            raise FilterError(f"{field} {op}: the number is out of range (a 64-bit integer)")
        return v
    if isinstance(v, float):
        if not math.isfinite(v):
            raise FilterError(f"{field} {op} takes a finite number")
        return v
    if isinstance(v, str):
        if len(v) > 10_000:
            raise FilterError(f"{field} {op} has an invalid text value")
        return check_text(v, f"{field} {op}", FilterError)
    raise FilterError(f"{field} {op} takes a string, number, boolean, null or [], "
                      f"not {type(v).__name__}")


def as_datetime(field: str, v: Any, *, end: bool) -> datetime:
    """``v`` (a datetime, a date or an ISO string) as an aware datetime; a date alone is the
    start of its day, or its end with ``end``. Naive values are taken as UTC."""
    if isinstance(v, datetime):
        dt = v
    elif isinstance(v, date):
        dt = datetime.combine(v, time.max if end else time.min)
    elif isinstance(v, str):
        try:
            dt = datetime.fromisoformat(v.strip())
        except ValueError:
            raise FilterError(f"{field} needs an ISO date, got {v!r:.40}") from None
        if end and _day(v):
            dt = datetime.combine(dt.date(), time.max)
    else:
        raise FilterError(f"{field} needs an ISO date, got {type(v).__name__}")
    return dt if dt.tzinfo else dt.replace(tzinfo=UTC)
