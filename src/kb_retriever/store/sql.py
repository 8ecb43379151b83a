"""SQL builders: each returns ``(psycopg.sql.Composed, params)``; nothing here executes.

Every value from a query or filter is a bound parameter; identifiers come from allow-lists. The
two candidate legs are the one exception, on purpose: their scope (tenant, projects) and sizes
(candidate count, match cap, similarity threshold) are SQL literals, quoted by psycopg, so that
PostgreSQL can keep one plan per scope (see :class:`LegShape`). Tested by rendering.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from psycopg import sql

from ..filters.dimensions import SearchFilters
from . import graph_sql
from .columns import CHUNK_COLUMNS, DOC_COLUMNS
from .filter_sql import doc_filter_sql, needs_doc_join
from .fulltext import ENGINE, MATCH_COUNT, LexemeBudget
from .graph_sql import seed_neighbours_ctes
from .literal import Literal
from .spaces import Space
from .stats import lexeme_chunks

Params = dict[str, Any]

DOC_JOIN = sql.SQL("JOIN kb_documents d ON d.tenant_id = c.tenant_id AND d.id = c.document_id")
_NO_FILTER = sql.SQL("")  # doc_filter_sql's predicates without a filter

@dataclass(frozen=True)
class Scope:
    """Tenant, projects and the embedding model's space (``store/spaces.py``): required on
    every query. The projects' chunks must be of that model."""

    tenant: str
    projects: tuple[str, ...]
    space: Space


def scope_params(scope: Scope) -> Params:
    return {"tenant": scope.tenant, "projects": list(scope.projects), "model": scope.space.id}


class Statement(sql.Composable):
    """A statement run on every search, rendered to bytes once per client encoding.

    psycopg renders a ``Composed`` on every execute: each piece, and each literal through a new
    transformer. A statement built once (the builders below remember theirs) renders once,
    and psycopg then finds its parsed form and its prepared statement by those bytes (decision
    0004 measured that it pays under load).
    Literals render with psycopg's default adapters: they are scope names and numbers.
    """

    def __init__(self, composed: sql.Composable) -> None:
        super().__init__(composed)
        self._composed = composed
        self._bytes: dict[str, bytes] = {}

    def as_bytes(self, context: Any = None) -> bytes:
        conn = context.connection if context is not None else None
        encoding = conn.info.encoding if conn is not None else "utf-8"
        rendered = self._bytes.get(encoding)
        if rendered is None:  # two threads may both render: the same bytes
            rendered = self._bytes[encoding] = self._composed.as_bytes(context)
        return rendered


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
    # The statistics the full-text leg's OR query chooses its lexemes by (None: it keeps all).
    lexemes: LexemeBudget | None = None
    # The full-text configurations of the scope's documents when there are several: the query
    # is stemmed by each (query_lexemes_sql). One (or none): the ``fts_lang`` parameter's.
    fts_configs: tuple[str, ...] = ()
    # The rerank pool (0: every candidate of both legs): the statement of both legs returns
    # only the best ``pool`` chunks of their weighted RRF (``weights``: vector, full-text;
    # ``rrf_k``), as ``ranking.fusion.fuse_legs`` keeps them (decision 0017); fewer when the
    # full-text leg's matches reach ``fts_cap`` (:meth:`pool_for`).
    pool: int = 0
    weights: tuple[float, float] = (0.7, 0.3)
    rrf_k: int = 60
    # Whether the search's scores are the fused ones (a question without a word to rerank by):
    # then both legs' ranks count in every score, not only in the pool (sample_left_out).
    fused_scores: bool = False

    def pool_for(self, fts_matches: int | None) -> int:
        """The rerank pool for a search whose full-text leg saw ``fts_matches`` matches (None:
        it did not run). When they reach the match cap they are the first ``fts_cap`` matches
        in table order, a sample rather than the best, and the pool holds no more than the
        candidates per leg (``kc``): the leg's own hits take no place a vector hit can take
        (decision 0017, amendment of 2026-12-06)."""
        if self.fts_cap > 0 and fts_matches is not None and fts_matches >= self.fts_cap:
            return min(self.pool, self.kc)
        return self.pool

    def sample_left_out(self) -> bool:
        """Whether a full-text leg at its cap adds nothing to the search once the vector leg
        has its ``kc`` hits: the pool shrinks to ``kc`` (:meth:`pool_for`), the weights rank
        the full-text leg's first hit below the vector leg's last, and the scores are the
        reranker's, which its ranks do not enter (not ``fused_scores``)."""
        wv, wf = self.weights
        return (not self.fused_scores and self.pool_for(self.fts_cap) == self.kc < self.pool
                and wv / (self.rrf_k + self.kc) > wf / (self.rrf_k + 1))

    def literals(self) -> dict[str, sql.Composable]:
        return {"ql": ENGINE.query_lexemes(self.fts_configs), "tenant": Literal(self.scope.tenant),
                "projects": Literal(list(self.scope.projects)),
                "model": self.scope.space.literal,
                "kc": Literal(int(self.kc)), "min_sim": Literal(float(self.min_sim)),
                "fts_cap": Literal(int(self.fts_cap)), "pool": Literal(int(self.pool)),
                "sampled_pool": Literal(int(self.pool_for(self.fts_cap))),
                "wv": Literal(float(self.weights[0])), "wf": Literal(float(self.weights[1])),
                "rrf_k": Literal(int(self.rrf_k))}


