"""A literal for statements that also bind ``%(name)s`` values."""

from __future__ import annotations

from typing import Any

from psycopg import sql

__all__ = ["Literal"]


class Literal(sql.Literal):
    """A literal in a statement that also has ``%(name)s`` placeholders: psycopg quotes it, and
    its ``%`` are doubled so that psycopg reads them as a literal ``%``, not as a placeholder."""

    def as_bytes(self, context: Any = None) -> bytes:
        return super().as_bytes(context).replace(b"%", b"%%")
