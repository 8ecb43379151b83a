"""SQL builders, tested by rendering (no database)."""

from __future__ import annotations

import pytest
from psycopg import sql

from kb_retriever.errors import FilterError
from kb_retriever.filters.dimensions import SearchFilters, parse_filters
from kb_retriever.filters.expressions import MetaCond
from kb_retriever.store import catalog_sql as catalog
from kb_retriever.store import reads
from kb_retriever.store import sql as q
from kb_retriever.store.fulltext import tsvector as fts
from kb_retriever.store.spaces import Space


def render(composable: sql.Composable) -> str:
    return composable.as_string(None)


SPACE = Space(1, "m", 384, "vector", "kb_chunks_hnsw_1", 16, 64)
SHAPE = q.LegShape(q.Scope("acme", ("api", "web"), SPACE), kc=30, min_sim=0.3, fts_cap=300)


def _legs(filters=None, shape=SHAPE, **kw):
    f = parse_filters(filters)
    vec, vp = q.vector_leg_sql(shape, filters=f, with_doc_ids=False, **kw)
    fts, fp = q.keyword_leg_sql(shape, fts_mode="or", n_phrases=0, filters=f, with_doc_ids=False)
    assert vp == fp
    return render(vec), render(fts), vp


def test_the_legs_are_two_independent_statements():
    vec, fts, params = _legs()
    for text in (vec, fts):
        assert ";" not in text  # one statement each
        assert "pg_stats" not in text  # statistics are cached by the caller
        # the BM25 term counts of every candidate, for the query's lexemes stemmed once (CTE
        # ql): nothing stemmed beforehand, so the vector leg can start at once
        assert text.count("to_tsvector(") == 1
        assert "ql AS (SELECT tsvector_to_array(to_tsvector(%(fts_lang)s::regconfig, " \
               "%(fts_text)s)) AS lexemes)" in text
        assert "setweight(c.tsv, 'A', (SELECT lexemes FROM ql))" in text
        assert text.count("JOIN kb_documents d") == 1  # only in the join back when no filters
        assert "LEFT JOIN leg_rows r ON true" in text  # the leg's count even when it is empty
    ql = "WITH ql AS (SELECT tsvector_to_array(to_tsvector(%(fts_lang)s::regconfig, " \
         "%(fts_text)s)) AS lexemes), "
    # the true cosine on every row: the vector leg's hits bring it from CTE vec (the same
    # operator on the same vectors), the full-text leg's compute it
    assert "1 - (coalesce(h.dist, c.embedding <=> %(qvec)s)) AS similarity" in vec
    assert "1 - (c.embedding <=> %(qvec)s) AS similarity" in fts
    assert vec.startswith(ql + "vec AS MATERIALIZED") and "@@" not in vec
    assert "ORDER BY dist LIMIT 30)" in vec  # bare distance operator: HNSW usable
    assert "WHERE 1 - dist >= 0.3)" in vec and "%(mention_ids)s" not in vec
    # the full-text leg chooses its OR lexemes itself (CTE sel): no statistics in SHAPE, so all
    assert fts.startswith(ql + "sel AS (SELECT u.l, u.o, NULL::float8 AS est FROM "
                          "unnest((SELECT lexemes FROM ql)) WITH ORDINALITY AS u(l, o)), "
                          "q AS (SELECT to_tsquery('simple', coalesce((SELECT "
                          "string_agg(quote_literal(l), ' | ' ORDER BY o) FROM sel), '')) "
                          "AS query)")
    assert "fts_m AS MATERIALIZED" in fts
    # the query's lexemes come back once, from the vector leg (the BM25 idf's lexemes)
    assert "(SELECT lexemes FROM ql) AS query_lexemes" in vec
    assert "AS query_lexemes" not in fts
    assert "LIMIT 300)" in fts and "<=> %(qvec)s AS dist" not in fts
    assert "LIMIT 30)" in fts
    assert params == {}


