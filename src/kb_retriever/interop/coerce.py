"""Lenient readers for metadata that arrives from other frameworks' documents and nodes.

Metadata often round-trips through JSON, YAML or a vector store as strings; the adapters read
canonical fields (``is_canonical``, ``retrieval_priority``, ``tags``, dates) with these so that
``"false"`` is false, ``"80"`` is 80 and junk falls back to a default instead of raising.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from datetime import date, datetime
from typing import Any

__all__ = ["as_date", "as_flag", "as_float", "as_int", "as_opt_str", "as_tags"]

_FALSE = frozenset({"", "0", "false", "no", "off", "none", "null"})


def as_flag(value: Any) -> bool:
    """Truthiness where the strings ``"false"``, ``"0"``, ``"no"``, ``"off"`` … read as false."""
    if isinstance(value, str):
        return value.strip().lower() not in _FALSE
    return bool(value)


def as_int(value: Any, default: Any = None) -> Any:
    """An int from an int, float or numeric string; ``default`` otherwise."""
    try:
        return int(float(value))
    except (TypeError, ValueError, OverflowError):
        return default


def as_float(value: Any, default: Any = None) -> Any:
    """A finite float (a Python one: a NumPy float32 is not JSON), or ``default`` (None,
    junk, NaN and inf all fall back)."""
    try:
        out = float(value)
    except (TypeError, ValueError):
        return default
    return out if math.isfinite(out) else default


def as_opt_str(value: Any) -> str | None:
    """``None`` for None or the empty string, else ``str(value)``."""
    return None if value is None or value == "" else str(value)


def as_tags(value: Any) -> tuple[str, ...]:
    """Tags from a list/tuple/set or a comma-separated string; anything else gives ``()``."""
    if isinstance(value, str):
        value = value.split(",")
    if isinstance(value, Mapping) or not isinstance(value, Iterable):
        return ()
    return tuple(str(t).strip() for t in value if str(t).strip())


def as_date(value: Any) -> datetime | None:
    """A datetime from a datetime, a date (its midnight), a NumPy ``datetime64`` or an ISO-8601
    string; ``None`` otherwise.

    >>> as_date(date(2026, 1, 2)), as_date("2026-01-02T03:00")
    (datetime.datetime(2026, 1, 2, 0, 0), datetime.datetime(2026, 1, 2, 3, 0))
    """
    if isinstance(value, datetime):
        return value
    if isinstance(value, date):
        return datetime(value.year, value.month, value.day)
    if type(value).__name__ == "datetime64":  # (numpy's, without importing numpy here)
        value = str(value)
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value.strip())
        except ValueError:
            return None
    return None
