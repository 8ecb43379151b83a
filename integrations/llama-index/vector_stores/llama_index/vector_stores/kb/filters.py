"""LlamaIndex ``MetadataFilters`` as kb-retriever filters (``{"metadata": {...}}``)."""

from __future__ import annotations

from typing import Any

from llama_index.core.vector_stores.types import (
    FilterCondition,
    FilterOperator,
    MetadataFilter,
    MetadataFilters,
)

from kb_retriever import FilterError

__all__ = ["to_kb_filters"]

_OPS = {
    FilterOperator.EQ: "$eq", FilterOperator.NE: "$ne", FilterOperator.GT: "$gt",
    FilterOperator.GTE: "$gte", FilterOperator.LT: "$lt", FilterOperator.LTE: "$lte",
    FilterOperator.IN: "$in", FilterOperator.NIN: "$nin",
}


def _tree(filters: MetadataFilters) -> dict[str, Any]:
    items: list[dict[str, Any]] = []
    for f in filters.filters:
        if isinstance(f, MetadataFilters):
            items.append(_tree(f))
            continue
        assert isinstance(f, MetadataFilter)
        op = _OPS.get(f.operator)
        if op is None:
            raise FilterError(f"filter operator {f.operator.value!r} on {f.key!r} is not "
                              f"supported; valid: {', '.join(o.value for o in _OPS)}")
        items.append({f.key: {op: f.value}})
    condition = filters.condition or FilterCondition.AND
    if condition is FilterCondition.OR:
        return {"$or": items}
    if condition is FilterCondition.NOT:  # LlamaIndex: none of the filters matches
        return {"$not": {"$or": items}}
    return {"$and": items}


def to_kb_filters(filters: MetadataFilters | None, *,
                  doc_ids: list[str] | None = None) -> dict[str, Any] | None:
    """The knowledge-base filters of a query: its metadata filters, and ``doc_ids`` (ref doc
    ids, stored in each node's metadata by ``node_to_metadata_dict``).

    >>> to_kb_filters(MetadataFilters(filters=[MetadataFilter(key="team", value="sre")]))
    {'metadata': {'$and': [{'team': {'$eq': 'sre'}}]}}
    """
    parts: list[dict[str, Any]] = []
    if filters is not None and filters.filters:
        parts.append(_tree(filters))
    if doc_ids:
        parts.append({"ref_doc_id": {"$in": list(doc_ids)}})
    if not parts:
        return None
    return {"metadata": parts[0] if len(parts) == 1 else {"$and": parts}}
