"""SQL builders: each returns ``(psycopg.sql.Composed, params)``; nothing here executes.

Every value from a query or filter is a bound parameter; identifiers come from allow-lists. The
two candidate legs are the one exception, on purpose: their scope (tenant, projects) and sizes
(candidate count, match cap, similarity threshold) are SQL literals, quoted by psycopg, so that
PostgreSQL can keep one plan per scope (see :class:`LegShape`). Tested by rendering.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from itertools import count
from typing import Any

from psycopg import sql

from ..filters import SearchFilters
from ..ranking.globs import glob_to_sql_regex
from .filter_sql import where_sql

Params = dict[str, Any]

# Document columns every search query returns (read by name in rows.py).
DOC_COLUMNS = sql.SQL(
    "d.id AS doc_pk, d.tenant_id, d.project_key, d.doc_key, d.title, d.source_path, "
    "d.source_type, d.slug, d.doc_id, d.is_canonical, d.canonical_type, d.canonical_status, "
    "d.retrieval_priority, d.generation_source, d.evidence_tier, d.tags, d.summary, "
    "d.language, d.doc_date"
)
CHUNK_COLUMNS = sql.SQL(
    "c.id AS chunk_id, c.text, c.heading_path, c.chunk_order, c.metadata, c.chunk_uid"
)
DOC_JOIN = sql.SQL("JOIN kb_documents d ON d.tenant_id = c.tenant_id AND d.id = c.document_id")

_JSON_OPS = {"$gt": ">", "$gte": ">=", "$lt": "<", "$lte": "<="}


@dataclass(frozen=True)
class Scope:
    """Tenant and projects: required on every query."""

    tenant: str
    projects: tuple[str, ...]


def scope_params(scope: Scope) -> Params:
    return {"tenant": scope.tenant, "projects": list(scope.projects)}


class _Literal(sql.Literal):
    """A literal in a statement that also has ``%(name)s`` placeholders: psycopg quotes it, and
    its ``%`` are doubled so that psycopg reads them as a literal ``%``, not as a placeholder."""

    def as_bytes(self, context: Any = None) -> bytes:
        return super().as_bytes(context).replace(b"%", b"%%")


class Statement(sql.Composable):
    """A statement run on every search, rendered to bytes once per client encoding.

    psycopg renders a ``Composed`` on every execute: each piece, and each literal through a new
    transformer (a tenth of a candidate leg's Python, decision 0004). A statement
    built once (the builders below remember theirs) renders once; psycopg then finds its
    parsed form and its prepared statement by those bytes. Literals render with psycopg's
    default adapters: they are scope names and numbers.
    """

    def __init__(self, composed: sql.Composable) -> None:
        super().__init__(composed)
        self._bytes: dict[str, bytes] = {}

    def as_bytes(self, context: Any = None) -> bytes:
        conn = context.connection if context is not None else None
        encoding = conn.info.encoding if conn is not None else "utf-8"
        rendered = self._bytes.get(encoding)
        if rendered is None:  # two threads may both render: the same bytes
            rendered = self._bytes[encoding] = self._obj.as_bytes(context)
        return rendered


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


@dataclass(frozen=True)
class LegShape:
    """What the candidate legs write into their SQL as literals: the scope and the sizes.

    A parameter would hide these from the planner's generic plan, which then cannot tell a tiny
    project (an exact scan is right) from a large one (HNSW), so PostgreSQL planned every search
    anew (decision 0004 measured it). As literals they make one statement text per scope and
    size, whose plan is the custom plan itself; psycopg prepares it after a few runs and
    PostgreSQL then reuses that plan (its generic plan costs no more than the custom one). A
    different scope is a different statement with its own plan. Everything that comes from the
    query (vector, words, filters) stays a bound parameter.
    """

    scope: Scope
    kc: int  # candidates per leg
    min_sim: float = 0.0  # the vector leg's similarity threshold
    fts_cap: int = 0  # the full-text leg's match cap
    # The edges graph expansion walks (none: expansion is off). Each candidate row then says
    # whether its document has one (``linked``), so the expansion leaves out the seeds that have
    # none, and its round trip when no seed has one.
    edge_types: tuple[str, ...] = ()
    edge_direction: str = "outgoing"
    # The statistics the full-text leg's OR query chooses its lexemes by (None: it keeps all).
    lexemes: LexemeBudget | None = None
    # The full-text configurations of the scope's documents when there are several: the query
    # is stemmed by each (query_lexemes_sql). One (or none): the ``fts_lang`` parameter's.
    fts_configs: tuple[str, ...] = ()

    def literals(self) -> dict[str, sql.Composable]:
        return {"ql": query_lexemes_sql(self.fts_configs), "tenant": _Literal(self.scope.tenant),
                "projects": _Literal(list(self.scope.projects)),
                "kc": _Literal(int(self.kc)), "min_sim": _Literal(float(self.min_sim)),
                "fts_cap": _Literal(int(self.fts_cap)),
                "linked": _linked(self.edge_types, self.edge_direction)}


# The end of an edge that a seed sits on, per direction of graph expansion (graph.py).
_SEED_ENDS = {"outgoing": ("from_slug",), "incoming": ("to_slug",),
              "both": ("from_slug", "to_slug")}


def _linked(edge_types: tuple[str, ...], direction: str) -> sql.Composable:
    """The ``linked`` column of candidate rows: whether the chunk's document can seed graph
    expansion with an edge of ``edge_types`` in ``direction`` (true or false), or NULL without
    edge types. A necessary condition only: the neighbour may still be filtered out. An index
    probe per canonical row (kb_edges' unique key for outgoing edges, kb_edges_to_ix for
    incoming ones)."""
    if not edge_types:
        return sql.SQL("NULL::boolean AS linked")
    probes = sql.SQL(" OR ").join(
        sql.SQL("EXISTS (SELECT 1 FROM kb_edges e WHERE e.tenant_id = d.tenant_id "
                "AND e.project_key = d.project_key AND e.{end} = d.slug "
                "AND e.edge_type = ANY({types}::text[]))").format(
            end=sql.Identifier(end), types=_Literal(list(edge_types)))
        for end in _SEED_ENDS[direction])
    return sql.SQL("(d.is_canonical AND d.slug IS NOT NULL AND ({})) AS linked").format(probes)


def _meta_expr(i: int) -> sql.Composable:
    # chunk metadata wins over document frontmatter for the same key
    return sql.SQL(f"coalesce(c.metadata -> %(mk{i})s, d.frontmatter -> %(mk{i})s)")


def doc_filter_sql(filters: SearchFilters, *, with_doc_ids: bool) -> tuple[sql.Composable, Params]:
    """Predicates on ``d`` (documents) and ``c`` (chunks) for the user's filters.

    Returns an SQL fragment starting with `` AND`` (or empty) and its parameters.
    """
    parts: list[sql.Composable] = []
    p: Params = {}
    if filters.source_types:
        parts.append(sql.SQL("d.source_type = ANY(%(f_source_types)s)"))
        p["f_source_types"] = list(filters.source_types)
    if filters.canonical_types:
        parts.append(sql.SQL("d.canonical_type = ANY(%(f_canonical_types)s)"))
        p["f_canonical_types"] = list(filters.canonical_types)
    if filters.tags:
        parts.append(sql.SQL("d.tags && %(f_tags)s::text[]"))
        p["f_tags"] = list(filters.tags)
    if filters.languages:
        parts.append(sql.SQL("d.language = ANY(%(f_languages)s)"))
        p["f_languages"] = list(filters.languages)
    if with_doc_ids and filters.doc_ids:
        parts.append(sql.SQL("d.id = ANY(%(f_doc_ids)s)"))
        p["f_doc_ids"] = list(filters.doc_ids)
    if filters.folder_globs:
        parts.append(sql.SQL("d.source_path ~ ANY(%(f_globs)s)"))
        p["f_globs"] = [glob_to_sql_regex(g) for g in filters.folder_globs]
    # The document's own date when it has one (fix of reference §24.10), else ingest time.
    if filters.date_from:
        parts.append(sql.SQL("coalesce(d.doc_date, d.indexed_at) >= %(f_date_from)s"))
        p["f_date_from"] = filters.date_from
    if filters.date_to:
        parts.append(sql.SQL("coalesce(d.doc_date, d.indexed_at) <= %(f_date_to)s"))
        p["f_date_to"] = filters.date_to
    parts.extend(_metadata_sql(filters.metadata, p, count()))
    if filters.where is not None:
        where, wp = where_sql(filters.where)
        parts.append(where)
        p.update(wp)
    if not parts:
        return sql.SQL(""), p
    return sql.SQL(" AND ") + sql.SQL(" AND ").join(parts), p


def _metadata_sql(items: tuple[tuple[str, str, Any], ...], p: Params,
                  counter: Iterator[int]) -> list[sql.Composable]:
    """One predicate per metadata item (AND-ed by the caller); a group renders its branches
    recursively: ``(a OR b)``, ``(a AND b)``, ``NOT coalesce(a, false)``."""
    parts: list[sql.Composable] = []
    for key, op, value in items:
        if key in ("$and", "$or", "$not"):
            branches = [sql.SQL("({})").format(sql.SQL(" AND ").join(
                _metadata_sql(b, p, counter) or [sql.SQL("true")])) for b in value]
            if key == "$not":  # a NULL comparison (key absent) is not a match: NOT it is one
                parts.append(sql.SQL("NOT coalesce({}, false)").format(branches[0]))
            else:
                joiner = sql.SQL(" OR " if key == "$or" else " AND ")
                parts.append(sql.SQL("({})").format(joiner.join(branches)))
            continue
        i = next(counter)
        p[f"mk{i}"] = key
        expr = _meta_expr(i)
        name = f"mv{i}"
        if op == "$exists":
            parts.append(sql.SQL("{} IS {} NULL").format(expr, sql.SQL("NOT" if value else "")))
            continue
        if op in ("$eq", "$ne"):
            p[name] = _jsonb(value)
            cmp = sql.SQL("=") if op == "$eq" else sql.SQL("IS DISTINCT FROM")
            parts.append(sql.SQL("{} {} %({})s::jsonb").format(expr, cmp, sql.SQL(name)))
        elif op in ("$in", "$nin"):
            p[name] = [_jsonb(v) for v in value]
            fmt = "{} = ANY(%({})s::jsonb[])" if op == "$in" else (
                "({0} IS NULL OR NOT {0} = ANY(%({1})s::jsonb[]))"
            )
            parts.append(sql.SQL(fmt).format(expr, sql.SQL(name)))
        else:
            p[name] = value
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                # non-numbers compare as NULL (no match) instead of failing the cast
                left = sql.SQL(
                    "CASE WHEN jsonb_typeof({e}) = 'number' THEN ({e} #>> '{{}}')::numeric END"
                ).format(e=expr)
                cast = sql.SQL("numeric")
            else:
                left = sql.SQL("({} #>> '{{}}')").format(expr)
                cast = sql.SQL("text")
            parts.append(sql.SQL("{} {} %({})s::{}").format(
                left, sql.SQL(_JSON_OPS[op]), sql.SQL(name), cast))
    return parts


def _jsonb(value: Any) -> str:
    import json

    return json.dumps(value)


def needs_doc_join(filters: SearchFilters, *, with_doc_ids: bool) -> bool:
    return bool(
        filters.source_types or filters.canonical_types or filters.tags or filters.languages
        or (with_doc_ids and filters.doc_ids) or filters.folder_globs or filters.date_from
        or filters.date_to or filters.metadata or filters.where is not None
    )


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
        "ORDER BY u.l) AS lexemes)").format(configs=_Literal(list(configs)))


def lexeme_selection_sql(budget: LexemeBudget | None, cap: int) -> sql.Composable:
    """CTE ``sel`` (after CTE ``ql``): the query lexemes (``l``) that the OR query keeps, in
    their order (``o``): rarest first while their estimated matches fit ``cap``, at least the
    rarest one, every lexeme without statistics (tests/unit/lexeme_oracle.py is the Python
    oracle the tests compare it with).

    The full-text leg ranks at most ``cap`` matches, taken in table order, so a frequent
    lexeme would fill that sample with weak matches and push out the chunks that hold the
    rare, telling ones. So: rarest first (estimated chunks, then the lexeme bytewise: the
    ``sorted`` of Python), while the running total of estimates stays within ``cap``, and at
    least the rarest. The same doubles in the same order as in Python, so the same choice
    (``tests/db/test_lexeme_selection.py``). Without statistics every lexeme is kept, in
    ``ql``'s order. Choosing here spares the search a round trip to stem the query first.
    """
    if budget is None:
        return sql.SQL("sel AS (SELECT u.l, u.o FROM unnest((SELECT lexemes FROM ql)) "
                       "WITH ORDINALITY AS u(l, o))")
    return sql.SQL(
        "sel AS (SELECT s.l, s.o FROM (SELECT e.l, row_number() OVER w AS o, "
        "sum(e.est) OVER w AS total FROM (SELECT u.l, coalesce(({est}::jsonb ->> u.l)::float8, "
        "{unlisted}::float8) AS est FROM unnest((SELECT lexemes FROM ql)) AS u(l)) e "
        "WINDOW w AS (ORDER BY e.est, e.l COLLATE \"C\" ROWS UNBOUNDED PRECEDING)) s "
        "WHERE s.o = 1 OR s.total <= {cap})"
    ).format(est=_Literal(budget.estimates), unlisted=_Literal(float(budget.unlisted)),
             cap=_Literal(int(cap)))


# A candidate row: chunk and document columns, the true cosine (fix §24.6), and the query's
# stemmed lexemes found in the chunk with their counts plus its lexeme count (the BM25 inputs,
# ranking/bm25.py). setweight + ts_filter cut the tsvector down to the query's lexemes in C; two
# arrays, not a JSON object, because arrays decode in C and JSON in Python. The
# query's lexemes are the statement's own (CTE ql, computed once), so a leg needs nothing
# stemmed beforehand.
_CANDIDATE_ROW = sql.SQL(
    "{chunk}, {doc}, 1 - (c.embedding <=> %(qvec)s) AS similarity, "
    "tf.lexemes AS tf_lexemes, tf.counts AS tf_counts, length(c.tsv) AS lexeme_count, {linked}"
)
_CANDIDATE_JOINS = sql.SQL(
    "JOIN kb_chunks c ON c.tenant_id = {tenant} AND c.id = h.id {docjoin} "
    "CROSS JOIN LATERAL (SELECT coalesce(array_agg(u.lexeme), '{{}}') AS lexemes, "
    "coalesce(array_agg(coalesce(array_length(u.positions, 1), 1)), '{{}}') AS counts "
    "FROM unnest(ts_filter(setweight(c.tsv, 'A', (SELECT lexemes FROM ql)), '{{a}}')) u) tf"
)


def _leg(ctes: sql.Composable, hits: str, counted: str, lit: dict[str, sql.Composable], *,
         with_lexemes: bool = False) -> sql.Composed:
    """A leg's statement: its CTEs, then the ``hits`` CTE's rows with the candidate columns.

    ``n_pre`` (the leg's matches before the similarity threshold, from ``counted``) comes on
    every row, and so does ``query_lexemes`` (CTE ql: the query's lexemes, sorted) when
    ``with_lexemes`` (one leg is enough: the search reads them from the vector leg); an empty
    leg returns one row of NULLs carrying them.
    """
    lexemes = sql.SQL(", (SELECT lexemes FROM ql) AS query_lexemes" if with_lexemes else "")
    return sql.SQL(
        "WITH {ql}, {ctes}, leg_rows AS (SELECT h.*, {row} FROM {hits} h {joins}) "
        "SELECT n.*, leg_rows.* FROM (SELECT count(*) AS n_pre{lexemes} FROM {counted}) n "
        "LEFT JOIN leg_rows ON true"
    ).format(ql=lit["ql"], ctes=ctes, hits=sql.Identifier(hits), lexemes=lexemes,
             row=_CANDIDATE_ROW.format(chunk=CHUNK_COLUMNS, doc=DOC_COLUMNS, linked=lit["linked"]),
             joins=_CANDIDATE_JOINS.format(tenant=lit["tenant"], docjoin=DOC_JOIN),
             counted=sql.Identifier(counted))


def _scope_and_filters(lit: dict[str, sql.Composable], filters: SearchFilters, with_doc_ids: bool
                       ) -> tuple[sql.Composable, sql.Composable, sql.Composable, Params]:
    filt, p = doc_filter_sql(filters, with_doc_ids=with_doc_ids)
    join = DOC_JOIN if needs_doc_join(filters, with_doc_ids=with_doc_ids) else sql.SQL("")
    scope = sql.SQL("c.tenant_id = {tenant} AND c.project_key = ANY({projects}::text[])").format(
        tenant=lit["tenant"], projects=lit["projects"])
    return join, scope, filt, p


def _remembered(build: Callable[..., tuple[sql.Composed, Params]]
                ) -> Callable[..., tuple[sql.Composable, Params]]:
    """``build``, its answers remembered per arguments as a :class:`Statement`: a scope
    searched again builds nothing (~40 us a leg) and renders nothing. Filters built by hand
    with a list inside are not hashable and build anew (``parse_filters`` gives tuples).
    Callers must not change the returned params (they copy them into their own)."""
    @functools.lru_cache(maxsize=256)
    def remembered(*args: Any, **kwargs: Any) -> tuple[sql.Composable, Params]:
        query, params = build(*args, **kwargs)
        return Statement(query), params

    @functools.wraps(build)
    def statement(*args: Any, **kwargs: Any) -> tuple[sql.Composable, Params]:
        try:
            hash((args, tuple(kwargs.items())))
        except TypeError:
            return build(*args, **kwargs)
        return remembered(*args, **kwargs)

    return statement


def _once(build: Callable[[], sql.Composed]) -> Callable[[], sql.Composable]:
    """``build``'s statement, built once, as a :class:`Statement`."""
    return functools.wraps(build)(functools.cache(lambda: Statement(build())))


@_remembered
def vector_leg_sql(shape: LegShape, *, filters: SearchFilters, with_doc_ids: bool,
                   with_mentions: bool = False) -> tuple[sql.Composed, Params]:
    """The vector leg (reference/postgres-performance.md §3.1): the scope's ``kc`` nearest
    chunks by cosine through HNSW, those at ``min_sim`` or above with their 1-based rank
    (``vector_rank``), as candidate rows.

    With ``with_mentions``, each @mentioned document's chunk nearest the query joins too
    (``mention`` true, no rank) unless the leg found it, so the mention boost can act even when
    neither leg found the document (fix of reference §24.11). Scope, ``kc`` and ``min_sim``
    come from ``shape`` (literals); params: qvec, fts_lang, fts_text, mention_ids, and the
    filters' (returned). Its rows also carry the query's lexemes (``query_lexemes``).
    """
    lit = shape.literals()
    join, scope, filt, p = _scope_and_filters(lit, filters, with_doc_ids)
    # The bare distance operator in ORDER BY with LIMIT is the only form that uses the index;
    # MATERIALIZED + re-sort by "dist + 0" is pgvector's recipe for relaxed_order.
    ctes = sql.SQL(
        "vec AS MATERIALIZED (SELECT c.id, c.embedding <=> %(qvec)s AS dist FROM kb_chunks c "
        "{join} WHERE {scope}{filt} ORDER BY dist LIMIT {kc}), "
        "vec_r AS (SELECT id, row_number() OVER (ORDER BY dist + 0, id) AS vector_rank, "
        "false AS mention FROM vec WHERE 1 - dist >= {min_sim})"
    ).format(join=join, scope=scope, filt=filt, kc=lit["kc"], min_sim=lit["min_sim"])
    hits = "vec_r"
    if with_mentions:
        ctes = ctes + sql.SQL(
            ", ment AS (SELECT DISTINCT ON (c.document_id) c.id FROM kb_chunks c {join} "
            "WHERE {scope}{filt} AND c.document_id = ANY(%(mention_ids)s) "
            "ORDER BY c.document_id, c.embedding <=> %(qvec)s, c.id), "
            "vec_m AS (SELECT * FROM vec_r UNION ALL SELECT id, NULL, true FROM ment "
            "WHERE id NOT IN (SELECT id FROM vec_r))"
        ).format(join=join, scope=scope, filt=filt)
        hits = "vec_m"
    return _leg(ctes, hits, "vec", lit, with_lexemes=True), p


@_remembered
def keyword_leg_sql(shape: LegShape, *, fts_mode: str, n_phrases: int, filters: SearchFilters,
                    with_doc_ids: bool) -> tuple[sql.Composed, Params]:
    """The full-text leg: the first ``fts_cap`` matches of the tsquery in the scope, ranked by
    ``ts_rank(tsv, q, 1)``; the best ``kc`` with their rank (``fts_rank``) and score
    (``fts_score``) as candidate rows.

    In ``or`` mode the statement chooses the query lexemes it ORs together itself
    (:func:`lexeme_selection_sql`, by ``shape.lexemes``). Scope, ``kc`` and ``fts_cap`` come
    from ``shape`` (literals); params: qvec, fts_lang, fts_text, phrase{i}, and the filters'
    (returned).
    """
    lit = shape.literals()
    join, scope, filt, p = _scope_and_filters(lit, filters, with_doc_ids)
    ctes = sql.SQL(
        "{sel}q AS (SELECT {tsq} AS query), "
        "fts_m AS MATERIALIZED (SELECT c.id, c.tsv FROM kb_chunks c {join}, q "
        "WHERE c.tsv @@ q.query AND {scope}{filt} LIMIT {cap}), "
        "fts AS (SELECT m.id, row_number() OVER (ORDER BY ts_rank(m.tsv, q.query, 1) DESC, m.id)"
        " AS fts_rank, ts_rank(m.tsv, q.query, 1) AS fts_score "
        "FROM fts_m m, q ORDER BY fts_rank LIMIT {kc})"
    ).format(tsq=tsquery_sql(fts_mode, n_phrases), join=join, scope=scope, filt=filt,
             cap=lit["fts_cap"], kc=lit["kc"],
             sel=lexeme_selection_sql(shape.lexemes, shape.fts_cap) + sql.SQL(", ")
             if fts_mode == "or" else sql.SQL(""))
    return _leg(ctes, "fts", "fts_m", lit), p


@_remembered
def neighbours_sql(*, direction: str, filters: SearchFilters) -> tuple[sql.Composed, Params]:
    """One hop of graph expansion from ``frontier`` (project, slug) pairs.

    Per neighbour document: the strongest edge, and its chunk most similar to the query.
    Params to add: tenant, projects, fp, fs (frontier projects/slugs), visited, types, qvec.
    """
    filt, p = doc_filter_sql(filters, with_doc_ids=False)
    arms = []
    if direction in ("outgoing", "both"):
        arms.append(
            "SELECT e.project_key, e.to_slug AS nbr, e.from_slug AS src, e.edge_type, e.weight, "
            "'outgoing' AS direction FROM kb_edges e JOIN frontier f "
            "ON e.project_key = f.p AND e.from_slug = f.s WHERE e.tenant_id = %(tenant)s "
            "AND e.edge_type = ANY(%(types)s)"
        )
    if direction in ("incoming", "both"):
        arms.append(
            "SELECT e.project_key, e.from_slug AS nbr, e.to_slug AS src, e.edge_type, e.weight, "
            "'incoming' AS direction FROM kb_edges e JOIN frontier f "
            "ON e.project_key = f.p AND e.to_slug = f.s WHERE e.tenant_id = %(tenant)s "
            "AND e.edge_type = ANY(%(types)s)"
        )
    query = sql.SQL(
        "WITH frontier AS (SELECT * FROM unnest(%(fp)s::text[], %(fs)s::text[]) AS t(p, s)), "
        "edges AS (SELECT DISTINCT ON (x.project_key, x.nbr) x.* FROM ({arms}) x "
        "WHERE x.project_key = ANY(%(projects)s) "
        "AND NOT (x.project_key || chr(31) || x.nbr) = ANY(%(visited)s) "
        "ORDER BY x.project_key, x.nbr, x.weight DESC, x.src) "
        "SELECT DISTINCT ON (d.id) {chunk}, {doc}, 1 - (c.embedding <=> %(qvec)s) AS similarity, "
        "e.src AS from_slug, e.edge_type, e.weight AS edge_weight, e.direction "
        "FROM edges e JOIN kb_documents d ON d.tenant_id = %(tenant)s "
        "AND d.project_key = e.project_key AND d.slug = e.nbr "
        "JOIN kb_chunks c ON c.tenant_id = d.tenant_id AND c.document_id = d.id "
        "WHERE d.is_canonical AND d.canonical_status IN ('accepted', 'review'){filt} "
        "ORDER BY d.id, c.embedding <=> %(qvec)s, c.id"
    ).format(arms=sql.SQL(" UNION ALL ").join(sql.SQL(a) for a in arms), chunk=CHUNK_COLUMNS,
             doc=DOC_COLUMNS, filt=filt)
    return query, p


@_once
def rejected_chunks_sql() -> sql.Composed:
    """Every chunk of the accepted rejected-approach documents in scope, with its embedding and
    the slugs its document has an edge with, either way (``linked_slugs``).

    Few rows, and they change only on ingest: the caller caches them and scores each query in
    memory (``kb_retriever.rejected``), so the rejected channel costs no round trip per search.
    Params: tenant, projects.
    """
    return sql.SQL(
        "SELECT {chunk}, {doc}, c.embedding, ARRAY(SELECT e.to_slug FROM kb_edges e "
        "WHERE e.tenant_id = d.tenant_id AND e.project_key = d.project_key "
        "AND e.from_slug = d.slug UNION SELECT e.from_slug FROM kb_edges e "
        "WHERE e.tenant_id = d.tenant_id AND e.project_key = d.project_key "
        "AND e.to_slug = d.slug) AS linked_slugs FROM kb_documents d "
        "JOIN kb_chunks c ON c.tenant_id = d.tenant_id AND c.document_id = d.id "
        "WHERE d.tenant_id = %(tenant)s AND d.project_key = ANY(%(projects)s) AND d.is_canonical "
        "AND d.canonical_type = 'rejected-approach' AND d.canonical_status = 'accepted' "
        "ORDER BY d.id, c.id"
    ).format(chunk=CHUNK_COLUMNS, doc=DOC_COLUMNS)


# The scope's most common lexemes that lexeme_stats_sql lists (the planner's statistics list as
# many at the default statistics target, which the lexeme selection was measured with).
LEXEME_STATS_LISTED = 1000


@_once
def lexeme_stats_sql() -> sql.Composed:
    """The scope's lexeme statistics, read once per cache period (not per search), in the shape
    :meth:`~kb_retriever.ranking.bm25.CorpusLexemes.from_row` reads: ``reltuples`` (the scope's
    chunks), ``elems`` (its most common lexemes, most common first) and ``freqs`` (the fraction
    of the scope's chunks holding each, then the minimum and maximum listed fraction and 0).

    From kb_lexemes and kb_scope_stats, which triggers keep per (tenant, project) on every
    write (migration 0004), so no other tenant's or project's words count or show. Params:
    tenant, projects.
    """
    return sql.SQL(
        "WITH n AS (SELECT coalesce(sum(chunks), 0)::float8 AS total FROM kb_scope_stats "
        "WHERE tenant_id = %(tenant)s AND project_key = ANY(%(projects)s)), "
        "top AS (SELECT lexeme, sum(chunks)::float8 AS c FROM kb_lexemes "
        "WHERE tenant_id = %(tenant)s AND project_key = ANY(%(projects)s) "
        "GROUP BY lexeme ORDER BY c DESC, lexeme COLLATE \"C\" LIMIT {listed}) "
        "SELECT n.total AS reltuples, t.elems, t.freqs || ARRAY[t.lo, t.hi, 0::float8] AS freqs "
        "FROM n LEFT JOIN LATERAL (SELECT array_agg(lexeme ORDER BY c DESC, lexeme COLLATE \"C\") "
        "AS elems, array_agg(c / n.total ORDER BY c DESC, lexeme COLLATE \"C\") AS freqs, "
        "min(c) / n.total AS lo, max(c) / n.total AS hi FROM top WHERE n.total > 0) t ON true"
    ).format(listed=sql.Literal(LEXEME_STATS_LISTED))


@_once
def scope_stats_sql() -> sql.Composed:
    """The calibration of each project in scope (``ranking.calibration.Calibration``), read
    once per cache period. Params: tenant, projects."""
    return sql.SQL(
        "SELECT project_key, probe_version, probe_similarity FROM kb_scope_stats "
        "WHERE tenant_id = %(tenant)s AND project_key = ANY(%(projects)s) ORDER BY project_key"
    ).format()


@_once
def supersessions_sql() -> sql.Composed:
    """The scope's supersession edges (``supersedes`` from the successor, ``invalidated_by``
    from the predecessor: frontmatter ``superseded_by``), read once per cache period.
    Params: tenant, projects."""
    return sql.SQL(
        "SELECT project_key, from_slug, to_slug, edge_type FROM kb_edges "
        "WHERE tenant_id = %(tenant)s AND project_key = ANY(%(projects)s) "
        "AND edge_type IN ('supersedes', 'invalidated_by') ORDER BY project_key, from_slug, to_slug"
    ).format()


@_once
def fts_configs_sql() -> sql.Composed:
    """The full-text configurations of the scope's documents (each document's language's,
    ``%(default)s`` for those without one), read once per cache period.
    Params: tenant, projects, default."""
    return sql.SQL(
        "SELECT DISTINCT coalesce(kb_fts_config(language)::text, %(default)s) AS config "
        "FROM kb_documents WHERE tenant_id = %(tenant)s AND project_key = ANY(%(projects)s) "
        "ORDER BY 1"
    ).format()


@_once
def synonyms_sql() -> sql.Composed:
    return sql.SQL(
        "SELECT term, synonyms FROM kb_synonyms WHERE tenant_id = %(tenant)s "
        "AND project_key = ANY(%(projects)s) AND enabled ORDER BY project_key, term"
    ).format()
