"""PostgreSQL's own full text, the engine in use: a generated ``tsvector`` column per chunk
(each chunk stemmed by its language's configuration) with a GIN index; the query stemmed by the
statement itself (CTE ``ql``); OR queries of the rarest lexemes within a match cap (CTE
``sel``); ``ts_rank`` over the capped matches; each candidate's counts of the query's lexemes
for BM25 (``ranking/bm25.py``); and the lexemes of a chunk for the scope statistics
(``store/stats.py``). Nothing here executes.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from psycopg import sql

from ..literal import Literal

__all__ = ["MATCH_COUNT", "QUERY_LEXEMES", "TSVECTOR", "LexemeBudget", "LexemeChunks", "Tsvector",
           "cap_reached_sql", "lexeme_selection_sql", "query_lexemes_sql", "term_counts", "tsquery_sql"]


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


#: A relation (``lexeme``, ``chunks``) of the scope's chunks holding each lexeme of an array
#: expression (``store.stats.lexeme_chunks`` for one scope).
LexemeChunks = Callable[[sql.Composable], sql.Composable]


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
    their order (``o``) with their estimated chunks (``est``; NULL without statistics):
    rarest first while their estimated matches fit ``cap``, at least the rarest one, every
    lexeme without statistics (tests/unit/lexeme_oracle.py is the Python oracle the tests
    compare it with).

    The full-text leg ranks at most ``cap`` matches, taken in table order, so a frequent
    lexeme would fill that sample with weak matches and push out the chunks that hold the
    rare, telling ones. So: rarest first (estimated chunks, then the lexeme bytewise: the
    ``sorted`` of Python), while the running total of estimates stays within ``cap``, and at
    least the rarest. The same doubles in the same order as in Python, so the same choice
    (``tests/db/test_lexeme_selection.py``). Without statistics every lexeme is kept, in
    ``ql``'s order. Choosing here spares the search a round trip to stem the query first.
    """
    if budget is None:
        return sql.SQL("sel AS (SELECT u.l, u.o, NULL::float8 AS est FROM "
                       "unnest((SELECT lexemes FROM ql)) WITH ORDINALITY AS u(l, o))")
    return sql.SQL(
        "sel AS (SELECT s.l, s.o, s.est FROM (SELECT e.l, e.est, row_number() OVER w AS o, "
        "sum(e.est) OVER w AS total FROM (SELECT u.l, coalesce(({est}::jsonb ->> u.l)::float8, "
        "{unlisted}::float8) AS est FROM unnest((SELECT lexemes FROM ql)) AS u(l)) e "
        "WINDOW w AS (ORDER BY e.est, e.l COLLATE \"C\" ROWS UNBOUNDED PRECEDING)) s "
        "WHERE s.o = 1 OR s.total <= {cap})"
    ).format(est=Literal(budget.estimates), unlisted=Literal(float(budget.unlisted)),
             cap=Literal(int(cap)))


def tsv_expression(default: str, configs: Mapping[str, str]) -> sql.Composed:
    """The tsv column's expression: each chunk's text stemmed by the configuration of its
    language (``kb_chunks.fts_lang``, written with the chunk) in ``configs`` (language code ->
    configuration), ``default`` for the others. A CASE of literals is immutable, as a
    generated column needs, and needs no trigger or function (Citus distributes the table as
    it is)."""
    cases = sql.SQL(" ").join(
        sql.SQL("WHEN {} THEN {}::regconfig").format(sql.Literal(code), sql.Literal(config))
        for code, config in configs.items())
    return sql.SQL("to_tsvector(CASE fts_lang {cases} ELSE {default}::regconfig END, "
                   "search_prefix || ' ' || text)").format(cases=cases,
                                                           default=sql.Literal(default))


# The leg ranks up to KB_FTS_MATCH_CAP tsvectors per search: they are kept in the heap row
# (compressed if need be) so ranking does not fetch each one from TOAST; the body text goes out
# of line instead, and is read only for the few dozen rows a search returns. (Keeping the whole
# row inline, toast_tuple_target 4080, made the filtered vector leg slower: wider rows.)
_INDEX = sql.SQL("CREATE INDEX IF NOT EXISTS kb_chunks_tsv_ix ON kb_chunks USING gin (tsv)")

#: The full-text leg's matches (before its ranking's cut), from CTE ``fts_n`` of
#: :meth:`Tsvector.matches`: the leg's count, the pool's and the rank skip's, read once.
MATCH_COUNT = sql.SQL("(SELECT n FROM fts_n)")

# A candidate's full-text evidence: its tsvector cut down to the query's lexemes (setweight +
# ts_filter, in C), sent as text, and its lexeme count: the BM25 inputs. The cut tsvector holds
# a lexeme's positions, so its count is read in Python (term_counts); unnesting it into arrays
# in SQL cost the server more per candidate than the whole cut (decision 0017). The query's
# lexemes are the statement's own (CTE ql, computed once).
_EVIDENCE_COLUMNS = sql.SQL(
    "coalesce(ts_filter(setweight(c.tsv, 'A', (SELECT lexemes FROM ql)), '{a}')::text, '') AS tf, "
    "length(c.tsv) AS lexeme_count")

# A lexeme of tsvector's text form: quoted (a quote inside doubled, a backslash doubled), then
# its positions after a colon (comma-separated, each maybe with a weight letter), if any.
_ENTRY = re.compile(r"'((?:[^']|'')*)'(?::(\S+))?")


def term_counts(evidence: str) -> dict[str, int]:
    """The lexemes of a tsvector's text form with their counts (positions; 1 for a lexeme
    stored without them, as ``strip`` leaves it).

    >>> term_counts("'cach':1A,7A 'it''s':3A 'redi'")
    {'cach': 2, "it's": 1, 'redi': 1}
    >>> term_counts("")
    {}
    """
    counts: dict[str, int] = {}
    for quoted, positions in _ENTRY.findall(evidence):
        lexeme = quoted.replace("''", "'").replace("\\\\", "\\")
        counts[lexeme] = positions.count(",") + 1 if positions else 1
    return counts