# A candidate row: chunk and document columns, the true cosine (fix §24.6), and the full-text
# engine's term evidence, the BM25 inputs (ranking/bm25.py): the query's lexemes are the
# statement's own (CTE ql, computed once), so a leg needs nothing stemmed beforehand.
_CANDIDATE_ROW = sql.SQL("{chunk}, {doc}, 1 - ({distance}) AS similarity, {tf}")
_COSINE_DISTANCE = sql.SQL("c.embedding <=> %(qvec)s")
# A hit the vector leg found has its distance already (CTE vec's ``dist``): the same cosine
# when the index holds the vectors themselves (not halfvec), read without fetching the
# embedding from TOAST again.
_KNOWN_DISTANCE = sql.SQL("coalesce(h.dist, c.embedding <=> %(qvec)s)")
_CANDIDATE_JOINS = sql.SQL("JOIN kb_chunks c ON c.tenant_id = {tenant} AND c.id = h.id {docjoin}")
# The candidate rows, then the neighbour rows of graph_sql.seed_neighbours_ctes: each kind
# with the other's columns NULL (a candidate has no edge, a neighbour no rank or term counts).
_WITH_NEIGHBOURS = sql.SQL(
    "(SELECT leg_rows.*, NULL::text AS from_slug, NULL::text AS edge_type, NULL::real AS "
    "edge_weight, NULL::text AS direction, NULL::bigint AS degree, NULL::bigint AS links_out "
    "FROM leg_rows UNION ALL "
    "SELECT * FROM nbr_rows)")
_NEIGHBOUR_HEAD = ("NULL::bigint AS id, NULL::bigint AS vector_rank, false AS mention, "
                   "NULL::bigint AS fts_rank, NULL::real AS fts_score, NULL::float8 AS dist, ")
_NEIGHBOUR_TAIL = "NULL::text AS tf, NULL::integer AS lexeme_count, "


# The scope's projects whose chunks are of another embedding model than the search's (named
# with that model): the search raises instead of finding nothing by vector (rows.leg_result).
_FOREIGN_PROJECTS = sql.SQL(
    "(SELECT array_agg(p.project_key || ' (' || m.model_id || ', ' || m.dimension || '-d)' "
    "ORDER BY p.project_key) FROM kb_projects p JOIN kb_models m ON m.id = p.model "
    "WHERE p.tenant_id = {tenant} AND p.project_key = ANY({projects}::text[]) "
    "AND p.model <> {model} AND EXISTS (SELECT 1 FROM kb_chunks x WHERE x.tenant_id = {tenant} "
    "AND x.project_key = p.project_key)) AS foreign_projects")


def _count(cte: str) -> sql.Composable:
    """The rows of CTE ``cte``."""
    return sql.SQL("(SELECT count(*) FROM {})").format(sql.Identifier(cte))


