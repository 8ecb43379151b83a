"""Graph expansion's SQL: one hop from a frontier of documents (:func:`neighbours_sql`), and
the first hop from a search's likeliest seeds inside its candidate statement
(:func:`seed_neighbours_ctes`). Nothing here executes.

A hop reads, per neighbour document: the strongest edge that leads to it, its chunk most
similar to the query, its degree (its edges either way) and the links it makes (a hub, such as
an index, links out to many documents; a central page is linked to by many). Only
canonical neighbours of an expandable status (``%(expandable)s``) that pass the user's filters,
over edges of ``%(types)s``, in the configured direction.
"""

from __future__ import annotations

from typing import Any

from psycopg import sql

from ..filters.dimensions import SearchFilters
from ..vocabulary import ACCEPTED, PROJECT_INDEX, REJECTED_APPROACH
from .columns import CHUNK_COLUMNS, DOC_COLUMNS
from .filter_sql import doc_filter_sql
from .literal import Literal

__all__ = ["SEEDS", "neighbours_sql", "seed_neighbours_ctes"]

Params = dict[str, Any]

#: How many candidate documents a candidate statement reads the first hop of: the seed is the
#: first of them in fused order in 69 % of the nine sets' searches, among the first three in
#: 95 % (decision 0017); each costs the server its neighbours' chunks.
SEEDS = 3

# The edges of the frontier's documents (CTE ``frontier``: p, s), each with the frontier
# document it leaves from (src) and the one it leads to (nbr).
_OUTGOING = ("SELECT e.project_key, e.to_slug AS nbr, e.from_slug AS src, e.edge_type, e.weight, "
             "'outgoing' AS direction FROM kb_edges e JOIN frontier f "
             "ON e.project_key = f.p AND e.from_slug = f.s WHERE e.tenant_id = {tenant} "
             "AND e.edge_type = ANY(%(types)s)")
_INCOMING = ("SELECT e.project_key, e.from_slug AS nbr, e.to_slug AS src, e.edge_type, e.weight, "
             "'incoming' AS direction FROM kb_edges e JOIN frontier f "
             "ON e.project_key = f.p AND e.to_slug = f.s WHERE e.tenant_id = {tenant} "
             "AND e.edge_type = ANY(%(types)s)")

# Per neighbour (per seed and neighbour with ``{seed}``): the strongest edge (CTE nbr_edges),
# then its chunk nearest the query (nbr_pick), then that chunk's columns and the neighbour's
# degree, read for the chosen chunk alone.
_HOP = (
    "nbr_edges AS (SELECT DISTINCT ON ({seed_x}x.project_key, x.nbr) x.* FROM ({arms}) x "
    "WHERE {keep} ORDER BY {seed_x}x.project_key, x.nbr, x.weight DESC, x.src, "
    "x.direction, x.edge_type), "
    "nbr_pick AS (SELECT DISTINCT ON ({seed_e}d.id) e.*, d.id AS doc, c.id AS chunk, "
    "c.embedding <=> %(qvec)s AS dist FROM nbr_edges e JOIN kb_documents d "
    "ON d.tenant_id = {tenant} AND d.project_key = e.project_key AND d.slug = e.nbr "
    "JOIN kb_chunks c ON c.tenant_id = d.tenant_id AND c.document_id = d.id "
    "AND c.model = {model} WHERE d.is_canonical AND d.canonical_status = ANY(%(expandable)s)"
    "{filt} ORDER BY {seed_e}d.id, dist, c.id)")
_ROWS = (
    "SELECT {head}{chunk}, {doc}, 1 - n.dist AS similarity, {tail}n.src AS from_slug, "
    "n.edge_type, n.weight AS edge_weight, n.direction, deg.degree, deg.links_out "
    "FROM nbr_pick n JOIN kb_chunks c ON c.tenant_id = {tenant} AND c.id = n.chunk "
    "JOIN kb_documents d ON d.tenant_id = {tenant} AND d.id = n.doc "
    # the neighbour's edges, counted once: either way (degree) and from it (links_out)
    "CROSS JOIN LATERAL (SELECT count(*) AS degree, "
    "count(*) FILTER (WHERE g.from_slug = d.slug) AS links_out FROM kb_edges g "
    "WHERE g.tenant_id = {tenant} AND g.project_key = d.project_key "
    "AND (g.from_slug = d.slug OR g.to_slug = d.slug)) deg")


