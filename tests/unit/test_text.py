from __future__ import annotations

import pytest

from kb_retriever.ranking.text import STOP_WORDS, keyword_score, query_tags, tokenize_query


class TestTokenizeQuery:
    def test_lowercases_and_splits_on_punctuation(self) -> None:
        assert tokenize_query("OAuth-2 token's REFRESH!") == ["oauth", "token", "refresh"]

    def test_drops_italian_and_english_stop_words(self) -> None:
        assert tokenize_query("come il OAuth") == ["oauth"]
        assert tokenize_query("what is the status of the deploy") == ["status", "deploy"]

    def test_drops_single_characters(self) -> None:
        assert tokenize_query("a b c x1 y") == ["x1"]

    def test_keeps_duplicates(self) -> None:
        assert tokenize_query("cache cache") == ["cache", "cache"]

    def test_stop_words_only_gives_nothing(self) -> None:
        assert tokenize_query("what is the") == []
        assert tokenize_query("  ?!  ") == []

    def test_unicode_letters_and_digits_are_word_characters(self) -> None:
        # "l" and "è" go: single characters, like every token of length <= 1.
        assert tokenize_query("Perché l'integrazione è lenta? 東京 ２０２４") == [
            "perché",
            "integrazione",
            "lenta",
            "東京",
            "２０２４",
        ]

    def test_decomposed_accents_do_not_split_words(self) -> None:
        assert tokenize_query("perche\u0301") == ["perché"]

    def test_underscore_is_a_separator(self) -> None:
        assert tokenize_query("rate_limit") == ["rate", "limit"]

    def test_stop_word_list_matches_reference(self) -> None:
        assert {"il", "sugli", "the", "when", "which"} <= STOP_WORDS
        assert "why" not in STOP_WORDS  # only the tag extractor drops "why"


class TestKeywordScore:
    def test_whole_word_match_is_one(self) -> None:
        assert keyword_score(["oauth"], "Configuring OAuth for the API") == 1.0

    def test_stop_words_ignored_reference_case(self) -> None:
        assert keyword_score(tokenize_query("come il OAuth"), "OAuth flow") == 1.0

    def test_prefix_of_word_scores_half(self) -> None:
        assert keyword_score(["deploy"], "the deployment pipeline") == 0.5

    def test_short_prefix_does_not_match(self) -> None:
        assert keyword_score(["cat"], "category pages") == 0.0

    def test_four_char_prefix_matches(self) -> None:
        assert keyword_score(["cate"], "category pages") == 0.5

    def test_substring_inside_word_does_not_match(self) -> None:
        assert keyword_score(["ploy"], "deployment") == 0.0

    def test_mean_over_unique_tokens(self) -> None:
        assert keyword_score(["oauth", "oauth", "missing"], "oauth") == 0.5

    def test_duplicates_do_not_double_count(self) -> None:
        assert keyword_score(["oauth", "oauth"], "oauth") == keyword_score(["oauth"], "oauth")

    def test_case_insensitive_and_unicode(self) -> None:
        assert keyword_score(["perché"], "PERCHÉ no") == 1.0
        assert keyword_score(["straße"], "Die STRASSE") == 0.0  # lower(), not casefold()

    def test_empty_inputs_score_zero(self) -> None:
        assert keyword_score([], "text") == 0.0
        assert keyword_score(["x1"], "") == 0.0
        assert keyword_score(["x1"], "!!!") == 0.0

    def test_punctuation_in_text_breaks_words(self) -> None:
        assert keyword_score(["token"], "refresh-token.") == 1.0

    @pytest.mark.parametrize(
        ("tokens", "text"),
        [(["a1", "b2"], "a1 b2 a1"), (["deploy"], "deploy deployment"), (["zz"], "zz")],
    )
    def test_never_above_one(self, tokens: list[str], text: str) -> None:
        assert 0.0 <= keyword_score(tokens, text) <= 1.0


class TestQueryTags:
    def test_three_longest_words_stable(self) -> None:
        assert query_tags("Why did we pick the auth-flow for billing?") == [
            "auth-flow",
            "billing",
            "pick",
        ]

    def test_drops_short_tokens_and_why(self) -> None:
        assert query_tags("why do we go") == []

    def test_dedupes(self) -> None:
        assert query_tags("cache cache layer") == ["cache", "layer"]

    def test_equal_lengths_keep_query_order(self) -> None:
        assert query_tags("bbb aaa ccc ddd") == ["bbb", "aaa", "ccc"]

    def test_trims_edge_hyphens(self) -> None:
        assert query_tags("--verbose flag") == ["verbose", "flag"]

    def test_limit(self) -> None:
        assert query_tags("alpha beta gamma delta", limit=5) == ["alpha", "gamma", "delta", "beta"]
