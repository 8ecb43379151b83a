"""SQL builders, tested by rendering (no database)."""

from __future__ import annotations

import pytest
from psycopg import sql

from kb_retriever.errors import FilterError
from kb_retriever.filters import parse_filters
from kb_retriever.store import sql as q


def render(composable: sql.Composable) -> str:
    return composable.as_string(None)


def test_candidates_hybrid_is_one_statement_with_both_legs():
    stmt, params = q.candidates_sql(hybrid=True, fts_mode="or", n_phrases=0,
                                    filters=parse_filters(None), with_doc_ids=False)
    text = render(stmt)
    assert text.startswith("WITH vec AS MATERIALIZED") and ";" not in text  # one statement
    # stemmed beforehand (stem_sql), statistics cached: both come in as parameters
    assert "to_tsvector(" not in text and "pg_stats" not in text
    assert "%(fts_lexemes)s" in text and "%(query_lexemes)s" in text
    assert "vec AS MATERIALIZED" in text and "fts_m AS MATERIALIZED" in text
    assert "ORDER BY dist LIMIT %(kc)s" in text  # bare distance operator: HNSW usable
    assert "FULL OUTER JOIN" in text
    assert "1 - (c.embedding <=> %(qvec)s) AS similarity" in text  # true cosine for every row
    assert "JOIN kb_documents d ON" in text  # only in the final join when no filters
    assert text.count("JOIN kb_documents d") == 1
    assert params == {}


def test_semantic_only_has_no_fts():
    stmt, _ = q.candidates_sql(hybrid=False, fts_mode="or", n_phrases=0,
                               filters=parse_filters(None), with_doc_ids=False)
    text = render(stmt)
    assert "fts_m" not in text and "@@" not in text  # no FTS leg (lexeme counts still read)


@pytest.mark.parametrize("mode, needle", [
    ("or", "%(fts_lexemes)s"), ("websearch", "websearch_to_tsquery"), ("plain", "plainto_tsquery"),
])
def test_tsquery_modes(mode, needle):
    assert needle in render(q.tsquery_sql(mode, 0))


def test_synonym_phrases_are_bound_parameters():
    text = render(q.tsquery_sql("plain", 2))
    assert "%(phrase0)s" in text and "%(phrase1)s" in text


def test_filters_are_bound_parameters_in_both_legs():
    hostile = "x'; DROP TABLE kb_chunks; --"
    filters = parse_filters({"tags": [hostile], "folder_globs": ["hr/**"],
                             "metadata": {"team": {"$in": [hostile, 3]}, "level": {"$gte": 2}}})
    stmt, params = q.candidates_sql(hybrid=True, fts_mode="or", n_phrases=0, filters=filters,
                                    with_doc_ids=False)
    text = render(stmt)
    assert hostile not in text and "DROP TABLE" not in text
    assert params["f_tags"] == [hostile]
    assert text.count("d.tags && %(f_tags)s::text[]") == 2  # vector leg and FTS leg
    assert params["f_globs"] == ["^hr/.*$"] or params["f_globs"][0].startswith("^hr/")
    assert params["mk0"] == "team" and params["mv0"] == ['"x\'; DROP TABLE kb_chunks; --"', "3"]


def test_unknown_filter_key_lists_valid_keys():
    with pytest.raises(FilterError, match="valid: source_types"):
        parse_filters({"colour": ["red"]})


def test_bad_metadata_operator_and_key():
    with pytest.raises(FilterError, match=r"\$regex"):
        parse_filters({"metadata": {"a": {"$regex": "x"}}})
    with pytest.raises(FilterError, match="invalid"):
        parse_filters({"metadata": {"a b": 1}})


def test_rejected_and_neighbour_queries_are_scoped():
    rej = render(q.rejected_chunks_sql())
    assert "d.tenant_id = %(tenant)s" in rej and "d.project_key = ANY(%(projects)s)" in rej
    assert "c.text" in rej and "c.embedding" in rej  # whole rows: no second read per search
    nb, _ = q.neighbours_sql(direction="both", filters=parse_filters(None))
    text = render(nb)
    assert "'outgoing'" in text and "'incoming'" in text
    assert text.count("e.tenant_id = %(tenant)s") == 2
    assert "d.tenant_id = %(tenant)s" in text