def cap_reached_sql(counts: LexemeChunks, cap: sql.Composable) -> sql.Composed:
    """Whether the OR query's matches reach ``cap``, known without reading them: a lexeme of
    CTE ``sel`` in ``cap`` chunks of the scope or more (``counts``) that the query holds as
    itself (``to_tsquery('simple', ...)`` re-parses a lexeme: ``foo-bar`` becomes the phrase
    ``'foo-bar' <-> 'foo' <-> 'bar'``, whose matches differ). Every chunk holding it matches,
    so the first ``cap`` matches are ``cap``. Only lexemes whose estimate reaches ``cap`` are
    looked up (a search that none can tell about reads no count)."""
    return sql.SQL(
        "EXISTS (SELECT 1 FROM sel WHERE est >= {cap}) AND EXISTS (SELECT 1 FROM sel "
        "JOIN {counts} k ON k.lexeme = sel.l WHERE k.chunks >= {cap} "
        "AND to_tsquery('simple', quote_literal(sel.l))::text = quote_literal(sel.l))"
    ).format(counts=counts(sql.SQL("ARRAY(SELECT l FROM sel WHERE est >= {})").format(cap)),
             cap=cap)


class Tsvector:
    """PostgreSQL's tsvector full text as the store's :class:`~kb_retriever.store.fulltext.
    FullText` (module docstring)."""

    name = "tsvector"

    #: The tsv column kept in the heap row (the comment above ``_INDEX``).
    storage: Mapping[str, str] = MappingProxyType({"tsv": "MAIN"})

    def ddl(self, default_language: str,
            configs: Mapping[str, str]) -> list[sql.Composed | sql.SQL]:
        expression = tsv_expression(default_language, configs)
        return [sql.SQL("ALTER TABLE kb_chunks ADD COLUMN IF NOT EXISTS tsv tsvector "
                        "GENERATED ALWAYS AS ({}) STORED").format(expression), _INDEX]

    def query_lexemes(self, configs: tuple[str, ...]) -> sql.Composable:
        return query_lexemes_sql(configs)

    def matches(self, *, mode: str, n_phrases: int, budget: LexemeBudget | None, cap: int,
                kc: sql.Composable, cap_literal: sql.Composable, join: sql.Composable,
                scope: sql.Composable, filt: sql.Composable,
                filled: sql.Composable | None = None,
                counts: LexemeChunks | None = None) -> sql.Composable:
        """CTEs ``fts_m`` (the first ``cap`` matches in the scope, with the filters) and
        ``fts`` (the best ``kc`` of them by ``ts_rank(tsv, q, 1)``: ``id``, ``fts_rank``,
        ``fts_score``), after CTE ``q`` (the tsquery) and, in ``or`` mode, CTE ``sel``.
        ``filled`` (a boolean: the other leg fills the pool): when it holds and the matches
        reach the cap, ``fts`` ranks none of them. CTE ``fts_n`` counts the matches once
        (:data:`MATCH_COUNT` reads it); in ``or`` mode with ``counts`` (the scope's chunks
        holding each lexeme, for a leg without filters) it reads no match when one lexeme the
        query ORs is in ``cap`` chunks or more (:func:`cap_reached_sql`)."""
        unranked: sql.Composable = sql.SQL("")
        if filled is not None:
            unranked = sql.SQL("WHERE NOT ({} AND {} >= {}) ").format(
                filled, MATCH_COUNT, cap_literal)
        count: sql.Composable = sql.SQL("count(*) AS n FROM fts_m")
        if mode == "or" and counts is not None:
            count = sql.SQL("CASE WHEN {} THEN {} ELSE (SELECT count(*) FROM fts_m) END AS n").format(
                cap_reached_sql(counts, cap_literal), cap_literal)
        return sql.SQL(
            "{sel}q AS (SELECT {tsq} AS query), "
            "fts_m AS MATERIALIZED (SELECT c.id, c.tsv FROM kb_chunks c {join}, q "
            "WHERE c.tsv @@ q.query AND {scope}{filt} LIMIT {cap}), "
            "fts_n AS (SELECT {count}), "
            "fts AS (SELECT m.id, row_number() OVER (ORDER BY ts_rank(m.tsv, q.query, 1) DESC, "
            "m.id) AS fts_rank, ts_rank(m.tsv, q.query, 1) AS fts_score "
            "FROM fts_m m, q {unranked}ORDER BY fts_rank LIMIT {kc})"
        ).format(tsq=tsquery_sql(mode, n_phrases), join=join, scope=scope, filt=filt,
                 cap=cap_literal, kc=kc, unranked=unranked, count=count,
                 sel=lexeme_selection_sql(budget, cap) + sql.SQL(", ")
                 if mode == "or" else sql.SQL(""))

    def evidence_columns(self) -> sql.Composable:
        return _EVIDENCE_COLUMNS

    def term_counts(self, evidence: Any) -> Mapping[str, int]:
        return term_counts(evidence)

    def lexemes(self, row: str) -> sql.Composable:
        """A set-returning expression of the lexemes of the chunk row aliased ``row`` (its
        column ``lexeme``), for the statistics log; the row must carry ``tsv``."""
        return sql.SQL("unnest({}.tsv)").format(sql.Identifier(row))

    @property
    def carried(self) -> sql.Composable:
        """The column a statement must return of deleted chunks for :meth:`lexemes`."""
        return sql.SQL("tsv")


#: The engine in use.
TSVECTOR = Tsvector()