def _leg(ctes: sql.Composable, hits: str, counted: dict[str, sql.Composable],
         lit: dict[str, sql.Composable], *, with_lexemes: bool = False,
         distance: sql.Composable = _COSINE_DISTANCE,
         graph: sql.Composable | None = None) -> sql.Composed:
    """A leg's statement: its CTEs, then the ``hits`` CTE's rows with the candidate columns.

    The matches before the similarity threshold come on every row, one column per entry of
    ``counted`` (column name: its count), and so does ``query_lexemes`` (CTE ql: the
    query's lexemes, sorted) when ``with_lexemes`` (one leg is enough: the search reads them
    from the vector leg); an empty leg returns one row of NULLs carrying them. With ``graph``
    (CTEs after ``leg_rows`` that end in ``nbr_rows``: graph_sql.seed_neighbours_ctes) the
    neighbour rows follow the candidate rows, and every row carries the ``seeds`` whose first
    hop they are.
    """
    header: list[sql.Composable] = [
        sql.SQL("{} AS {}").format(count, sql.Identifier(col)) for col, count in counted.items()]
    if with_lexemes:
        header += [sql.SQL("(SELECT lexemes FROM ql) AS query_lexemes"), _FOREIGN_PROJECTS.format(
            tenant=lit["tenant"], projects=lit["projects"], model=lit["model"])]
    leg_rows = sql.SQL("leg_rows AS (SELECT h.*, {row} FROM {hits} h {joins})").format(
        hits=sql.Identifier(hits),
        row=_CANDIDATE_ROW.format(chunk=CHUNK_COLUMNS, doc=DOC_COLUMNS, distance=distance,
                                  tf=ENGINE.evidence_columns()),
        joins=_CANDIDATE_JOINS.format(tenant=lit["tenant"], docjoin=DOC_JOIN))
    parts: list[sql.Composable] = [lit["ql"], ctes, leg_rows]
    rows: sql.Composable = sql.SQL("leg_rows")
    if graph is not None:
        parts.append(graph)
        header.append(sql.SQL("(SELECT array_agg(p || chr(31) || s) FROM frontier) AS seeds"))
        rows = _WITH_NEIGHBOURS
    return sql.SQL("WITH {ctes} SELECT n.*, r.* FROM (SELECT {header}) n LEFT JOIN {rows} r "
                   "ON true").format(ctes=sql.SQL(", ").join(parts),
                                     header=sql.SQL(", ").join(header), rows=rows)


def _scope_and_filters(lit: dict[str, sql.Composable], filters: SearchFilters, with_doc_ids: bool
                       ) -> tuple[sql.Composable, sql.Composable, sql.Composable, Params]:
    filt, p = doc_filter_sql(filters, with_doc_ids=with_doc_ids)
    join = DOC_JOIN if needs_doc_join(filters, with_doc_ids=with_doc_ids) else sql.SQL("")
    scope = sql.SQL("c.tenant_id = {tenant} AND c.project_key = ANY({projects}::text[]) "
                    "AND c.model = {model}").format(tenant=lit["tenant"],
                                                    projects=lit["projects"], model=lit["model"])
    return join, scope, filt, p


def _remembered(build: Callable[..., tuple[sql.Composed, Params]]
                ) -> Callable[..., tuple[sql.Composable, Params]]:
    """``build``, its answers remembered per arguments as a :class:`Statement`: a scope
    searched again builds nothing and renders nothing (decision 0004, items 16 and 19: they
    pay under load). Filters built by hand with a list inside are not hashable and build anew
    (``parse_filters`` gives tuples). Callers must not change the returned params (they copy
    them into their own)."""
    @functools.lru_cache(maxsize=256)
    def remembered(_typed: str, *args: Any, **kwargs: Any) -> tuple[sql.Composable, Params]:
        query, params = build(*args, **kwargs)
        return Statement(query), params

    @functools.wraps(build)
    def statement(*args: Any, **kwargs: Any) -> tuple[sql.Composable, Params]:
        try:
            hash((args, tuple(kwargs.items())))
        except TypeError:
            return build(*args, **kwargs)
        # True == 1 == 1.0 and hash alike, but a filter binds them as different JSON values:
        # the filters' reprs tell them apart, so a cached statement never binds another's
        return remembered(repr([a for a in (*args, *kwargs.values())
                                if isinstance(a, SearchFilters)]), *args, **kwargs)

    return statement


def built_once(build: Callable[[], sql.Composed]) -> Callable[[], sql.Composable]:
    """``build``'s statement, built once, as a :class:`Statement`."""
    return functools.wraps(build)(functools.cache(lambda: Statement(build())))


