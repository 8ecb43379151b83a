"""The full-text leg chooses its OR lexemes in the statement (store.fulltext.tsvector.lexeme_selection_sql):
on a real PostgreSQL, the same lexemes in the same order as CorpusLexemes.select, whatever the
text, the statistics, the ties between estimates and the characters of the lexemes."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg import sql

from kb_retriever import HashingEmbedder, Settings
from kb_retriever.ranking.bm25 import CorpusLexemes
from kb_retriever.store.fulltext import tsvector as fts
from kb_retriever.store.reader import SearchSession

from ..unit.lexeme_oracle import select_lexemes

pytestmark = pytest.mark.db

TRICKY = [
    "How do we rotate the OAuth keys?",
    "foo-bar-baz state-of-the-art re-indexing",
    "mail ops@example.com or see https://example.com/a/b?x=1#frag",
    "C++ and C# vs. F#; AT&T, U.S.A., e.g. i.e.",
    "v1.2.3 3.14 -42 1e10 0x1F 2026-11-30 10:30:00",
    "café naïve Straße ÆSIR 東京 مرحبا Zebra zebra Éclair eclair",
    "don't won't it's O'Reilly rock'n'roll",
    "the and of a an to is",
    "",
]


@pytest.fixture(scope="module")
def conn(pg_server_url: str):
    with psycopg.connect(pg_server_url, autocommit=True) as c:
        yield c


def _lexemes(conn: psycopg.Connection[Any], text: str) -> list[str]:
    row = conn.execute("SELECT tsvector_to_array(to_tsvector('english', %s))", [text]).fetchone()
    assert row is not None
    return list(row[0])


def _chosen(conn: psycopg.Connection[Any], text: str, corpus: CorpusLexemes, cap: int
            ) -> list[str]:
    estimates = corpus.estimates
    budget = fts.LexemeBudget(*estimates) if estimates else None
    stmt = sql.SQL("WITH {ql}, {sel} SELECT coalesce(array_agg(l ORDER BY o), '{{}}') FROM sel"
                   ).format(ql=fts.QUERY_LEXEMES, sel=fts.lexeme_selection_sql(budget, cap))
    row = conn.execute(stmt, {"fts_lang": "english", "fts_text": text}).fetchone()
    assert row is not None
    return list(row[0])


def _corpus(lexemes: list[str], freqs: list[float], rows: float, min_freq: float | None
            ) -> CorpusLexemes:
    """Statistics listing ``lexemes`` (plus some the text lacks) with ``freqs``, as
    pg_stats would give them (float4 fractions)."""
    listed = [*lexemes, "zzunrelated", "ändern", "ok"]
    fracs = [float(__import__("numpy").float32(f)) for f in (freqs * len(listed))[:len(listed)]]
    row = {"reltuples": rows, "elems": listed,
           "freqs": [*fracs, *([min_freq, max(fracs), 0.0] if min_freq is not None else [])]}
    return CorpusLexemes.from_row(row)


@pytest.mark.parametrize("text", TRICKY)
@pytest.mark.parametrize("cap", [1, 40, 300])
def test_the_statement_chooses_as_python_does(conn, text, cap):
    lexemes = _lexemes(conn, text)
    # every other lexeme listed, with tied frequencies, so order and budget both matter
    corpus = _corpus(lexemes[::2], [0.01, 0.3, 0.01, 0.05], 1234.0, 0.002)
    assert _chosen(conn, text, corpus, cap) == select_lexemes(corpus, lexemes, budget=cap)
    # no statistics (a table never analysed): every lexeme, in the statement's order
    assert _chosen(conn, text, CorpusLexemes(), cap) == select_lexemes(CorpusLexemes(), lexemes,
                                                                               budget=cap)
    assert _chosen(conn, text, CorpusLexemes(), cap) == lexemes


def test_a_lexeme_that_fills_the_budget_exactly_is_kept(conn):
    text = "rotate keys often"
    lexemes = _lexemes(conn, text)
    corpus = _corpus(lexemes, [0.25], 20.0, 0.001)  # 5 chunks each: 5 + 5 = 10, then 15
    assert _chosen(conn, text, corpus, 10) == select_lexemes(corpus, lexemes, budget=10) == lexemes[:2]
    assert _chosen(conn, text, corpus, 9) == select_lexemes(corpus, lexemes, budget=9) == lexemes[:1]


_WORDS = st.sampled_from([
    "rotate", "rotating", "keys", "key", "oauth", "cache", "caching", "queue", "the", "café",
    "cafe", "東京", "Zebra", "zebra", "éclair", "eclair", "x1", "a-b", "ops@example.com", "3.14",
])


@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(words=st.lists(_WORDS, max_size=8), listed=st.lists(st.booleans(), min_size=8,
                                                               max_size=8),
       freqs=st.lists(st.sampled_from([0.001, 0.004, 0.01, 0.01, 0.2, 0.25, 0.5, 0.9]), min_size=1,
                      max_size=6),
       rows=st.sampled_from([10.0, 20.0, 40.0, 997.0, 12345.0, 1e6]),
       cap=st.sampled_from([1, 5, 10, 20, 50, 300]))  # 20 x 0.5 = 10: totals that hit the cap
def test_any_query_and_statistics_choose_alike(conn, words, listed, freqs, rows, cap):
    text = " ".join(words)
    lexemes = _lexemes(conn, text)
    corpus = _corpus([lex for lex, on in zip(lexemes, listed, strict=False) if on], freqs,
                     rows, 0.001)
    assert _chosen(conn, text, corpus, cap) == select_lexemes(corpus, lexemes, budget=cap)


def test_searches_use_the_statistics_in_their_full_text_leg(make_kb, tmp_path, monkeypatch):
    """A search's full-text leg carries the cached statistics (one prepared statement per
    scope and statistics), and a query of only common words keeps its least common one."""
    root = tmp_path / "kb"
    root.mkdir()
    for i in range(40):
        extra = " zymurgy" if i == 7 else ""
        (root / f"n{i}.md").write_text(f"# Note {i}\n\nqueue retry backoff{extra} {i}\n")
    kb = make_kb(embedder=HashingEmbedder(64), settings=Settings(fts_match_cap=10))
    kb.ingest([root])
    seen: list[Any] = []
    fetch = SearchSession._fetch

    def spy(session, req, held):
        if req.stage in ("keyword_leg", "hybrid_legs"):  # the leg alone or in one statement
            seen.append(req.query.as_string(held[0]) if held else req.query.as_string(None))
        return fetch(session, req, held)

    monkeypatch.setattr(SearchSession, "_fetch", spy)
    hits = kb.search("queue retry zymurgy", limit=3).primary
    assert seen and '"queue": ' in seen[0] and "sel AS" in seen[0]
    assert hits[0].document.doc_key == "n7"  # the rare word alone fits the budget of 10


def test_a_lexeme_tells_the_cap_is_reached_only_where_the_query_holds_it_as_itself(conn):
    """The one statement may take the matches to reach the cap from a lexeme's chunk count
    (``cap_reached_sql``, decision 0017) only when every chunk holding the lexeme matches the
    OR query: the query re-parses each lexeme (``foo-bar-baz`` becomes a phrase of four), so
    one that does not come back as itself does not tell."""
    lexemes = sorted({lexeme for text in TRICKY for lexeme in _lexemes(conn, text)})
    reached = fts.cap_reached_sql(
        lambda array: sql.SQL("(SELECT u AS lexeme, 1000 AS chunks FROM unnest({}) AS u)"
                              ).format(array), sql.Literal(300))
    told = {}
    for lexeme in lexemes:
        row = conn.execute(sql.SQL(
            "WITH sel AS (SELECT %(l)s::text AS l, 1 AS o, 1000::float8 AS est) SELECT {}, "
            "array_to_tsvector(ARRAY[%(l)s::text]) @@ to_tsquery('simple', quote_literal(%(l)s::text))"
        ).format(reached), {"l": lexeme}).fetchone()
        assert row is not None
        told[lexeme], matched = row
        assert matched or not told[lexeme], lexeme
    assert not told["foo-bar-baz"] and told["rotat"] and told["東京"]
