"""Full text as a strategy of the store: one engine gives the DDL, the query, each candidate's
term evidence and the lexemes the scope statistics count, behind :class:`FullText`.

The engine in use is PostgreSQL's own tsvector (``tsvector.py``, :data:`ENGINE`). Another engine
(a BM25 index where the server has one) is one module implementing the same protocol; the legs
(``store/sql.py``), the schema (``store/schema.py``) and the statistics (``store/stats.py``)
call only this interface.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from psycopg import sql

from .tsvector import MATCH_COUNT, TSVECTOR, LexemeBudget, LexemeChunks

__all__ = ["ENGINE", "MATCH_COUNT", "FullText", "LexemeBudget", "LexemeChunks"]


class FullText(Protocol):
    """A full-text engine, as the store uses it (every statement part is SQL with the aliases
    the leg statements use: ``c`` a kb_chunks row, CTE ``ql`` the query's lexemes)."""

    name: str
    #: kb_chunks' columns of the engine -> their storage (``ALTER COLUMN ... SET STORAGE``).
    storage: Mapping[str, str]

    def ddl(self, default_language: str,
            configs: Mapping[str, str]) -> list[sql.Composed | sql.SQL]:
        """Statements that add what the engine indexes to kb_chunks (idempotent), the column
        first and then its indexes: each chunk in the configuration that ``configs`` gives its
        language, ``default_language`` else. Its columns' storage is :attr:`storage`'s."""

    def query_lexemes(self, configs: tuple[str, ...]) -> sql.Composable:
        """CTE ``ql``: the query's lexemes, stemmed by each of ``configs`` (or ``fts_lang``)."""

    def matches(self, *, mode: str, n_phrases: int, budget: LexemeBudget | None, cap: int,
                kc: sql.Composable, cap_literal: sql.Composable, join: sql.Composable,
                scope: sql.Composable, filt: sql.Composable,
                filled: sql.Composable | None = None,
                counts: LexemeChunks | None = None) -> sql.Composable:
        """CTEs ending in ``fts_m`` (the capped matches), ``fts_n`` (their count, one row of
        ``n``: :data:`MATCH_COUNT`) and ``fts`` (``id``, ``fts_rank``, ``fts_score`` of the
        best ``kc``); none ranked when ``filled`` (a boolean: the other
        leg fills the pool) holds and the matches reach ``cap``. ``counts`` (the scope's
        chunks holding each lexeme, given only for a leg without filters) may spare reading
        the matches when the query's lexemes alone say that they reach ``cap``."""

    def evidence_columns(self) -> sql.Composable:
        """A candidate row's BM25 inputs: ``tf`` (the query's lexemes in the chunk, as
        :meth:`term_counts` reads them) and ``lexeme_count``."""

    def term_counts(self, evidence: Any) -> Mapping[str, int]:
        """The query's lexemes in a chunk with their counts, from its ``tf`` column."""

    def lexemes(self, row: str) -> sql.Composable:
        """A set-returning expression of the lexemes (column ``lexeme``) of chunk row ``row``."""

    @property
    def carried(self) -> sql.Composable:
        """The column of a chunk that :meth:`lexemes` reads (returned by deletes)."""


#: The engine in use.
ENGINE: FullText = TSVECTOR
