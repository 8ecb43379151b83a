"""SQL builders of the scope's catalog: what only a write changes, read once per cache period
(the lexeme statistics, the calibration, the supersession edges, the full-text configurations,
the synonyms and the rejected-approach chunks; ``store.reads`` caches them). Each returns a
statement built once; nothing here executes. The candidate legs are ``store.sql``'s.
"""

from __future__ import annotations

from psycopg import sql

from ..ranking.text import PREFIX_LANGUAGES
from ..vocabulary import FTS_NEAREST_LANGUAGE
from .columns import CHUNK_COLUMNS, DOC_COLUMNS
from .sql import built_once

__all__ = ["LEXEME_STATS_LISTED", "fts_configs_sql", "lexeme_stats_sql", "rejected_chunks_sql",
           "scope_stats_sql", "supersessions_sql", "synonyms_sql"]


@built_once
def rejected_chunks_sql() -> sql.Composed:
    """Every chunk of the accepted rejected-approach documents in scope, with its embedding and
    the slugs its document has an edge with, either way (``linked_slugs``).

    Few rows, and they change only on ingest: the caller caches them and scores each query in
    memory (``kb_retriever.search.rejected_channel``), so the rejected channel costs no round
    trip per search. The subqueries name the tenant too, so Citus runs all of it on one shard.
    Params: tenant, projects, model, rejected (the type), accepted (the status).
    """
    return sql.SQL(
        "SELECT {chunk}, {doc}, c.embedding, ARRAY(SELECT e.to_slug FROM kb_edges e "
        "WHERE e.tenant_id = %(tenant)s AND e.project_key = d.project_key "
        "AND e.from_slug = d.slug UNION SELECT e.from_slug FROM kb_edges e "
        "WHERE e.tenant_id = %(tenant)s AND e.project_key = d.project_key "
        "AND e.to_slug = d.slug) AS linked_slugs FROM kb_documents d "
        "JOIN kb_chunks c ON c.tenant_id = d.tenant_id AND c.document_id = d.id "
        "AND c.model = %(model)s "
        "WHERE d.tenant_id = %(tenant)s AND d.project_key = ANY(%(projects)s) AND d.is_canonical "
        "AND d.canonical_type = %(rejected)s AND d.canonical_status = %(accepted)s "
        "ORDER BY d.id, c.id"
    ).format(chunk=CHUNK_COLUMNS, doc=DOC_COLUMNS)


# The scope's most common lexemes that lexeme_stats_sql lists (the planner's statistics list as
# many at the default statistics target, which the lexeme selection was measured with).
LEXEME_STATS_LISTED = 1000


@built_once
def lexeme_stats_sql() -> sql.Composed:
    """The scope's lexeme statistics, read once per cache period (not per search), in the shape
    :meth:`~kb_retriever.ranking.bm25.CorpusLexemes.from_row` reads: ``reltuples`` (the scope's
    chunks), ``elems`` (its most common lexemes, most common first) and ``freqs`` (the fraction
    of the scope's chunks holding each, then the minimum and maximum listed fraction and 0).

    The folded counts of kb_lexemes and kb_scope_stats plus the writes still in kb_lexeme_log
    (store/stats.py): exact, per (tenant, project), so no other tenant's or project's words
    count or show. Params: tenant, projects.
    """
    return sql.SQL(
        "WITH lg AS (SELECT chunks, lexemes, deltas FROM kb_lexeme_log "
        "WHERE tenant_id = %(tenant)s AND project_key = ANY(%(projects)s)), "
        "n AS (SELECT ((SELECT coalesce(sum(chunks), 0) FROM kb_scope_stats "
        "WHERE tenant_id = %(tenant)s AND project_key = ANY(%(projects)s)) "
        "+ (SELECT coalesce(sum(chunks), 0) FROM lg))::float8 AS total), "
        "counts AS (SELECT lexeme, chunks FROM kb_lexemes "
        "WHERE tenant_id = %(tenant)s AND project_key = ANY(%(projects)s) "
        "UNION ALL SELECT u.lexeme, u.delta FROM lg, "
        "unnest(lg.lexemes, lg.deltas) AS u(lexeme, delta)), "
        "top AS (SELECT lexeme, sum(chunks)::float8 AS c FROM counts GROUP BY lexeme "
        "HAVING sum(chunks) > 0 ORDER BY c DESC, lexeme COLLATE \"C\" LIMIT {listed}) "
        "SELECT n.total AS reltuples, t.elems, t.freqs || ARRAY[t.lo, t.hi, 0::float8] AS freqs "
        "FROM n LEFT JOIN LATERAL (SELECT array_agg(lexeme ORDER BY c DESC, lexeme COLLATE \"C\") "
        "AS elems, array_agg(c / n.total ORDER BY c DESC, lexeme COLLATE \"C\") AS freqs, "
        "min(c) / n.total AS lo, max(c) / n.total AS hi FROM top WHERE n.total > 0) t ON true"
    ).format(listed=sql.Literal(LEXEME_STATS_LISTED))