def test_both_legs_in_one_statement():
    f = parse_filters({"tags": ["x"]})
    both, params = q.hybrid_sql(SHAPE, fts_mode="or", n_phrases=0, filters=f, with_doc_ids=False)
    vec, fts, legs_params = _legs({"tags": ["x"]})
    text = render(both)
    assert params == legs_params
    assert ";" not in text and text.count("to_tsvector(") == 1  # the query stemmed once
    # each leg's CTEs as in its own statement, side by side
    assert "vec AS MATERIALIZED" in text and "fts_m AS MATERIALIZED" in text
    assert text.count("ORDER BY dist LIMIT 30)") == 1 and "LIMIT 300)" in text
    # a chunk both legs found is one row with both ranks; the candidate columns read once
    assert 'FROM "vec_r" v FULL JOIN fts f ON f.id = v.id' in text
    assert text.count("JOIN kb_chunks c ON c.tenant_id = 'acme' AND c.id = h.id") == 1
    assert '(SELECT count(*) FROM "vec") AS "n_pre_vector"' in text
    assert '(SELECT n FROM fts_n) AS "n_pre_fts"' in text
    # the full-text matches are counted once (CTE fts_n), whoever reads their number
    assert text.count("count(*) AS n FROM fts_m") == 1 and 'count(*) FROM "fts_m"' not in text
    assert "AS query_lexemes" in text and "AS foreign_projects" in text
    assert "1 - (coalesce(h.dist, c.embedding <=> %(qvec)s)) AS similarity" in text
    # the filter in both legs
    assert text.count("d.tags && %(f_tags)s::text[]") == 2
    mentioned, _ = q.hybrid_sql(SHAPE, fts_mode="or", n_phrases=0, filters=f,
                                with_doc_ids=False, with_mentions=True)
    assert 'FROM "vec_m" v FULL JOIN fts f' in render(mentioned)
    # under halfvec, CTE vec's distance is the index's: the cosine is computed anew
    half = q.LegShape(q.Scope("acme", ("api",), Space(2, "m", 3000, "halfvec", "ix", 16, 64)),
                      kc=30, min_sim=0.3, fts_cap=300)
    halved, _ = q.hybrid_sql(half, fts_mode="or", n_phrases=0, filters=f, with_doc_ids=False)
    assert "1 - (c.embedding <=> %(qvec)s) AS similarity" in render(halved)
    assert "coalesce(h.dist" not in render(halved)


def test_the_one_statement_returns_the_rerank_pool_and_reads_the_first_hop_ahead():
    """Decision 0017: only the best ``pool`` chunks by weighted RRF (literal weights and k, the
    fusion's arithmetic) fetch their columns, @mentioned ones kept; with a graph direction the
    first hop from the three likeliest seeds follows, per seed, scoped like a hop of its own."""
    import dataclasses

    f = parse_filters({"tags": ["x"]})
    pooled = dataclasses.replace(SHAPE, pool=45, weights=(0.7, 0.3), rrf_k=60)
    text = render(q.hybrid_sql(pooled, fts_mode="or", n_phrases=0, filters=f,
                               with_doc_ids=False)[0])
    assert ("row_number() OVER (ORDER BY coalesce(0.7::float8 / (60 + vector_rank), 0) + "
            "coalesce(0.3::float8 / (60 + fts_rank), 0) DESC, h.id) AS fused_n") in text
    # the full-text leg's matches at the cap are a sample: the pool shrinks to kc (pool_for)
    assert ("WHERE fused_n <= CASE WHEN (SELECT n FROM fts_n) >= 300 THEN 30 ELSE 45 END "
            "OR (mention AND vector_rank IS NULL AND fts_rank IS NULL)") in text
    # ... and, once the vector leg has its kc hits, the sample is not ranked at all
    assert ("FROM fts_m m, q WHERE NOT ((SELECT count(*) FROM vec_r) >= 30 AND "
            "(SELECT n FROM fts_n) >= 300) ORDER BY fts_rank") in text
    for other in (dataclasses.replace(pooled, weights=(0.3, 0.7)),
                  dataclasses.replace(pooled, pool=0), dataclasses.replace(pooled, pool=30),
                  dataclasses.replace(pooled, fused_scores=True)):
        # its first hit outranks the vector leg's last; no pool; a pool of kc; scores that are
        # the fused ones: it ranks
        assert "WHERE NOT ((SELECT count(*) FROM vec_r)" not in render(q.hybrid_sql(
            other, fts_mode="or", n_phrases=0, filters=f, with_doc_ids=False)[0])
    # with @mentions: a mentioned chunk no leg ranks joins the pool, one the sample ranks
    # competes in it, so the sample is ranked as the legs at once rank it
    assert "WHERE NOT ((SELECT count(*) FROM vec_r)" not in render(q.hybrid_sql(
        pooled, fts_mode="or", n_phrases=0, filters=f, with_doc_ids=False,
        with_mentions=True)[0])
    alone, _ = q.keyword_leg_sql(pooled, fts_mode="or", n_phrases=0, filters=f, with_doc_ids=False)
    assert "vec_r" not in render(alone)  # the leg alone ranks its matches
    small = dataclasses.replace(pooled, pool=30)  # a pool no larger than kc: nothing to shrink
    assert "WHERE fused_n <= 30 OR (mention" in render(q.hybrid_sql(
        small, fts_mode="or", n_phrases=0, filters=f, with_doc_ids=False)[0])
    assert 'FROM "pool" h JOIN kb_chunks c' in text and "nbr_rows" not in text
    both, params = q.hybrid_sql(pooled, fts_mode="or", n_phrases=0, filters=f,
                                with_doc_ids=False, graph_direction="outgoing")
    text = render(both)
    assert "frontier AS (SELECT project_key AS p, slug AS s FROM \"leg_rows\"" in text
    assert "LIMIT 3)" in text and "canonical_type IS DISTINCT FROM 'project-index'" in text
    assert "'outgoing'" in text and "'incoming'" not in text
    # per seed: its own strongest edges, the seed itself left out, each neighbour's nearest chunk
    assert "DISTINCT ON (x.src, x.project_key, x.nbr)" in text and "WHERE x.nbr <> x.src" in text
    assert "DISTINCT ON (e.src, d.id)" in text
    assert "e.tenant_id = 'acme'" in text and "g.tenant_id = 'acme'" in text
    assert text.count("d.tags && %(f_tags)s::text[]") == 3  # both legs and the neighbours
    assert "UNION ALL SELECT * FROM nbr_rows" in text and "AS seeds" in text
    assert params["f_tags"] == ["x"]


