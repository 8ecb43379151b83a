"""BM25 keyword signals (pure)."""

from __future__ import annotations

import math

import pytest

from kb_retriever.ranking.bm25 import CorpusLexemes, lexeme_bm25, lexeme_idf, pool_bm25

from .lexeme_oracle import select_lexemes


def test_lexeme_idf_uses_database_frequencies_then_unlisted_minimum():
    stats = {"freqs": {"error": 0.5, "quota": None}, "min_freq": 0.01}
    idf = lexeme_idf(["error", "quota"], stats, [])
    assert idf["error"] == pytest.approx(math.log(1 + (1 - 0.5 + 1e-4) / (0.5 + 1e-4)))
    # not in the most-common list: half the listed minimum, so rarer and weightier
    assert idf["quota"] == pytest.approx(math.log(1 + (1 - 0.005 + 1e-4) / (0.005 + 1e-4)))
    assert idf["quota"] > idf["error"] > 0


def test_lexeme_idf_without_statistics_falls_back_to_the_pool():
    idf = lexeme_idf(["a", "b"], None, [{"a": 1}, {"a": 2}, {"b": 1}, {}])
    assert idf["b"] > idf["a"]


def test_lexeme_bm25_saturates_and_normalises_length():
    idf = {"cache": 1.0}
    short, long_, many = lexeme_bm25([{"cache": 1}, {"cache": 1}, {"cache": 10}], [10, 100, 10],
                                     idf)
    assert short > long_  # same tf, longer document: lower
    assert many > short and many < 1.0  # more occurrences help, with saturation below the ceiling
    assert lexeme_bm25([{}], [10], idf) == [0.0]


def test_pool_bm25_rewards_rare_terms():
    scores = pool_bm25(["quota", "checkout"], ["quota checkout", "checkout", "checkout cart"])
    assert scores[0] > scores[1] >= 0 and all(0 <= s <= 1 for s in scores)


def test_rerank_uses_database_lexemes_when_present():
    from kb_retriever import Settings
    from kb_retriever.ranking import rerank

    from .factories import make_candidate

    s = Settings(keyword_scoring="bm25")
    rare = make_candidate(1, sim=0.5, text="ledger quota E_QUOTA_7731")
    common = make_candidate(2, sim=0.5, text="checkout error checkout")
    import dataclasses

    rare = dataclasses.replace(rare, lexeme_tf={"quota": 1, "7731": 1}, lexeme_count=4)
    common = dataclasses.replace(common, lexeme_tf={"checkout": 2, "error": 1}, lexeme_count=3)
    stats = {"freqs": {"checkout": 0.6, "error": 0.5, "quota": None, "7731": None},
             "min_freq": 0.05}
    hits = rerank("E_QUOTA_7731 checkout error", [common, rare], s, lexeme_stats=stats)
    assert hits[0].chunk_id == 1  # the rare identifier outweighs two common words
    assert 0 < hits[0].scores.keyword <= 1


STATS = CorpusLexemes.from_row({
    "reltuples": 100_000.0, "elems": ["deploy", "error", "servic", "the"],
    # one fraction per element, then the minimum, maximum and null fraction
    "freqs": [0.004, 0.02, 0.05, 0.6, 0.004, 0.6, 0.0],
})


def test_select_keeps_the_rarest_lexemes_within_the_match_budget():
    # unlisted 'e_quota_7731' ~ 200 chunks, deploy 400, error 2000, servic 5000, the 60000
    assert select_lexemes(STATS, ["error", "e_quota_7731", "deploy", "servic"], budget=700) == [
        "e_quota_7731", "deploy"]
    assert select_lexemes(STATS, ["error", "servic"], budget=10_000) == ["error", "servic"]


def test_select_keeps_at_least_the_least_common_lexeme():
    assert select_lexemes(STATS, ["the", "servic", "the"], budget=10) == ["servic"]
    assert select_lexemes(STATS, [], budget=10) == []


def test_select_without_statistics_keeps_every_lexeme():
    never_analysed = CorpusLexemes.from_row({"reltuples": -1.0, "elems": None, "freqs": None})
    assert select_lexemes(never_analysed, ["b", "a", "b"], budget=1) == ["b", "a"]
    assert never_analysed.for_query(["a"]) == {"freqs": {"a": None}, "min_freq": None}


def test_statistics_parse_from_the_reads_rows():
    row = {"reltuples": 10.0, "elems": ["a"], "freqs": [0.5, 0.5, 0.5, 0.0]}
    assert CorpusLexemes.from_rows([row]) == CorpusLexemes.from_row(dict(row))
    assert CorpusLexemes.from_rows([row]).freqs == {"a": 0.5}
    assert CorpusLexemes.from_rows([]) == CorpusLexemes()  # an unknown table: no statistics
