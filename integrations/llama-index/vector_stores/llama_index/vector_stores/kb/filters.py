"""LlamaIndex ``MetadataFilters`` as kb-retriever filters, read as the retriever reads them.

The conversion is the retriever's (``llama_index.retrievers.kb.filters``): a key that names a
document field (``canonical_type``, ``canonical_status``, ``slug``, ``tags``,
``retrieval_priority`` … :data:`kb_retriever.filters.expressions.TYPED_FIELDS`) filters that
field of the node's document, any other key the node's metadata. So the README's
``MetadataFilter(key="canonical_type", value="decision")`` means the same on the store and on
the retriever (the store used to read every key as node metadata and returned nothing).

A node added through LlamaIndex whose own metadata holds such a key (``language="python"``,
``source_type="code"``: a code loader's) is filtered on that value, as LlamaIndex's own stores
read every key; the field is read where the node's metadata lacks the key, and for every chunk
not added as a node (an ingested file's).

``ref_doc_id`` (a filter's key, and ``doc_ids``) is what the store's nodes report as their
``ref_doc_id``: a node added through LlamaIndex has its own in its metadata
(``node_to_metadata_dict``, beside ``_node_content``); the chunk of an ingested file (or of a
document added another way) has none, and its node's is its document's id (``source_path``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from llama_index.core.vector_stores.types import MetadataFilters
from llama_index.retrievers.kb.filters import FieldRewrites, metadata_filters_to_expression

from kb_retriever.filters.expressions import METADATA_PREFIX, TYPED_FIELDS

__all__ = ["ref_doc_id", "to_kb_filters"]


def ref_doc_id(cond: dict[str, Any]) -> dict[str, Any]:
    """The expression of ``cond`` (``{"$eq": "adr"}``, …) on the ``ref_doc_id`` that the store
    reports for a node (``base._node``): its metadata's for a node stored with
    ``_node_content``, else its document's id.

    >>> ref_doc_id({"$in": ["adr"]})["$or"][1]
    {'$and': [{'_node_content': {'$exists': False}}, {'source_path': {'$in': ['adr']}}]}
    """
    return {"$or": [{"$and": [{"_node_content": {"$exists": True}}, {"ref_doc_id": cond}]},
                    {"$and": [{"_node_content": {"$exists": False}}, {"source_path": cond}]}]}


def own_or_field(key: str) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """The rewrite of a condition on the document field ``key``: the value in a stored node's
    own metadata when it has the key, else the field.

    >>> own_or_field("language")({"$eq": "python"})["$or"][0]["$and"][2]
    {'metadata.language': {'$eq': 'python'}}
    """
    own_key = METADATA_PREFIX + key
    own = [{"_node_content": {"$exists": True}}, {own_key: {"$exists": True}}]

    def rewrite(cond: dict[str, Any]) -> dict[str, Any]:
        return {"$or": [{"$and": [*own, {own_key: cond}]},
                        {"$and": [{"$not": {"$and": own}}, {key: cond}]}]}
    return rewrite


#: ``tags`` stays the document's tags: ``any``/``all``/``contains`` test its members.
_REWRITES: FieldRewrites = {**{key: own_or_field(key) for key in TYPED_FIELDS if key != "tags"},
                            "ref_doc_id": ref_doc_id}


def to_kb_filters(filters: MetadataFilters | None, *, doc_ids: list[str] | None = None,
                  node_ids: list[str] | None = None) -> dict[str, Any] | None:
    """The knowledge-base filters of a query: its metadata filters, ``doc_ids`` (the nodes'
    ``ref_doc_id``, :func:`ref_doc_id`) and ``node_ids`` (the nodes' ids are their chunks'
    stable ids), applied in SQL before the ranking, as LlamaIndex's stores do
    (``VectorIndexRetriever(node_ids=...)``).

    >>> from llama_index.core.vector_stores.types import MetadataFilter
    >>> to_kb_filters(MetadataFilters(filters=[MetadataFilter(key="team", value="web")]))
    {'$and': [{'team': {'$eq': 'web'}}]}
    """
    parts: list[dict[str, Any]] = []
    if filters is not None and filters.filters:
        parts.append(metadata_filters_to_expression(filters, rewrites=_REWRITES))
    if doc_ids:
        parts.append(ref_doc_id({"$in": list(doc_ids)}))
    if node_ids:
        parts.append({"chunk_uid": {"$in": list(node_ids)}})
    if not parts:
        return None
    return {"$and": parts}
