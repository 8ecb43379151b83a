"""The checks a caller's string passes before it can reach the database, shared by every
public entry point (queries, names, ids, texts, metadata, filters).

PostgreSQL stores no NUL character, and a lone UTF-16 surrogate (``"\\ud800"``: not a Unicode
character) cannot be encoded as UTF-8, so the driver raised a raw ``UnicodeEncodeError``.
Names (tenant, project, synonym terms) are exact: ``" acme "`` is not ``"acme"``.
"""

from __future__ import annotations

import re
from typing import Any

from .errors import InputError

__all__ = ["check_text", "valid_name"]

_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
# Long enough for any tenant or project key, short enough to read in a message.
NAME_MAX = 120


def check_text(value: str, what: str, error: type[InputError] = InputError) -> str:
    """``value``, or ``error`` naming ``what`` when PostgreSQL cannot store it.

    >>> check_text("naïve 🔥", "query")
    'naïve 🔥'
    >>> check_text("\\ud800", "tenant")
    Traceback (most recent call last):
    ...
    kb_retriever.errors.InputError: tenant contains a lone surrogate ('\\ud800' at 0), ...
    """
    bad = _UNSTORABLE.search(value)
    if bad is None:
        return value
    if bad.group() == "\x00":
        raise error(f"{what} contains a NUL character, which PostgreSQL cannot store")
    raise error(f"{what} contains a lone surrogate ({bad.group()!r} at {bad.start()}), "
                "which is not Unicode text; decode its bytes as UTF-8 first")


def valid_name(kind: str, value: Any) -> str:
    """A tenant, project, term or synonym: a non-empty string of at most 120 characters,
    without surrounding whitespace (names are compared exactly, never trimmed)."""
    if not isinstance(value, str) or not value.strip() or len(value) > NAME_MAX:
        raise InputError(f"{kind} must be a non-empty string of at most {NAME_MAX} characters")
    if value != value.strip():
        raise InputError(f"{kind} {value!r:.80} has whitespace around it; names are exact, "
                         "so remove it")
    return check_text(value, kind)