def _arms(direction: str, tenant: sql.Composable) -> sql.Composable:
    arms = ([_OUTGOING] if direction in ("outgoing", "both") else []) + (
        [_INCOMING] if direction in ("incoming", "both") else [])
    return sql.SQL(" UNION ALL ").join(sql.SQL(a).format(tenant=tenant) for a in arms)


def _hop(direction: str, filters: SearchFilters, *, tenant: sql.Composable,
         model: sql.Composable, per_seed: bool, keep: str) -> tuple[sql.Composed, Params]:
    filt, p = doc_filter_sql(filters, with_doc_ids=False)
    return sql.SQL(_HOP).format(
        seed_x=sql.SQL("x.src, " if per_seed else ""), seed_e=sql.SQL("e.src, " if per_seed else ""),
        arms=_arms(direction, tenant), keep=sql.SQL(keep), tenant=tenant, model=model,
        filt=filt), p


def _rows(tenant: sql.Composable, head: str = "", tail: str = "") -> sql.Composed:
    return sql.SQL(_ROWS).format(head=sql.SQL(head), tail=sql.SQL(tail), chunk=CHUNK_COLUMNS,
                                 doc=DOC_COLUMNS, tenant=tenant)


def neighbours_sql(*, direction: str, filters: SearchFilters) -> tuple[sql.Composed, Params]:
    """One hop of graph expansion from ``frontier`` (project, slug) pairs, ``visited``
    documents left out. Params to add: tenant, projects, model, fp, fs (frontier projects /
    slugs), visited, types, qvec, expandable."""
    tenant = sql.Placeholder("tenant")
    hop, p = _hop(direction, filters, tenant=tenant, model=sql.Placeholder("model"),
                  per_seed=False, keep="x.project_key = ANY(%(projects)s) AND NOT "
                  "(x.project_key || chr(31) || x.nbr) = ANY(%(visited)s)")
    return sql.SQL(
        "WITH frontier AS (SELECT * FROM unnest(%(fp)s::text[], %(fs)s::text[]) AS t(p, s)), "
        "{hop} {rows}").format(hop=hop, rows=_rows(tenant)), p


def seed_neighbours_ctes(*, direction: str, filters: SearchFilters, tenant: sql.Composable,
                         model: sql.Composable, candidates: str, fused: sql.Composable,
                         head: str, tail: str) -> tuple[sql.Composed, Params]:
    """CTEs that end in ``nbr_rows``: the first hop of graph expansion from each of the
    :data:`SEEDS` best documents of the ``candidates`` CTE (rows with the document columns)
    that could be the seed, best by ``fused`` (an expression over the candidate's ranks), each
    hop apart (its neighbours, the seed itself left out, as :func:`neighbours_sql` reads them
    with the seed as frontier and as visited). Rows: ``head``, the chunk and document columns,
    ``similarity``, ``tail``, then the neighbour columns. Params to add: types, qvec,
    expandable."""
    hop, p = _hop(direction, filters, tenant=tenant, model=model, per_seed=True,
                  keep="x.nbr <> x.src")
    seeds = sql.SQL(
        "frontier AS (SELECT project_key AS p, slug AS s FROM {candidates} WHERE is_canonical "
        "AND slug <> '' AND canonical_type IS DISTINCT FROM {index} AND NOT "
        "(canonical_type IS NOT DISTINCT FROM {rejected} AND canonical_status IS NOT DISTINCT "
        "FROM {accepted}) GROUP BY project_key, slug ORDER BY max({fused}) DESC, "
        "min(chunk_id) LIMIT {seeds})"
    ).format(candidates=sql.Identifier(candidates), index=Literal(PROJECT_INDEX),
             rejected=Literal(REJECTED_APPROACH), accepted=Literal(ACCEPTED), fused=fused,
             seeds=Literal(SEEDS))
    rows = sql.SQL("nbr_rows AS ({})").format(_rows(tenant, head, tail))
    return sql.SQL(", ").join([seeds, hop, rows]), p
