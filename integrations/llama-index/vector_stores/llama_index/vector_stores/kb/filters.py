"""LlamaIndex ``MetadataFilters`` as kb-retriever filters (``{"metadata": {...}}``).

The conversion is the retriever's (``llama_index.retrievers.kb.filters``), with every key read
as node metadata: the core parses the ``metadata`` dimension with the same expression parser.
"""

from __future__ import annotations

from typing import Any

from llama_index.core.vector_stores.types import MetadataFilters
from llama_index.retrievers.kb.filters import metadata_filters_to_expression

__all__ = ["to_kb_filters"]


def to_kb_filters(filters: MetadataFilters | None, *,
                  doc_ids: list[str] | None = None) -> dict[str, Any] | None:
    """The knowledge-base filters of a query: its metadata filters, and ``doc_ids`` (ref doc
    ids, stored in each node's metadata by ``node_to_metadata_dict``).

    >>> from llama_index.core.vector_stores.types import MetadataFilter
    >>> to_kb_filters(MetadataFilters(filters=[MetadataFilter(key="team", value="sre")]))
    {'metadata': {'team': {'$eq': 'sre'}}}
    """
    parts: list[dict[str, Any]] = []
    if filters is not None and filters.filters:
        parts.append(metadata_filters_to_expression(filters, list_fields=frozenset()))
    if doc_ids:
        parts.append({"ref_doc_id": {"$in": list(doc_ids)}})
    if not parts:
        return None
    return {"metadata": parts[0] if len(parts) == 1 else {"$and": parts}}