@built_once
def scope_stats_sql() -> sql.Composed:
    """The calibration of each project in scope (``ranking.calibration.Calibration``), read
    once per cache period. Params: tenant, projects."""
    return sql.SQL(
        "SELECT project_key, probe_version, probe_similarity FROM kb_scope_stats "
        "WHERE tenant_id = %(tenant)s AND project_key = ANY(%(projects)s) ORDER BY project_key"
    ).format()


@built_once
def supersessions_sql() -> sql.Composed:
    """The scope's supersession edges (``supersedes`` from the successor, ``invalidated_by``
    from the predecessor: frontmatter ``superseded_by``), read once per cache period.
    Params: tenant, projects."""
    return sql.SQL(
        "SELECT project_key, from_slug, to_slug, edge_type FROM kb_edges "
        "WHERE tenant_id = %(tenant)s AND project_key = ANY(%(projects)s) "
        "AND edge_type IN ('supersedes', 'invalidated_by') ORDER BY project_key, from_slug, to_slug"
    ).format()


@built_once
def fts_configs_sql() -> sql.Composed:
    """The full-text configurations of the scope's documents (each document's language's as
    the tsv column maps it, which kb_meta records as ``fts_configs``: ``store.schema.add_tsv``;
    ``%(default)s`` for the others), each with how many of its documents are in a language
    indexed by its words' prefixes too (``prefixed``), in another known language (``other``),
    and in all (``documents``), read once per cache period. Params: tenant, projects, default.
    """
    nearest = sql.SQL(" ").join(
        sql.SQL("WHEN {} THEN {}").format(sql.Literal(code), sql.Literal(near))
        for code, near in FTS_NEAREST_LANGUAGE.items())
    # The documents are counted per language first, and each language is mapped once: mapped
    # per document, the jsonb cast of kb_meta's value ran 200,000 times at a million chunks
    # (1.3 s, every TRUST_TTL_S in every process; the counting alone takes 70 ms).
    return sql.SQL(
        "SELECT coalesce(m.configs ->> CASE l.language {nearest} "
        "ELSE l.language END, %(default)s) AS config, "
        "coalesce(sum(l.n) FILTER (WHERE l.language = ANY({prefixed})), 0)::bigint AS prefixed, "
        "coalesce(sum(l.n) FILTER (WHERE l.language <> ALL({prefixed})), 0)::bigint AS other, "
        "sum(l.n)::bigint AS documents FROM (SELECT lower(d.language) AS language, count(*) AS n "
        "FROM kb_documents d WHERE d.tenant_id = %(tenant)s AND d.project_key = ANY(%(projects)s) "
        "GROUP BY 1) l LEFT JOIN (SELECT value::jsonb AS configs FROM kb_meta "
        "WHERE key = 'fts_configs') m ON true GROUP BY 1 ORDER BY 1"
    ).format(nearest=nearest, prefixed=sql.Literal(sorted(PREFIX_LANGUAGES)))


@built_once
def synonyms_sql() -> sql.Composed:
    return sql.SQL(
        "SELECT term, synonyms FROM kb_synonyms WHERE tenant_id = %(tenant)s "
        "AND project_key = ANY(%(projects)s) AND enabled ORDER BY project_key, term"
    ).format()
