"""The search filters as SQL predicates over ``d`` (documents) and ``c`` (chunks).

:func:`doc_filter_sql` renders a :class:`~kb_retriever.filters.dimensions.SearchFilters`; its ``where``
expression (``filter_expr``) renders through :func:`where_sql`.

Every value is a bound parameter (``%(wN)s``); field names choose among fixed column
expressions or become a bound JSON key. The result is tested by rendering and by running it
(tests/unit/test_filter_expr.py, tests/db/test_filter_dialects.py).
"""

from __future__ import annotations

import json
from typing import Any

from psycopg import sql

from ..filters.dimensions import SearchFilters
from ..filters.expressions import TYPED_FIELDS, And, Cond, Expr, MetaCond, Not, Or
from ..ranking.globs import glob_to_sql_regex

__all__ = ["doc_filter_sql", "needs_doc_join", "where_sql"]

Params = dict[str, Any]

_COLUMNS = {name: f"d.{name}" for name in TYPED_FIELDS}
_COLUMNS["heading_path"] = "c.heading_path"
_COLUMNS["chunk_uid"] = "c.chunk_uid"
# The document's own date when it has one, else when it was ingested (as the date filters).
_COLUMNS["doc_date"] = "coalesce(d.doc_date, d.indexed_at)"
_COMPARE = {"$eq": "=", "$ne": "IS DISTINCT FROM", "$gt": ">", "$gte": ">=", "$lt": "<",
            "$lte": "<=", "$like": "LIKE", "$ilike": "ILIKE"}


def where_sql(expr: Expr) -> tuple[sql.Composable, Params]:
    """``(predicate, params)`` for ``expr``.

    >>> from kb_retriever.filters.expressions import parse_expr
    >>> q, p = where_sql(parse_expr({"$or": [{"slug": "a"}, {"$not": {"tags": "x"}}]}))
    >>> q.as_string(None)
    "(d.slug = %(w0)s OR NOT coalesce(%(w1)s = ANY(coalesce(d.tags, '{}'::text[])), false))"
    >>> p
    {'w0': 'a', 'w1': 'x'}
    """
    params: Params = {}
    return _render(expr, params), params


def _render(expr: Expr, params: Params) -> sql.Composable:
    if isinstance(expr, And | Or):
        joiner = sql.SQL(" AND " if isinstance(expr, And) else " OR ")
        return sql.SQL("({})").format(joiner.join(_render(e, params) for e in expr.items))
    if isinstance(expr, Not):
        # A missing field makes a comparison NULL; NOT of it must still be a plain false.
        return sql.SQL("NOT coalesce({}, false)").format(_render(expr.item, params))
    return _condition(expr, params)


def _bind(params: Params, value: Any) -> sql.Composable:
    name = f"w{len(params)}"
    params[name] = list(value) if isinstance(value, tuple) else value
    return sql.Placeholder(name)


def _condition(cond: Cond, params: Params) -> sql.Composable:
    if isinstance(cond, MetaCond):
        return _metadata(cond, params)
    kind = TYPED_FIELDS.get(cond.field)
    if kind == "tags":
        return _tags(cond, params)
    if kind is not None:
        return _column(sql.SQL(_COLUMNS[cond.field]), cond, params)
    return _metadata(cond, params)


def _column(col: sql.Composable, cond: Cond, params: Params) -> sql.Composable:
    op, v = cond.op, cond.value
    if op == "$exists":  # (doc_date: the document's own, not the ingest time it falls back to)
        own = sql.SQL("d.doc_date") if cond.field == "doc_date" else col
        return sql.SQL("{} IS {}NULL").format(own, sql.SQL("NOT " if v else ""))
    if op == "$in":
        return sql.SQL("{} = ANY({})").format(col, _bind(params, v))
    if op == "$nin":
        return sql.SQL("({0} IS NULL OR {0} <> ALL({1}))").format(col, _bind(params, v))
    if op == "$between":
        return sql.SQL("{} BETWEEN {} AND {}").format(col, _bind(params, v[0]), _bind(params, v[1]))
    return sql.SQL("{} {} {}").format(col, sql.SQL(_COMPARE[op]), _bind(params, v))


def _tags(cond: Cond, params: Params) -> sql.Composable:
    op, v = cond.op, cond.value
    tags = sql.SQL("coalesce(d.tags, '{}'::text[])")
    if op == "$exists":
        return sql.SQL("cardinality({}) {} 0").format(tags, sql.SQL(">" if v else "="))
    if op in ("$eq", "$ne"):
        has = sql.SQL("{} = ANY({})").format(_bind(params, v), tags)
        return has if op == "$eq" else sql.SQL("NOT ({})").format(has)
    if op in ("$in", "$nin"):
        overlap = sql.SQL("{} && {}::text[]").format(tags, _bind(params, v))
        return overlap if op == "$in" else sql.SQL("NOT ({})").format(overlap)
    return sql.SQL("EXISTS (SELECT 1 FROM unnest({}) AS t(tag) WHERE t.tag {} {})").format(
        tags, sql.SQL(_COMPARE[op]), _bind(params, v))


