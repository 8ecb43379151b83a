"""Conversions between kb-retriever hits and LangChain ``Document`` objects.

Only shapes change here, through the core's one converter (:mod:`kb_retriever.interop`);
scores and ranks are always the core's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.documents import Document

from kb_retriever import Hit, SearchResult
from kb_retriever.interop import ForeignDocument, hit_metadata, result_from_documents
from kb_retriever.write.from_memory import with_frontmatter

__all__ = ["documents_to_result", "foreign", "hit_to_document", "result_hits",
           "with_added_metadata"]


def hit_to_document(hit: Hit) -> Document:
    """One hit as a ``Document``: id = ``hit.uid``; the final score mirrored to both score keys,
    the source under LangChain's ``source``, then :func:`kb_retriever.interop.hit_metadata`
    (the citation fields, and the breakdown and the rest under ``"kb"``)."""
    return Document(id=hit.uid, page_content=hit.text, metadata={
        "score": hit.score, "relevance_score": hit.score, "source": hit.document.source_path,
        **hit_metadata(hit)})


def result_hits(result: SearchResult, *, k: int | None = None, include_context: bool = False,
                include_expanded: bool = True, include_rejected: bool = True) -> list[Hit]:
    """Primary hits first (``k`` of them when the ranking holds that many: the adaptive
    cutoff's runner-ups fill up, :meth:`SearchResult.top_k`), then expanded and rejected ones
    when asked."""
    hits: list[Hit] = list(result.top_k(k) if k is not None else result.primary)
    if include_context:
        if include_expanded:
            hits += result.expanded
        if include_rejected:
            hits += result.rejected
    return hits


#: The keys a hit's ``Document`` keeps over the metadata its document was added with.
_OURS = frozenset({"kb", "score", "relevance_score"})


def with_added_metadata(doc: Document, added: Mapping[str, Any]) -> Document:
    """``doc`` whose metadata also holds what its document (or part) was added with:
    those keys win (the ``source`` a loader gave, the caller's own), but the scores and the
    ``"kb"`` record."""
    return Document(id=doc.id, page_content=doc.page_content, metadata={
        **doc.metadata, **{k: v for k, v in added.items() if k not in _OURS}})


def foreign(doc: Document) -> ForeignDocument:
    """A ``Document`` of any retriever as the core's plain record (its score, if any, is in
    its metadata: ``relevance_score`` or ``score``; the fields of a frontmatter block that
    opens its text stand under its metadata)."""
    return ForeignDocument(doc.page_content, with_frontmatter(doc.page_content, doc.metadata or {}),
                           id=doc.id)


def documents_to_result(docs: Sequence[Document], query: str = "") -> SearchResult:
    """Rebuild a ``SearchResult`` from documents (so the composer accepts retriever output):
    ``metadata["kb"]["origin"]`` sorts each into its block; documents from other retrievers
    count as primary (:func:`kb_retriever.interop.result_from_documents`)."""
    return result_from_documents([foreign(d) for d in docs], query)
