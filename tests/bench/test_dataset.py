"""Validation of the AskMyDocs queries file (pure: no database)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kb_retriever.bench import load_queries, parse_queries
from kb_retriever.errors import InputError

ROOT = Path(__file__).resolve().parents[2]


def _one(**fields):
    return {"queries": [{"id": "q1", "query": "where is it?", **fields}]}


def test_example_file_loads():
    queries = load_queries(ROOT / "examples" / "benchmark" / "queries.yaml")
    assert len(queries) == 57
    q01 = queries[0]
    assert q01.id == "q01-route-engine-choice"
    assert q01.relevance["dec-routing-engine-v2"] == 3
    assert q01.expect_related == ("mod-route-planner",)
    assert q01.expect_answer == "OR-Tools"
    assert sum(q.expect_refusal for q in queries) == 7


def test_defaults_and_relevant_set():
    (q,) = parse_queries(_one(relevance={"a": 3, "b": 0}, expect_related="a"))
    assert q.relevant == {"a"}
    assert q.expect_related == ("a",)  # a single key reads as a one-item list
    assert q.expect_refusal is False and q.expect_citation is None


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"queries": [{"query": "x"}]}, "'id' is missing"),
        ({"queries": [{"id": "q1"}]}, "'query' is missing"),
        ({"queries": [{"id": "q1", "query": "   "}]}, "'query' is missing"),
        (_one(relevance={"a": 4}), "grade of 'a' must be an integer 0..3, got 4"),
        (_one(relevance={"a": -1}), "must be an integer 0..3, got -1"),
        (_one(relevance={"a": 2.5}), "must be an integer 0..3"),
        (_one(relevance={"a": True}), "must be an integer 0..3"),
        (_one(relevance=["a"]), "'relevance' must be a mapping"),
        (_one(expect_citaton="a"), "unknown key(s) expect_citaton"),
        (_one(expect_refusal="yes"), "'expect_refusal' must be true or false"),
        (_one(expect_related={"a": 1}), "'expect_related' must be a list"),
        ({"queries": []}, "is empty"),
        ({"items": []}, "top-level 'queries:' list"),
        ([1, 2], "top-level 'queries:' list"),
        ({"queries": ["just a string"]}, "expected a mapping"),
        ({"queries": [{"id": "q", "query": "a"}, {"id": "q", "query": "b"}]}, "duplicate"),
    ],
)
def test_malformed_files_raise_input_error(data, message):
    with pytest.raises(InputError) as err:
        parse_queries(data)
    assert message in str(err.value)


def test_error_names_the_query(tmp_path):
    path = tmp_path / "q.yaml"
    path.write_text("queries:\n  - id: ok\n    query: fine\n  - id: bad-one\n    query: x\n"
                    "    relevance: {doc: 7}\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"query #2 \(bad-one\)"):
        load_queries(path)


def test_unreadable_or_invalid_yaml(tmp_path):
    with pytest.raises(InputError, match="cannot read"):
        load_queries(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("queries: [unclosed", encoding="utf-8")
    with pytest.raises(InputError, match="not valid YAML"):
        load_queries(bad)


def test_a_key_given_twice_is_an_error_not_a_dropped_label(tmp_path: Path) -> None:
    """``yaml.safe_load`` keeps the last of two keys: a second ``relevance:`` block dropped
    the first one's labels, and ``a`` and ``a `` merged, the last grade winning."""
    twice = tmp_path / "twice.yaml"
    twice.write_text("queries:\n  - id: q1\n    query: x\n    relevance:\n      oauth: 1\n"
                     "    relevance:\n      key-rotation: 3\n", encoding="utf-8")
    with pytest.raises(InputError, match="twice"):
        load_queries(twice)
    spaced = tmp_path / "spaced.yaml"
    spaced.write_text('queries:\n  - id: q1\n    query: x\n    relevance:\n      a: 3\n'
                      '      "a ": 1\n', encoding="utf-8")
    with pytest.raises(InputError, match="twice"):
        load_queries(spaced)