def _metadata(cond: Cond, params: Params) -> sql.Composable:
    # chunk metadata wins over document frontmatter for the same key
    key = _bind(params, cond.field)
    e = sql.SQL("coalesce(c.metadata -> {k}, d.frontmatter -> {k})").format(k=key)
    op, v = cond.op, cond.value
    if op == "$exists":
        return sql.SQL("{} IS {}NULL").format(e, sql.SQL("NOT " if v else ""))
    if op in ("$eq", "$ne"):
        return sql.SQL("{} {} {}::jsonb").format(e, sql.SQL(_COMPARE[op]),
                                                  _bind(params, json.dumps(v)))
    if op in ("$in", "$nin"):
        values = _bind(params, [json.dumps(x) for x in v])
        if op == "$in":
            return sql.SQL("{} = ANY({}::jsonb[])").format(e, values)
        return sql.SQL("({0} IS NULL OR NOT {0} = ANY({1}::jsonb[]))").format(e, values)
    sample = v[0] if op == "$between" else v
    if isinstance(sample, int | float) and not isinstance(sample, bool):
        # non-numbers compare as NULL (no match) instead of failing the cast
        left = sql.SQL("CASE WHEN jsonb_typeof({e}) = 'number' THEN ({e} #>> '{{}}')::numeric END"
                       ).format(e=e)
        cast = sql.SQL("::numeric")
    else:
        left, cast = sql.SQL("({} #>> '{{}}')").format(e), sql.SQL("::text")
    if op == "$between":
        return sql.SQL("{} BETWEEN {}{} AND {}{}").format(
            left, _bind(params, v[0]), cast, _bind(params, v[1]), cast)
    return sql.SQL("{} {} {}{}").format(left, sql.SQL(_COMPARE[op]), _bind(params, v), cast)


# The dimensions that match any of their values: (SearchFilters field, parameter, predicate).
_ANY_OF = (
    ("source_types", "f_source_types", "d.source_type = ANY(%(f_source_types)s)"),
    ("canonical_types", "f_canonical_types", "d.canonical_type = ANY(%(f_canonical_types)s)"),
    ("tags", "f_tags", "d.tags && %(f_tags)s::text[]"),
    ("languages", "f_languages", "d.language = ANY(%(f_languages)s)"),
)


def doc_filter_sql(filters: SearchFilters, *, with_doc_ids: bool) -> tuple[sql.Composable, Params]:
    """Predicates on ``d`` (documents) and ``c`` (chunks) for the user's filters.

    Returns an SQL fragment starting with `` AND`` (or empty) and its parameters.
    """
    parts: list[sql.Composable] = []
    p: Params = {}
    for dimension, name, predicate in _ANY_OF:
        values = getattr(filters, dimension)
        if values:
            parts.append(sql.SQL(predicate))
            p[name] = list(values)
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
    # one renderer, one parameter namespace for both expressions (filter_expr), named from w0
    # whatever the other dimensions bind: the graph hop renders the same filters without
    # doc_ids, and its params join the legs' in one statement (sql.candidates_sql)
    exprs: Params = {}
    for expr in (filters.metadata, filters.where):
        if expr is not None:
            parts.append(_render(expr, exprs))
    p.update(exprs)
    if not parts:
        return sql.SQL(""), p
    return sql.SQL(" AND ") + sql.SQL(" AND ").join(parts), p


def needs_doc_join(filters: SearchFilters, *, with_doc_ids: bool) -> bool:
    return filters.narrows_documents() or (with_doc_ids and bool(filters.doc_ids))


def rejected_passing_sql(filters: SearchFilters) -> tuple[sql.Composed, Params]:
    """Which chunks of the rejected-approach documents ``%(docs)s`` pass the user's filters,
    as graph expansion applies them (not ``doc_ids``, which pin the primary documents): the ⚠
    block warns with a chunk the search could show, as a candidate is one. Params: tenant,
    docs."""
    filt, p = doc_filter_sql(filters, with_doc_ids=False)
    return sql.SQL(
        "SELECT c.id FROM kb_documents d JOIN kb_chunks c ON c.tenant_id = d.tenant_id "
        "AND c.document_id = d.id WHERE d.tenant_id = %(tenant)s "
        "AND d.id = ANY(%(docs)s){}").format(filt), p
