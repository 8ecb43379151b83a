"""Folder globs over ``source_path`` (reference §9), in Python and as a PostgreSQL regex.

Semantics: split the glob on ``**`` (which crosses ``/``); inside each part ``*`` -> ``[^/]*``,
``?`` -> ``[^/]``, every other character is literal; parts are joined with ``.*``; the match is
anchored at both ends and case-sensitive. ``hr/**`` matches any depth under ``hr/``;
``hr/**/x.md`` needs at least one directory between ``hr/`` and ``x.md``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from functools import lru_cache

__all__ = ["glob_to_sql_regex", "matches_any_glob"]

# Characters that are operators in a PostgreSQL ARE (outside brackets). A backslash before a
# letter or digit would start an escape such as \d, so only these are escaped.
_ARE_SPECIAL = frozenset("\\.^$|?*+()[]{}")


def _translate(glob: str, literal: Callable[[str], str]) -> str:
    parts = []
    for part in glob.split("**"):
        out = []
        for ch in part:
            if ch == "*":
                out.append("[^/]*")
            elif ch == "?":
                out.append("[^/]")
            else:
                out.append(literal(ch))
        parts.append("".join(out))
    return ".*".join(parts)


def _are_literal(ch: str) -> str:
    return "\\" + ch if ch in _ARE_SPECIAL else ch


@lru_cache(maxsize=256)
def _compiled(glob: str) -> re.Pattern[str]:
    # DOTALL so ".*" behaves like PostgreSQL's "." (which also matches a newline).
    return re.compile(_translate(glob, re.escape), re.DOTALL)


def matches_any_glob(path: str | None, globs: Iterable[str]) -> bool:
    """True when ``path`` fully matches at least one glob; False for no path or no globs.

    Callers skip the folder filter entirely when the glob list is empty.

    >>> matches_any_glob("hr/policies/leave.md", ["hr/**"])
    True
    >>> matches_any_glob("hr/leave.md", ["hr/**/*.md"])
    False
    """
    if path is None:
        return False
    return any(_compiled(g).fullmatch(path) is not None for g in globs)


def glob_to_sql_regex(glob: str) -> str:
    """The glob as an anchored POSIX regex for PostgreSQL's case-sensitive ``~`` operator.

    Bind the result as a query parameter (``source_path ~ %s``); it is never spliced into SQL.

    >>> glob_to_sql_regex("docs/*.md")
    '^docs/[^/]*\\\\.md$'
    """
    return "^" + _translate(glob, _are_literal) + "$"
