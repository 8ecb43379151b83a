"""Our hits as a framework document's metadata, and framework documents back as a result.

One shape for both adapters (:func:`hit_metadata`): the fields a reader cites are flat (the LLM
sees them: title, path, heading, slug, type and status), and everything else of ours is one
nested record under ``"kb"``: the origin, the score breakdown, the whole document, the chunk's
ids, the cosine similarity, the graph provenance, and ``context_cutoff`` on a hit of the top k
that the adaptive cutoff trimmed from the prompt. LangChain's documents carry it as is
(``metadata["kb"]``, the contract of DESIGN.md §4); LlamaIndex's nodes too, with ``"kb"``
excluded from the LLM and embedding text.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..models import Hit, Origin, ScoreBreakdown, SearchResult
from ..models.results import CONTEXT_CUTOFF
from .coerce import as_float, as_int, as_opt_str
from .documents import ForeignDocument, document_numbers, document_ref, heading_path, kb_record

__all__ = ["CITATION_KEYS", "hit_metadata", "reranked_metadata", "result_from_documents"]

#: The flat keys of :func:`hit_metadata`: what a reader (or the LLM) cites a chunk by.
CITATION_KEYS = ("title", "source_path", "heading_path", "slug", "canonical_type",
                 "canonical_status")
_GRAPH_KEYS = ("edge_type", "from_slug", "hop")


def hit_metadata(hit: Hit) -> dict[str, Any]:
    """The metadata of a framework document or node made from ``hit`` (module docstring).

    >>> from kb_retriever.models import DocumentRef
    >>> doc = DocumentRef(7, "default", "p", "dec-cache", "Cache", "adr/dec-cache.md")
    >>> meta = hit_metadata(Hit(1, "We use Redis.", "Decision", 0.5,
    ...                         ScoreBreakdown(total=0.5), Origin.PRIMARY, doc))
    >>> meta["title"], meta["kb"]["origin"], meta["kb"]["document"]["doc_key"]
    ('Cache', 'primary', 'dec-cache')
    """
    doc = hit.document
    kb: dict[str, Any] = {
        "origin": hit.origin.value,
        "scores": hit.scores.to_dict(),
        # the document as search --json shows it, and its date (recency, when reranked again)
        "document": {**doc.to_dict(),
                     "doc_date": doc.doc_date.isoformat() if doc.doc_date else None},
        "heading_path": hit.heading_path,
        "chunk_id": hit.chunk_id,
        "chunk_uid": hit.chunk_uid,
        "similarity": hit.similarity,
    }
    for key in _GRAPH_KEYS:
        value = getattr(hit, key)
        if value is not None:
            kb[key] = value
    if hit.metadata.get(CONTEXT_CUTOFF):
        kb[CONTEXT_CUTOFF] = True  # ranked in the top k, trimmed from the prompt's context
    return {
        "title": doc.title, "source_path": doc.source_path, "heading_path": hit.heading_path,
        "slug": doc.slug, "canonical_type": doc.canonical_type,
        "canonical_status": doc.canonical_status, "kb": kb,
    }


def reranked_metadata(metadata: Mapping[str, Any], hit: Hit, *, rank: int,
                      retrieval_score: float | None) -> dict[str, Any]:
    """A copy of ``metadata`` after a rerank of foreign documents: every key kept, and the
    ``"kb"`` record (any earlier one kept) gains the ``scores`` breakdown, the ``rerank_rank``
    and the ``retrieval_score`` the document came with."""
    kb = {**kb_record(metadata), "scores": hit.scores.to_dict(), "rerank_rank": rank,
          "retrieval_score": retrieval_score}
    return {**metadata, "kb": kb}


def _origin(metadata: Mapping[str, Any]) -> Origin:
    try:
        return Origin(kb_record(metadata).get("origin", Origin.PRIMARY.value))
    except ValueError:
        return Origin.PRIMARY


def _field(metadata: Mapping[str, Any], key: str) -> Any:
    value = kb_record(metadata).get(key)
    return metadata.get(key) if value is None else value


def result_from_documents(items: Sequence[ForeignDocument], query: str = "") -> SearchResult:
    """A :class:`SearchResult` from framework documents, so the composer renders what a
    chain retrieved. ``kb.origin`` sorts each into its block; documents without one (other
    retrievers') and runner-ups are primary: a document handed to the prompt is context, but
    for one of ours that the adaptive cutoff trimmed (``kb.context_cutoff``), which stays a
    runner-up (a retriever's top k holds it, the prompt does not)."""
    numbers = document_numbers(items)
    groups: dict[Origin, list[Hit]] = {o: [] for o in Origin}
    for i, item in enumerate(items):
        meta = item.metadata
        origin = _origin(meta)
        score = item.retrieval_score or 0.0
        chunk_id = as_int(kb_record(meta).get("chunk_id"), None)
        trimmed = bool(kb_record(meta).get(CONTEXT_CUTOFF))
        block = (Origin.RUNNER_UP if trimmed
                 else Origin.PRIMARY if origin is Origin.RUNNER_UP else origin)
        groups[block].append(Hit(
            chunk_id=i if chunk_id is None else chunk_id, text=item.text,
            heading_path=heading_path(meta), score=score, scores=ScoreBreakdown(total=score),
            origin=block if trimmed else origin,
            document=document_ref(item, numbers[i], position=i),
            similarity=as_float(_field(meta, "similarity")),
            edge_type=as_opt_str(_field(meta, "edge_type")),
            from_slug=as_opt_str(_field(meta, "from_slug")), hop=as_int(_field(meta, "hop")),
            chunk_uid=as_opt_str(kb_record(meta).get("chunk_uid")),
            metadata={CONTEXT_CUTOFF: True} if trimmed else {},
        ))
    return SearchResult(
        primary=tuple(groups[Origin.PRIMARY]), expanded=tuple(groups[Origin.GRAPH_EXPANSION]),
        rejected=tuple(groups[Origin.REJECTED]), runner_up=tuple(groups[Origin.RUNNER_UP]),
        query=query,
    )
