"""The full-text part of the candidate statements: the tsquery, the query's lexemes (CTE
``ql``) and the OR lexemes the full-text leg keeps (CTE ``sel``). Nothing here executes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from psycopg import sql

__all__ = ["QUERY_LEXEMES", "LexemeBudget", "Literal", "lexeme_selection_sql",
           "query_lexemes_sql", "tsquery_sql"]


class Literal(sql.Literal):
    """A literal in a statement that also has ``%(name)s`` placeholders: psycopg quotes it, and
    its ``%`` are doubled so that psycopg reads them as a literal ``%``, not as a placeholder."""

    def as_bytes(self, context: Any = None) -> bytes:
        return super().as_bytes(context).replace(b"%", b"%%")


@dataclass(frozen=True)
class LexemeBudget:
    """The corpus statistics by which the full-text leg chooses the lexemes it ORs together
    (rarest first, within the match cap: :func:`lexeme_selection_sql`, done in the statement).

    ``estimates`` is a JSON object of each listed lexeme's estimated chunk count, ``unlisted``
    the estimate of any other lexeme (``CorpusLexemes.estimates``). They change only when the
    statistics do, so they are literals of the leg (one plan per scope and statistics).
    """

    estimates: str
    unlisted: float


def tsquery_sql(mode: str, n_phrases: int) -> sql.Composable:
    """The tsquery expression for the FTS leg; ``%(fts_text)s`` and ``%(phrase{i})s`` params.

    ``or``: OR of the lexemes of CTE ``sel`` (:func:`lexeme_selection_sql`: the query's
    lexemes, stemmed by the configured language and chosen rarest first) in their order
    ``o``; they are read with the ``simple`` config so they are not stemmed twice. Long
    natural-language questions still match (reference §24.6: ``plainto`` ANDs every word and
    often matches nothing).
    """
    base: sql.Composable
    if mode == "or":
        base = sql.SQL(
            "to_tsquery('simple', coalesce((SELECT string_agg(quote_literal(l), ' | ' "
            "ORDER BY o) FROM sel), ''))"
        )
    elif mode == "websearch":
        base = sql.SQL("websearch_to_tsquery(%(fts_lang)s::regconfig, %(fts_text)s)")
    else:
        base = sql.SQL("plainto_tsquery(%(fts_lang)s::regconfig, %(fts_text)s)")
    extra = [
        sql.SQL("plainto_tsquery(%(fts_lang)s::regconfig, %({})s)").format(sql.SQL(f"phrase{i}"))
        for i in range(n_phrases)
    ]
    if mode == "or" or not extra:  # in "or" mode the phrases are already in fts_text
        return base
    return sql.SQL("({})").format(sql.SQL(" || ").join([base, *extra]))


# The query's lexemes, stemmed once by the statement itself: to_tsvector of the query text.
QUERY_LEXEMES = sql.SQL(
    "ql AS (SELECT tsvector_to_array(to_tsvector(%(fts_lang)s::regconfig, %(fts_text)s)) "
    "AS lexemes)")


def query_lexemes_sql(configs: tuple[str, ...] = ()) -> sql.Composable:
    """CTE ``ql``: the query's lexemes. With several ``configs`` (a scope whose documents are
    in several languages, migration 0004) the query is stemmed by each and the lexemes united,
    so an Italian and an English document both match; otherwise :data:`QUERY_LEXEMES`."""
    if len(configs) <= 1:
        return QUERY_LEXEMES
    return sql.SQL(
        "ql AS (SELECT ARRAY(SELECT DISTINCT u.l FROM unnest({configs}::regconfig[]) AS cfg(c), "
        "unnest(tsvector_to_array(to_tsvector(cfg.c, %(fts_text)s))) AS u(l) "
        "ORDER BY u.l) AS lexemes)").format(configs=Literal(list(configs)))


def lexeme_selection_sql(budget: LexemeBudget | None, cap: int) -> sql.Composable:
    """CTE ``sel`` (after CTE ``ql``): the query lexemes (``l``) that the OR query keeps, in
    their order (``o``): rarest first while their estimated matches fit ``cap``, at least the
    rarest one, every lexeme without statistics (tests/unit/lexeme_oracle.py is the Python
    oracle the tests compare it with).

    The full-text leg ranks at most ``cap`` matches, taken in table order, so a frequent
    lexeme would fill that sample with weak matches and push out the chunks that hold the
    rare, telling ones. So: rarest first (estimated chunks, then the lexeme bytewise: the
    ``sorted`` of Python), while the running total of estimates stays within ``cap``, and at
    least the rarest. The same doubles in the same order as in Python, so the same choice
    (``tests/db/test_lexeme_selection.py``). Without statistics every lexeme is kept, in
    ``ql``'s order. Choosing here spares the search a round trip to stem the query first.
    """
    if budget is None:
        return sql.SQL("sel AS (SELECT u.l, u.o FROM unnest((SELECT lexemes FROM ql)) "
                       "WITH ORDINALITY AS u(l, o))")
    return sql.SQL(
        "sel AS (SELECT s.l, s.o FROM (SELECT e.l, row_number() OVER w AS o, "
        "sum(e.est) OVER w AS total FROM (SELECT u.l, coalesce(({est}::jsonb ->> u.l)::float8, "
        "{unlisted}::float8) AS est FROM unnest((SELECT lexemes FROM ql)) AS u(l)) e "
        "WINDOW w AS (ORDER BY e.est, e.l COLLATE \"C\" ROWS UNBOUNDED PRECEDING)) s "
        "WHERE s.o = 1 OR s.total <= {cap})"
    ).format(est=Literal(budget.estimates), unlisted=Literal(float(budget.unlisted)),
             cap=Literal(int(cap)))