def test_a_full_text_leg_at_its_match_cap_keeps_the_pool_to_the_candidates_per_leg():
    """Decision 0017, amendment: matches that reach the cap are the first ``fts_cap`` in table
    order, a sample, and the pool holds no more than ``kc`` then; below the cap, without the
    leg, or with a pool of at most ``kc`` (or 0: every candidate) it is unchanged."""
    import dataclasses

    shape = dataclasses.replace(SHAPE, pool=45)
    assert shape.pool_for(300) == shape.pool_for(1000) == 30
    assert shape.pool_for(299) == shape.pool_for(None) == 45
    assert dataclasses.replace(shape, pool=20).pool_for(300) == 20
    assert dataclasses.replace(shape, pool=0).pool_for(300) == 0
    assert dataclasses.replace(shape, fts_cap=0).pool_for(300) == 45


def test_a_full_text_leg_that_the_lexeme_counts_put_at_its_cap_reads_no_match():
    """Decision 0017, amendment: where the sample would not be ranked and no filter narrows
    the scope, the one statement first asks the scope's exact lexeme counts (folded and
    logged) whether a lexeme the OR query holds is in ``fts_cap`` chunks; then the count is the
    cap and no match is read; only the lexemes whose estimates could reach the cap are looked
    up. Not with a filter, @mentions, another query mode, or alone."""
    import dataclasses

    pooled = dataclasses.replace(SHAPE, pool=45, weights=(0.7, 0.3), rrf_k=60)
    text = render(q.hybrid_sql(pooled, fts_mode="or", n_phrases=0, filters=parse_filters({}),
                               with_doc_ids=False)[0])
    assert ("fts_n AS (SELECT CASE WHEN EXISTS (SELECT 1 FROM sel WHERE est >= 300) AND "
            "EXISTS (SELECT 1 FROM sel JOIN (SELECT k.lexeme, "
            "sum(k.n) AS chunks FROM (SELECT b.lexeme, b.chunks AS n FROM kb_lexemes b "
            "WHERE b.tenant_id = 'acme' AND b.project_key = ANY('{api,web}'::text[]) "
            "AND b.lexeme = ANY(ARRAY(SELECT l FROM sel WHERE est >= 300))") in text
    assert "FROM kb_lexeme_log g, unnest(g.lexemes, g.deltas)" in text
    assert ("k.chunks >= 300 AND to_tsquery('simple', quote_literal(sel.l))::text = "
            "quote_literal(sel.l)) THEN 300 ELSE (SELECT count(*) FROM fts_m) END AS n)") in text
    f = parse_filters({"tags": ["x"]})
    for other in (q.hybrid_sql(pooled, fts_mode="or", n_phrases=0, filters=f, with_doc_ids=False),
                  q.hybrid_sql(pooled, fts_mode="or", n_phrases=0, filters=parse_filters({}),
                               with_doc_ids=False, with_mentions=True),
                  q.hybrid_sql(pooled, fts_mode="websearch", n_phrases=0,
                               filters=parse_filters({}), with_doc_ids=False),
                  q.hybrid_sql(dataclasses.replace(pooled, fused_scores=True), fts_mode="or",
                               n_phrases=0, filters=parse_filters({}), with_doc_ids=False),
                  q.keyword_leg_sql(pooled, fts_mode="or", n_phrases=0,
                                    filters=parse_filters({}), with_doc_ids=False)):
        rendered = render(other[0])
        assert "kb_lexemes" not in rendered and "fts_n AS (SELECT count(*) AS n FROM fts_m)" in rendered