def _vector_ctes(shape: LegShape, lit: dict[str, sql.Composable], join: sql.Composable,
                 scope: sql.Composable, filt: sql.Composable, with_mentions: bool
                 ) -> tuple[sql.Composed, str]:
    """The vector leg's CTEs (``vec`` the HNSW scan, ``vec_r`` its ranked hits over the
    threshold, with mentions ``vec_m``) and the name of the one that holds its hits."""
    # The bare distance operator in ORDER BY with LIMIT is the only form that uses the index
    # (here over the space's indexed expression: its partial index, store/spaces.py);
    # MATERIALIZED + re-sort by "dist + 0" is pgvector's recipe for relaxed_order.
    ctes = sql.SQL(
        "vec AS MATERIALIZED (SELECT c.id, {dist} AS dist FROM kb_chunks c "
        "{join} WHERE {scope}{filt} ORDER BY dist LIMIT {kc}), "
        "vec_r AS (SELECT id, row_number() OVER (ORDER BY dist + 0, id) AS vector_rank, "
        "false AS mention, dist FROM vec WHERE 1 - dist >= {min_sim})"
    ).format(dist=shape.scope.space.distance(), join=join, scope=scope, filt=filt, kc=lit["kc"],
             min_sim=lit["min_sim"])
    if not with_mentions:
        return ctes, "vec_r"
    return ctes + sql.SQL(
        ", ment AS (SELECT DISTINCT ON (c.document_id) c.id FROM kb_chunks c {join} "
        "WHERE {scope}{filt} AND c.document_id = ANY(%(mention_ids)s) "
        "ORDER BY c.document_id, c.embedding <=> %(qvec)s, c.id), "
        "vec_m AS (SELECT * FROM vec_r UNION ALL SELECT id, NULL, true, NULL FROM ment "
        "WHERE id NOT IN (SELECT id FROM vec_r))"
    ).format(join=join, scope=scope, filt=filt), "vec_m"


def _hit_distance(shape: LegShape) -> sql.Composable:
    """A hit's cosine distance: CTE vec's when the index holds the vectors themselves (the
    same value), computed anew under halfvec (its distance is the index's, not the cosine)."""
    return _COSINE_DISTANCE if shape.scope.space.index_type == "halfvec" else _KNOWN_DISTANCE


def _keyword_ctes(shape: LegShape, lit: dict[str, sql.Composable], join: sql.Composable,
                  scope: sql.Composable, filt: sql.Composable, fts_mode: str, n_phrases: int,
                  filled: sql.Composable | None = None) -> sql.Composable:
    """The full-text leg's CTEs (the engine's: ``fts_m`` the capped matches, ``fts`` the best
    ``kc`` of them, ranked; none ranked when ``filled`` holds and the matches reach the cap).
    With ``filled`` and no filter, the scope's lexeme counts may tell that the matches reach
    the cap, and then none is read (``stats.lexeme_chunks``; decision 0017)."""
    counts = (functools.partial(lexeme_chunks, lit["tenant"], lit["projects"])
              if filled is not None and filt == _NO_FILTER else None)
    return ENGINE.matches(mode=fts_mode, n_phrases=n_phrases, budget=shape.lexemes,
                          cap=shape.fts_cap, kc=lit["kc"], cap_literal=lit["fts_cap"], join=join,
                          scope=scope, filt=filt, filled=filled, counts=counts)


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
    ctes, hits = _vector_ctes(shape, lit, join, scope, filt, with_mentions)
    return _leg(ctes, hits, {"n_pre": _count("vec")}, lit, with_lexemes=True,
                distance=_hit_distance(shape)), p


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
    ctes = _keyword_ctes(shape, lit, join, scope, filt, fts_mode, n_phrases)
    return _leg(ctes, "fts", {"n_pre": MATCH_COUNT}, lit), p


# Both legs' hits, one row per chunk: its rank in each leg that found it (NULL in the other).
_BOTH_HITS = sql.SQL(
    "hits AS (SELECT coalesce(v.id, f.id) AS id, v.vector_rank, coalesce(v.mention, false) "
    "AS mention, f.fts_rank, f.fts_score, v.dist FROM {vector} v FULL JOIN fts f ON f.id = v.id)")
