from __future__ import annotations

from kb_retriever.ranking import expand_query_text, expansion_phrases
from kb_retriever.ranking.synonyms import normalize_groups

GROUPS = [["Kubernetes", "k8s", "kube"], ["pull request", "PR", "merge request"]]


def test_mentioned_group_expands_to_other_members() -> None:
    assert expansion_phrases("How do we scale k8s pods?", GROUPS) == ["kubernetes", "kube"]


def test_members_already_mentioned_are_excluded() -> None:
    assert expansion_phrases("kube and k8s", GROUPS) == ["kubernetes"]


def test_phrase_boundaries_are_letters_and_digits() -> None:
    assert expansion_phrases("k8sx is not k8s", GROUPS) == ["kubernetes", "kube"]
    assert expansion_phrases("k8sx only", GROUPS) == []
    assert expansion_phrases("mk8s only", GROUPS) == []
    assert expansion_phrases("(k8s)", GROUPS) == ["kubernetes", "kube"]
    assert expansion_phrases("k8s_cluster", GROUPS) == ["kubernetes", "kube"]  # "_" is a boundary


def test_multiword_phrase_and_whitespace_normalisation() -> None:
    assert expansion_phrases("open a  Pull\tRequest", GROUPS) == ["pr", "merge request"]


def test_unicode_boundaries() -> None:
    groups = [["perché", "motivo"]]
    assert expansion_phrases("Perché?", groups) == ["motivo"]
    assert expansion_phrases("perchéx", groups) == []


def test_several_groups_in_group_order_deduped() -> None:
    groups = [["db", "database"], ["database", "datastore"], ["db", "rdbms"]]
    assert expansion_phrases("which db", groups) == ["database", "rdbms"]
    assert expansion_phrases("which db and database", groups) == ["datastore", "rdbms"]


def test_normalize_groups_drops_small_and_empty() -> None:
    assert normalize_groups([["A", " a ", ""], ["x", "y"], []]) == [["x", "y"]]


def test_punctuation_is_literal() -> None:
    assert expansion_phrases("c++ rocks", [["c++", "cpp"]]) == ["cpp"]


def test_no_match_and_empty_query() -> None:
    assert expansion_phrases("nothing here", GROUPS) == []
    assert expansion_phrases("   ", GROUPS) == []


def test_expand_query_text() -> None:
    assert expand_query_text("k8s rollout", GROUPS) == "k8s rollout kubernetes kube"
    assert expand_query_text("  Verbatim  Query ", GROUPS) == "  Verbatim  Query "
    assert expand_query_text(" k8s ", GROUPS) == "k8s  kubernetes kube"
