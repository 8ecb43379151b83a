"""LlamaIndex ``MetadataFilters`` as a kb-retriever filter expression (``$and``/``$or``/``$not``).

Nested filters keep their structure; each ``FilterOperator`` maps to the core operator of the
same meaning, and one that has no meaning here raises :class:`kb_retriever.FilterError`. The key
``ref_doc_id`` filters what the nodes report as their ``ref_doc_id``: the retriever's nodes
have their document's id (``source_path``), whatever their metadata holds.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from llama_index.core.vector_stores.types import (
    FilterCondition,
    FilterOperator,
    MetadataFilter,
    MetadataFilters,
)

from kb_retriever import FilterError, SearchFilters
from kb_retriever.filters.dimensions import where_filters
from kb_retriever.filters.expressions import TYPED_FIELDS

__all__ = ["FieldRewrites", "metadata_filters_to_expression", "to_search_filters"]

_SAME = {FilterOperator.EQ: "$eq", FilterOperator.NE: "$ne", FilterOperator.GT: "$gt",
         FilterOperator.GTE: "$gte", FilterOperator.LT: "$lt", FilterOperator.LTE: "$lte",
         FilterOperator.IN: "$in", FilterOperator.NIN: "$nin"}
# Fields that hold a list: ANY/ALL/CONTAINS test its members (metadata lists are compared whole).
_LIST_FIELDS = frozenset({"tags"})
#: Keys that are no metadata key: key -> the expression of one condition on it (``{"$eq": v}``).
FieldRewrites = Mapping[str, Callable[[dict[str, Any]], dict[str, Any]]]
#: A node's ``ref_doc_id`` is the id of its SOURCE, its document (``convert.document_node_id``).
_REF_DOC_ID: FieldRewrites = {"ref_doc_id": lambda cond: {"source_path": cond}}


def to_search_filters(filters: MetadataFilters) -> SearchFilters:
    """The core's :class:`SearchFilters` for LlamaIndex ``filters``."""
    return where_filters(metadata_filters_to_expression(filters))


def metadata_filters_to_expression(filters: MetadataFilters, *,
                                   list_fields: frozenset[str] = _LIST_FIELDS,
                                   rewrites: FieldRewrites = _REF_DOC_ID) -> dict[str, Any]:
    """``MetadataFilters(filters=[...], condition=and|or|not)`` as an expression mapping.

    ``list_fields`` are the fields whose value is a list, which ``any``/``all``/``contains``
    test member by member. ``rewrites`` turn a condition on a key that is no metadata key into
    its expression (by default ``ref_doc_id``, the retriever's nodes' document id).

    >>> from llama_index.core.vector_stores.types import MetadataFilter, MetadataFilters
    >>> metadata_filters_to_expression(MetadataFilters(filters=[
    ...     MetadataFilter(key="tags", value="cache"),
    ...     MetadataFilter(key="team", value="plat", operator="text_match")], condition="or"))
    {'$or': [{'tags': {'$eq': 'cache'}}, {'team': {'$like': '%plat%'}}]}
    >>> metadata_filters_to_expression(MetadataFilters(filters=[
    ...     MetadataFilter(key="ref_doc_id", value="adr/dec-cache.md")]))
    {'source_path': {'$eq': 'adr/dec-cache.md'}}
    """
    parts = [metadata_filters_to_expression(f, list_fields=list_fields, rewrites=rewrites)
             if isinstance(f, MetadataFilters) else _one(f, list_fields, rewrites)
             for f in filters.filters]
    if not parts:
        raise FilterError("MetadataFilters has no filters")
    condition = filters.condition or FilterCondition.AND
    if condition == FilterCondition.NOT:  # LlamaIndex: none of the filters matches
        return {"$not": {"$or": parts} if len(parts) > 1 else parts[0]}
    if len(parts) == 1:
        return parts[0]
    return {"$or" if condition == FilterCondition.OR else "$and": parts}


def _like(value: Any) -> str:
    if not isinstance(value, str):
        raise FilterError("text_match takes a string")
    escaped = value.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def _one(f: MetadataFilter, list_fields: frozenset[str],
         rewrites: FieldRewrites) -> dict[str, Any]:
    cond = _condition(f, list_fields)
    rewrite = rewrites.get(f.key)
    return rewrite(cond[f.key]) if rewrite is not None and f.key in cond else cond


def _condition(f: MetadataFilter, list_fields: frozenset[str]) -> dict[str, Any]:
    op, key, value = f.operator, f.key, f.value
    if op in _SAME:
        return {key: {_SAME[op]: value}}
    if op == FilterOperator.TEXT_MATCH:
        return {key: {"$like": _like(value)}}
    if op == FilterOperator.TEXT_MATCH_INSENSITIVE:
        return {key: {"$ilike": _like(value)}}
    if op == FilterOperator.IS_EMPTY:
        if key in TYPED_FIELDS:  # a column: NULL (or, for tags, no tag)
            return {key: {"$exists": False}}
        # as LlamaIndex reads it: missing, null or an empty list
        return {"$or": [{key: {"$exists": False}}, {key: {"$in": [None, []]}}]}
    if key in list_fields:
        if op == FilterOperator.CONTAINS:
            return {key: {"$eq": value}}
        if op == FilterOperator.ANY:
            return {key: {"$in": value}}
        if op == FilterOperator.ALL:
            if not isinstance(value, list) or not value:
                raise FilterError("all takes a non-empty list")
            return {"$and": [{key: {"$eq": v}} for v in value]}
    raise FilterError(f"filter operator {op.value!r} is not supported on {key!r} "
                      f"(any/all/contains work on: {', '.join(sorted(list_fields)) or 'none'})")