# The rerank pool: the best ``pool`` hits by weighted RRF, computed as fusion.fuse_legs does
# (w / (k + rank), vector first, ties by chunk id: the same doubles), and the @mentioned chunks
# neither leg ranked; ``sampled_pool`` of them when the full-text leg's matches reached the cap
# (LegShape.pool_for). Only these rows fetch their candidate columns.
_FUSED = sql.SQL("coalesce({wv}::float8 / ({rrf_k} + vector_rank), 0) "
                 "+ coalesce({wf}::float8 / ({rrf_k} + fts_rank), 0)")  # (untyped: numeric)
_POOL = sql.SQL(
    "pool AS (SELECT id, vector_rank, mention, fts_rank, fts_score, dist FROM (SELECT h.*, "
    "row_number() OVER (ORDER BY {fused} DESC, h.id) AS fused_n FROM hits h) x "
    "WHERE fused_n <= {size} OR (mention AND vector_rank IS NULL AND fts_rank IS NULL))")
_SAMPLED_SIZE = sql.SQL(
    "CASE WHEN {matches} >= {fts_cap} THEN {sampled_pool} ELSE {pool} END")


@_remembered
def hybrid_sql(shape: LegShape, *, fts_mode: str, n_phrases: int, filters: SearchFilters,
               with_doc_ids: bool, with_mentions: bool = False,
               graph_direction: str | None = None) -> tuple[sql.Composed, Params]:
    """Both candidate legs in one statement: the CTEs of :func:`vector_leg_sql` and
    :func:`keyword_leg_sql` side by side, their hits joined on the chunk, and each chunk's
    candidate columns read once (a chunk that both legs found is one row with both ranks).

    One backend and one round trip per search (decision 0015 measures it under load against
    the two legs on two connections). With ``shape.pool`` only the rerank pool's chunks come
    back (decision 0017). Rows: the candidate columns with ``vector_rank``, ``mention``,
    ``fts_rank`` and ``fts_score``; every row also carries ``n_pre_vector``, ``n_pre_fts``,
    ``query_lexemes`` and ``foreign_projects``, and when neither leg found anything one row of
    NULLs carries just those. With ``graph_direction`` the first hop of graph expansion from
    the likeliest seeds follows (graph_sql.seed_neighbours_ctes; every row carries ``seeds``,
    the neighbour rows their edge columns). Params: the two legs' together, and with
    ``graph_direction`` types, expandable (the graph hop's).
    """
    lit = shape.literals()
    join, scope, filt, p = _scope_and_filters(lit, filters, with_doc_ids)
    vector, hits = _vector_ctes(shape, lit, join, scope, filt, with_mentions)
    # a pool that a sample leaves to the vector leg's hits once it has kc of them: a full-text
    # leg at its cap then ranks nothing (what it would rank takes no place in the pool). Not
    # with @mentions: a mentioned chunk that no leg ranks joins the pool, one ranked competes.
    filled = (sql.SQL("(SELECT count(*) FROM vec_r) >= {kc}").format(**lit)
              if shape.sample_left_out() and not with_mentions else None)
    ctes = [vector, _keyword_ctes(shape, lit, join, scope, filt, fts_mode, n_phrases, filled),
            _BOTH_HITS.format(vector=sql.Identifier(hits))]
    fused = _FUSED.format(**lit)
    if shape.pool:
        size = (lit["pool"] if shape.pool_for(shape.fts_cap) == shape.pool
                else _SAMPLED_SIZE.format(matches=MATCH_COUNT, **lit))
        ctes.append(_POOL.format(fused=fused, size=size))
    graph = None
    if graph_direction is not None:
        graph, gp = seed_neighbours_ctes(
            direction=graph_direction, filters=filters, tenant=lit["tenant"], model=lit["model"],
            candidates="leg_rows", fused=fused, head=_NEIGHBOUR_HEAD, tail=_NEIGHBOUR_TAIL)
        p = {**p, **gp}
    return _leg(sql.SQL(", ").join(ctes), "pool" if shape.pool else "hits",
                {"n_pre_vector": _count("vec"), "n_pre_fts": MATCH_COUNT}, lit, with_lexemes=True,
                distance=_hit_distance(shape), graph=graph), p


#: One hop of graph expansion (graph_sql.neighbours_sql), remembered per arguments.
neighbours_sql = _remembered(graph_sql.neighbours_sql)
