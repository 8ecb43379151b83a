"""Conversions between kb-retriever hits and LangChain ``Document`` objects.

Only shapes change here; scores and ranks are always the core's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import PurePosixPath
from types import MappingProxyType
from typing import Any

from langchain_core.documents import Document

from kb_retriever import Candidate, DocumentRef, Hit, Origin, ScoreBreakdown, SearchResult
from kb_retriever.interop.coerce import as_date as _date
from kb_retriever.interop.coerce import as_flag as _flag
from kb_retriever.interop.coerce import as_float as _float
from kb_retriever.interop.coerce import as_int as _int
from kb_retriever.interop.coerce import as_opt_str as _str_or_none
from kb_retriever.interop.coerce import as_tags as _tags

__all__ = ["document_to_candidate", "documents_to_result", "hit_to_document", "result_to_documents"]



def hit_to_document(hit: Hit) -> Document:
    """One hit as a ``Document``: id = ``hit.uid``, final score mirrored to both score keys."""
    doc = hit.document
    kb: dict[str, Any] = {
        "origin": hit.origin.value,
        "scores": hit.scores.to_dict(),
        "document": doc.to_dict(),
        "heading_path": hit.heading_path,
        "chunk_id": hit.chunk_id,
        "chunk_uid": hit.chunk_uid,
        "similarity": hit.similarity,
    }
    for key in ("edge_type", "from_slug", "hop"):
        value = getattr(hit, key)
        if value is not None:
            kb[key] = value
    return Document(
        id=hit.uid,
        page_content=hit.text,
        metadata={
            "score": hit.score,
            "relevance_score": hit.score,
            "source": doc.source_path,
            "title": doc.title,
            "slug": doc.slug,
            "kb": kb,
        },
    )


def result_to_documents(result: SearchResult, *, k: int | None = None,
                        include_context: bool = False, include_expanded: bool = True,
                        include_rejected: bool = True) -> list[Document]:
    """Primary hits first (at most ``k``), then expanded and rejected ones when asked."""
    hits: list[Hit] = list(result.primary[:k] if k is not None else result.primary)
    if include_context:
        if include_expanded:
            hits += result.expanded
        if include_rejected:
            hits += result.rejected
    return [hit_to_document(h) for h in hits]


# --- the other way: Documents from any retriever -> core objects -------------------------


def document_to_candidate(doc: Document, position: int, doc_number: int, *,
                          similarity: float | None, rrf_k: int) -> Candidate:
    """A ``Candidate`` for the core reranker, reading canonical fields from the metadata.

    ``position`` (0-based input rank) doubles as the chunk id, so every input document stays
    distinct; ``doc_number`` groups chunks of one source for the per-document cap. The fused
    score is RRF over the input rank, so the pass-through path keeps the retriever's order.
    """
    meta = doc.metadata or {}
    field = _reader(meta)
    source = str(field("source_path", "source") or "")
    ref = DocumentRef(
        id=doc_number,
        tenant_id="",
        project_key=str(field("project_key") or ""),
        doc_key=PurePosixPath(source).stem if source else str(doc.id or position),
        title=str(field("title") or ""),
        source_path=source,
        source_type=str(field("source_type") or "text"),
        slug=_str_or_none(field("slug")),
        is_canonical=_flag(field("is_canonical")),
        canonical_type=_str_or_none(field("canonical_type")),
        canonical_status=_str_or_none(field("canonical_status")),
        retrieval_priority=_int(field("retrieval_priority"), 50),
        generation_source=str(field("generation_source") or "human"),
        evidence_tier=_str_or_none(field("evidence_tier")),
        tags=_tags(field("tags")),
        summary=_str_or_none(field("summary")),
        doc_date=_date(field("doc_date", "date")),
    )
    kb = _kb_dict(meta)
    return Candidate(
        chunk_id=position,
        text=doc.page_content,
        heading_path=str(meta.get("heading_path") or kb.get("heading_path") or ""),
        chunk_order=position,
        document=ref,
        vector_similarity=similarity,
        fused_score=1.0 / (rrf_k + position + 1),
        metadata=MappingProxyType(dict(meta)),
    )


def documents_to_result(docs: Sequence[Document], query: str = "") -> SearchResult:
    """Rebuild a ``SearchResult`` from documents (so the composer accepts retriever output).

    ``metadata["kb"]["origin"]`` sorts each document into its block; documents from other
    retrievers count as primary.
    """
    groups: dict[Origin, list[Hit]] = {o: [] for o in Origin}
    sources: dict[str, int] = {}
    for i, doc in enumerate(docs):
        kb = _kb_dict(doc.metadata)
        cand = document_to_candidate(doc, i, _doc_number(doc, i, sources), similarity=None,
                                     rrf_k=0)
        try:
            origin = Origin(kb.get("origin", Origin.PRIMARY.value))
        except ValueError:
            origin = Origin.PRIMARY
        score = _float(doc.metadata.get("score", doc.metadata.get("relevance_score")), 0.0)
        groups[origin].append(Hit(
            chunk_id=_int(kb.get("chunk_id"), i), text=cand.text, heading_path=cand.heading_path,
            score=score, scores=ScoreBreakdown(total=score), origin=origin,
            document=cand.document, similarity=_float(kb.get("similarity"), None),
            edge_type=kb.get("edge_type"), from_slug=kb.get("from_slug"), hop=kb.get("hop"),
        ))
    return SearchResult(
        primary=tuple(groups[Origin.PRIMARY]), expanded=tuple(groups[Origin.GRAPH_EXPANSION]),
        rejected=tuple(groups[Origin.REJECTED]), runner_up=tuple(groups[Origin.RUNNER_UP]),
        query=query,
    )


def _doc_number(doc: Document, position: int, seen: dict[str, int]) -> int:
    """Same source (path, else slug) -> same number; a document with neither stands alone."""
    meta = doc.metadata or {}
    field = _reader(meta)
    key = field("source_path", "source") or field("slug")
    if not key:
        key = f"\x00{position}"
    return seen.setdefault(str(key), len(seen) + 1)


def doc_numbers(docs: Iterable[Document]) -> list[int]:
    seen: dict[str, int] = {}
    return [_doc_number(d, i, seen) for i, d in enumerate(docs)]


def _kb_dict(meta: Mapping[str, Any]) -> Mapping[str, Any]:
    kb = meta.get("kb")
    return kb if isinstance(kb, Mapping) else {}


def _reader(meta: Mapping[str, Any]) -> Any:
    """Look a field up in the flat metadata, then in a kb-retriever ``kb.document`` dict."""
    kb = meta.get("kb")
    nested = kb.get("document") if isinstance(kb, Mapping) else None
    nested = nested if isinstance(nested, Mapping) else {}

    def field(*names: str) -> Any:
        for name in names:
            if meta.get(name) not in (None, ""):
                return meta[name]
        for name in names:
            if nested.get(name) not in (None, ""):
                return nested[name]
        return None

    return field





