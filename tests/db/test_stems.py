"""Query words stemmed once per knowledge base (ranking/stems.py), on a real PostgreSQL: the
union of the words' lexemes is exactly the lexemes of the whole text, and a repeated word costs
no round trip."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kb_retriever import HashingEmbedder, Settings
from kb_retriever.ranking.stems import StemCache, union_of, words_of
from kb_retriever.store import sql as q

pytestmark = pytest.mark.db

TRICKY = [
    "How do we rotate the OAuth keys?",
    "foo-bar-baz state-of-the-art re-indexing",
    "mail ops@example.com or see https://example.com/a/b?x=1#frag",
    "C++ and C# vs. F#; AT&T, U.S.A., e.g. i.e.",
    "v1.2.3 3.14 -42 1e10 0x1F 2026-11-30 10:30:00",
    "/usr/local/bin/kb-retriever --flag=value ~/notes.md",
    "café naïve Straße ÆSIR 東京 مرحبا",
    "don't won't it's O'Reilly rock'n'roll",
    "#hashtag @mention [[wikilink]] `code_span` snake_case CamelCase",
    "the and of a an to is  \t\n tabs\u00a0nbsp\u2003emspace",
    "<b>html</b> &amp; entities &lt;tag&gt; x<y z>w",
    "postgres:5432 host.example.com:8080/path",
    "",
]


def _whole(conn: psycopg.Connection[Any], text: str) -> list[str]:
    row = conn.execute("SELECT tsvector_to_array(to_tsvector('english', %s))", [text]).fetchone()
    assert row is not None
    return list(row[0])


def _by_words(conn: psycopg.Connection[Any], text: str) -> list[str]:
    words = words_of(text)
    if not words:
        return []
    with conn.cursor(row_factory=psycopg.rows.dict_row) as cur:
        cur.execute(q.stem_sql(), {"fts_lang": "english", "words": words})
        rows = cur.fetchall()
    assert [r["word"] for r in rows] == words
    return union_of({r["word"]: r["lexemes"] for r in rows})


@pytest.fixture(scope="module")
def conn(pg_server_url: str):
    with psycopg.connect(pg_server_url, autocommit=True) as c:
        yield c


@pytest.mark.parametrize("text", TRICKY)
def test_the_words_lexemes_are_the_whole_texts_lexemes(conn, text):
    assert _by_words(conn, text) == _whole(conn, text)


_PIECES = st.sampled_from([
    "rotate", "keys", "the", "foo-bar", "a.b", "x@y.z", "http://h.io/p", "3.14", "C++", "'s",
    "café", "東京", "-", "/", ":", ".", "&", "#", "<b>", "</b>", "\u00a0", "\u2003", "_", "'",
    "~", "=", '"', ">", "<", "!--", "&amp;", " ", "\t", "\n", "--", "+", "@", "?", "%", "$",
])
_TEXTS = st.lists(st.one_of(_PIECES, st.text(max_size=4)), max_size=12).map(
    lambda parts: "".join(parts)).filter(lambda t: "\x00" not in t)


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=_TEXTS)
def test_any_texts_lexemes_are_its_words_lexemes(conn, text):
    assert _by_words(conn, text) == _whole(conn, text)


def test_a_word_is_stemmed_once_per_knowledge_base(make_kb, tmp_path, monkeypatch):
    (tmp_path / "kb").mkdir()
    (tmp_path / "kb" / "a.md").write_text("# Keys\n\nWe rotate the signing keys every month.\n")
    kb = make_kb(embedder=HashingEmbedder(64))
    kb.ingest([tmp_path / "kb"])
    stemmed: list[list[str]] = []  # the words of each stemming read
    fetch = kb._fetch

    def spy(req, held):
        if req.stage == "stem":
            stemmed.append(req.params["words"])
        return fetch(req, held)

    monkeypatch.setattr(kb, "_fetch", spy)
    first = kb.search("rotating keys")
    again = kb.search("rotating   keys")  # the same words: no stemming read
    more = kb.search("rotating keys monthly")  # one new word: one read, of that word alone
    assert stemmed == [["rotating", " keys"], [" monthly"]]
    assert first.meta["lexeme_stats"]["freqs"].keys() == {"key", "rotat"}
    assert again.meta["lexeme_stats"] == first.meta["lexeme_stats"]
    assert set(more.meta["lexeme_stats"]["freqs"]) == {"key", "rotat", "month"}
    assert [h.chunk_id for h in again.primary] == [h.chunk_id for h in first.primary]

    kb.clear_caches()
    kb.search("rotating keys")
    assert stemmed[-1] == ["rotating", " keys"]


def test_the_cache_is_bounded():
    stems = StemCache(max_words=3)
    for i in range(10):
        stems.add("english", [{"word": f"w{i}", "lexemes": [f"w{i}"]}])
    assert len(stems) == 3
    assert stems.lookup("english", ["w9", "w0"]) == ({"w9": ("w9",)}, ["w0"])
    assert stems.lookup("simple", ["w9"]) == ({}, ["w9"])  # per text-search configuration


def test_an_uncached_plan_still_stems(make_kb, tmp_path):
    """search_plan without a cache (a framework driving the plan itself) stems every search."""
    from kb_retriever.filters import parse_filters
    from kb_retriever.pipeline import SearchRequest, run_plan, search_plan

    kb = make_kb(embedder=HashingEmbedder(64), settings=Settings())
    (tmp_path / "kb").mkdir()
    (tmp_path / "kb" / "a.md").write_text("# Keys\n\nWe rotate the signing keys.\n")
    kb.ingest([tmp_path / "kb"])
    req = SearchRequest(query="rotating keys", scope=q.Scope("default", ("default",)), limit=3,
                        filters=parse_filters(None))
    stages: list[str] = []
    held: list[Any] = []

    def fetch(r):
        stages.append(r.stage)
        return kb._fetch(r, held)

    try:
        for _ in range(2):
            result = run_plan(search_plan(req, kb.settings), fetch, kb._embed)
            assert result.primary
    finally:
        kb._release(held)
    assert stages.count("stem") == 2
