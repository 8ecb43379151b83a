"""Framework documents to and from kb-retriever: the one converter both adapters call.

Plain mappings in and out: no framework is imported here. A framework's document or node is a
:class:`ForeignDocument` (text, metadata, score, ids); :func:`rerank_documents` puts documents
of any retriever through the core's rerank and trust gradient (the LangChain compressor, the
LlamaIndex postprocessor); :func:`hit_metadata` is the one metadata shape of our hits (citation
fields flat, the rest under ``"kb"``) and :func:`reranked_metadata` that of a reranked foreign
document; :func:`result_from_documents` regroups documents into a :class:`SearchResult` for
``compose_prompt``. ``coerce`` has the lenient readers of metadata values.

Example::

    from kb_retriever import Settings
    from kb_retriever.interop import ForeignDocument, rerank_documents, reranked_metadata

    items = [ForeignDocument(text, meta) for text, meta in pairs]
    for rank, hit in enumerate(rerank_documents(query, items, Settings(), top_n=4), 1):
        text, meta = pairs[hit.chunk_id]
        print(text[:40], reranked_metadata(meta, hit, rank=rank, retrieval_score=None)["kb"])
"""

from __future__ import annotations

from .documents import (
    DEFAULT_PROJECT,
    DEFAULT_SOURCE_TYPE,
    DEFAULT_TENANT,
    ForeignDocument,
    document_ref,
    kb_record,
    to_candidates,
)
from .foreign import DEFAULT_TOP_N, rerank_documents
from .hits import CITATION_KEYS, hit_metadata, reranked_metadata, result_from_documents

__all__ = [
    "CITATION_KEYS", "DEFAULT_PROJECT", "DEFAULT_SOURCE_TYPE", "DEFAULT_TENANT", "DEFAULT_TOP_N",
    "ForeignDocument", "document_ref", "hit_metadata", "kb_record", "rerank_documents",
    "reranked_metadata", "result_from_documents", "to_candidates",
]