def test_the_legs_scope_and_sizes_are_literals():
    """One statement text per scope, so PostgreSQL can reuse one plan per scope (LegShape)."""
    vec, fts, _ = _legs()
    for text in (vec, fts):
        assert "c.tenant_id = 'acme' AND c.project_key = ANY('{api,web}'::text[])" in text
        assert "JOIN kb_chunks c ON c.tenant_id = 'acme' AND c.id = h.id" in text
        for name in ("tenant", "projects", "kc", "min_sim", "fts_cap"):
            assert f"%({name})s" not in text
    other, _, _ = _legs(shape=q.LegShape(q.Scope("acme", ("api",), SPACE), kc=15, min_sim=0.3,
                                         fts_cap=300))
    assert other != vec and "ANY('{api}'::text[])" in other and "LIMIT 15)" in other


def test_hostile_scope_literals_are_quoted():
    hostile = "x'; DROP TABLE kb_chunks; --"
    vec, fts, _ = _legs(shape=q.LegShape(q.Scope(hostile, (hostile, 'a,"b"{}'), SPACE), kc=3))
    for text in (vec, fts):
        assert hostile not in text  # the quote is doubled inside the literal
        assert "c.tenant_id = 'x''; DROP TABLE kb_chunks; --'" in text


def test_mentions_join_the_vector_leg():
    vec, _, _ = _legs(with_mentions=True)
    assert "c.document_id = ANY(%(mention_ids)s)" in vec and "true, NULL FROM ment" in vec


@pytest.mark.parametrize("mode, needle", [
    ("or", "FROM sel"), ("websearch", "websearch_to_tsquery"), ("plain", "plainto_tsquery"),
])
def test_tsquery_modes(mode, needle):
    assert needle in render(fts.tsquery_sql(mode, 0))


def test_synonym_phrases_are_bound_parameters():
    text = render(fts.tsquery_sql("plain", 2))
    assert "%(phrase0)s" in text and "%(phrase1)s" in text


def test_filters_are_bound_parameters_in_both_legs():
    hostile = "x'; DROP TABLE kb_chunks; --"
    vec, fts, params = _legs({"tags": [hostile], "folder_globs": ["hr/**"],
                              "metadata": {"team": {"$in": [hostile, 3]}, "level": {"$gte": 2}}})
    for text in (vec, fts):
        assert hostile not in text and "DROP TABLE" not in text
        assert text.count("d.tags && %(f_tags)s::text[]") == 1  # each leg filters its scan
    assert params["f_tags"] == [hostile]
    assert params["f_globs"] == ["^hr/.*$"] or params["f_globs"][0].startswith("^hr/")
    # the metadata key and its JSON values are bound too, whatever their placeholders' names
    bound = list(params.values())
    assert "team" in bound and ['"x\'; DROP TABLE kb_chunks; --"', "3"] in bound


def test_unknown_filter_key_lists_valid_keys():
    with pytest.raises(FilterError, match="valid: source_types"):
        parse_filters({"colour": ["red"]})


def test_bad_metadata_operator_and_key():
    with pytest.raises(FilterError, match=r"\$regex"):
        parse_filters({"metadata": {"a": {"$regex": "x"}}})
    with pytest.raises(FilterError, match="invalid"):
        parse_filters({"metadata": {"a b": 1}})


def test_rejected_and_neighbour_queries_are_scoped():
    rej = render(catalog.rejected_chunks_sql())
    assert "d.tenant_id = %(tenant)s" in rej and "d.project_key = ANY(%(projects)s)" in rej
    assert "c.text" in rej and "c.embedding" in rej  # whole rows: no second read per search
    nb, _ = q.neighbours_sql(direction="both", filters=parse_filters(None))
    text = render(nb)
    assert "'outgoing'" in text and "'incoming'" in text
    assert text.count("e.tenant_id = %(tenant)s") == 2
    assert "d.tenant_id = %(tenant)s" in text


def test_leg_statements_are_remembered_per_arguments():
    """A scope searched again reuses its statements (store.sql._remembered); filters built by
    hand with a list inside are not hashable and build anew, with the same result."""
    none = parse_filters(None)
    first = q.vector_leg_sql(SHAPE, filters=none, with_doc_ids=False)
    assert q.vector_leg_sql(SHAPE, filters=parse_filters(None), with_doc_ids=False) is first
    other = q.LegShape(q.Scope("acme", ("api",), SPACE), kc=30, min_sim=0.3, fts_cap=300)
    assert q.vector_leg_sql(other, filters=none, with_doc_ids=False) is not first
    listed = SearchFilters(metadata=MetaCond("team", "$in", ["a", "b"]))  # parse_filters: tuples
    a = q.keyword_leg_sql(SHAPE, fts_mode="or", n_phrases=0, filters=listed, with_doc_ids=False)
    b = q.keyword_leg_sql(SHAPE, fts_mode="or", n_phrases=0, filters=listed, with_doc_ids=False)
    assert a is not b and render(a[0]) == render(b[0]) and a[1] == b[1]


def test_remembered_statements_render_once_per_encoding():
    """A remembered statement keeps its bytes (store.sql.Statement): psycopg would render every
    piece and literal again on each execute. Another client encoding renders anew."""
    stmt, _ = q.vector_leg_sql(SHAPE, filters=parse_filters(None), with_doc_ids=False)
    assert isinstance(stmt, q.Statement)
    assert stmt.as_bytes(None) is stmt.as_bytes(None)  # rendered once, then kept
    assert stmt.as_bytes(None) == stmt._composed.as_bytes(None)  # the statement's own bytes
    assert catalog.lexeme_stats_sql() is catalog.lexeme_stats_sql()
    assert isinstance(catalog.lexeme_stats_sql(), q.Statement)

    renders = []

    class Counted(sql.SQL):
        def as_bytes(self, context=None):
            renders.append(context)
            return super().as_bytes(context)

    class PGconn:
        _encoding = "latin-1"

    class Latin1:  # a connection whose client encoding is LATIN1, as an adapt context
        pgconn = PGconn()
        info = type("Info", (), {"encoding": "latin-1"})()
        connection = property(lambda self: self)

    once = q.Statement(Counted("SELECT 'café'"))
    assert once.as_bytes(None) == once.as_bytes(None) == "SELECT 'café'".encode()
    assert once.as_bytes(Latin1()) == once.as_bytes(Latin1()) == "SELECT 'café'".encode("latin-1")
    assert len(renders) == 2  # once per encoding


def test_the_writer_fills_every_document_column_in_spec_order():
    from kb_retriever.models import DocumentDraft
    from kb_retriever.store.columns import DOCUMENT_COLUMNS, document_values

    draft = DocumentDraft(source_path="a.md", doc_key="a", title="A", source_type="markdown",
                          content_hash="h", chunks=())
    assert tuple(document_values(draft)) == tuple(c for c, _ in DOCUMENT_COLUMNS)


def test_the_reads_of_vectors_ask_for_the_binary_format():
    """Vectors as text cost both ends: the 150 rejected chunks of the 100k load corpus took
    30 ms to read as text and 4 as binary, in every process every few seconds. Reads without
    vectors stay text (their jsonb decodes the cheaper way)."""
    assert reads.rejected_chunks(SHAPE.scope, 5.0, list).binary
    assert not reads.supersessions(SHAPE.scope, 5.0).binary
    assert not reads.lexeme_stats(SHAPE.scope, 5.0).binary
