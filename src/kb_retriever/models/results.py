"""The search side: candidates, hits with their score breakdowns, the result."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from enum import StrEnum
from typing import Any

from .frozen import empty as _empty

__all__ = ["CONTEXT_CUTOFF", "Candidate", "DocumentRef", "Hit", "Origin", "ScoreBreakdown",
           "SearchResult"]

#: ``Hit.metadata`` key of a runner-up that the adaptive cutoff moved out of the top ``limit``.
CONTEXT_CUTOFF = "context_cutoff"


class Origin(StrEnum):
    PRIMARY = "primary"
    GRAPH_EXPANSION = "graph_expansion"
    REJECTED = "rejected"
    RUNNER_UP = "runner_up"


@dataclass(frozen=True)
class DocumentRef:
    """The document a chunk belongs to, as search results show it."""

    id: int
    tenant_id: str
    project_key: str
    doc_key: str
    title: str
    source_path: str
    source_type: str = "markdown"
    slug: str | None = None
    doc_id: str | None = None
    is_canonical: bool = False
    canonical_type: str | None = None
    canonical_status: str | None = None
    retrieval_priority: int = 50
    generation_source: str = "human"
    evidence_tier: str | None = None
    tags: tuple[str, ...] = ()
    summary: str | None = None
    language: str | None = None
    doc_date: datetime | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "slug": self.slug,
            "title": self.title,
            "source_path": self.source_path,
            "source_type": self.source_type,
            "doc_key": self.doc_key,
            "project_key": self.project_key,
            "is_canonical": self.is_canonical,
            "canonical_type": self.canonical_type,
            "canonical_status": self.canonical_status,
            "retrieval_priority": self.retrieval_priority,
            "generation_source": self.generation_source,
            "evidence_tier": self.evidence_tier,
            "tags": list(self.tags),
            "summary": self.summary,
        }


@dataclass(frozen=True)
class Candidate:
    """A chunk found by the candidate query, with the raw evidence of both legs.

    ``vector_similarity`` is the true cosine similarity whichever leg found the chunk
    (fix of reference §24.6); ``vector_rank``/``fts_rank`` are 1-based ranks in each leg or None.
    """

    chunk_id: int
    text: str
    heading_path: str
    chunk_order: int
    document: DocumentRef
    vector_similarity: float | None = None
    vector_rank: int | None = None
    fts_rank: int | None = None
    fts_score: float | None = None
    fused_score: float = 0.0
    metadata: Mapping[str, Any] = field(default_factory=_empty)
    # Stemmed query lexemes present in the chunk with their counts, and the chunk's lexeme
    # count (from the database's tsvector); None when unknown (e.g. framework documents).
    lexeme_tf: Mapping[str, int] | None = None
    lexeme_count: int | None = None
    chunk_uid: str | None = None  # the stable chunk id (None for framework documents)


@dataclass(frozen=True)
class ScoreBreakdown:
    """Every term of the final score. ``total`` equals the sum of the weighted terms."""

    vector: float = 0.0  # the (normalised) vector signal, before weighting
    keyword: float = 0.0
    heading: float = 0.0
    tag_overlap: float = 0.0
    preamble: float = 0.0
    recency: float = 0.0
    status_active: float = 0.0
    mention_boost: float = 0.0  # already weighted
    canonical_boost: float = 0.0  # already weighted (priority_weight x priority)
    canonical_penalty: float = 0.0  # already weighted (status + auto tier), >= 0
    base: float = 0.0  # Wv*vector + Wk*keyword + Wh*heading
    additive: float = 0.0  # tag/preamble/recency/status/mention terms, weighted
    canonical: float = 0.0  # canonical_boost - canonical_penalty
    total: float = 0.0
    raw_similarity: float | None = None  # cosine similarity from the database
    fused_score: float = 0.0  # RRF (or semantic) fusion score from the candidate stage
    vector_rank: int | None = None
    fts_rank: int | None = None
    hop_decay: float | None = None  # graph expansion only
    # Lexical evidence behind the BM25 keyword signal: stemmed query lexemes found in the chunk
    # with their counts, and the chunk's lexeme count.
    lexeme_tf: Mapping[str, int] | None = None
    lexeme_count: int | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for k, v in self.__dict__.items():
            if isinstance(v, float):
                v = round(v, 6)
            elif isinstance(v, Mapping):
                v = dict(v)
            out[k] = v
        return out


@dataclass(frozen=True)
class Hit:
    """A chunk in a :class:`SearchResult`, with its final score and how it got there."""

    chunk_id: int
    text: str
    heading_path: str
    score: float
    scores: ScoreBreakdown
    origin: Origin
    document: DocumentRef
    chunk_order: int = 0
    similarity: float | None = None  # cosine similarity to the query, when known
    edge_type: str | None = None
    from_slug: str | None = None
    hop: int | None = None
    metadata: Mapping[str, Any] = field(default_factory=_empty)
    # The stable chunk id: survives re-ingesting its document while its text is unchanged
    # (None for hits over framework documents, which have no row).
    chunk_uid: str | None = None

    @property
    def uid(self) -> str:
        """An id unique within one result: the stable chunk id (else the integer one),
        suffixed for non-primary origins."""
        base = self.chunk_uid or str(self.chunk_id)
        if self.origin in (Origin.PRIMARY, Origin.RUNNER_UP):
            return base
        return f"{base}:{self.origin.value}"

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "chunk_id": self.chunk_id,
            "chunk_uid": self.chunk_uid,
            "text": self.text,
            "heading_path": self.heading_path,
            "score": round(self.score, 6),
            "scores": self.scores.to_dict(),
            "origin": self.origin.value,
            "document": self.document.to_dict(),
        }
        if self.origin is Origin.GRAPH_EXPANSION:
            out.update(edge_type=self.edge_type, from_slug=self.from_slug, hop=self.hop)
        if self.origin is Origin.REJECTED:
            out["similarity"] = None if self.similarity is None else round(self.similarity, 6)
        return out


@dataclass(frozen=True)
class SearchResult:
    """What :meth:`KnowledgeBase.search` returns.

    ``primary`` is the reranked top-k, ``expanded`` the graph neighbours, ``rejected`` the
    rejected approaches that correlate with the query, ``runner_up`` candidates below top-k
    (the last of them, of origin ``rejected``, the rejected approaches that the query does not
    bear on: no block of the prompt holds them, and a vector store that promises k reads them).
    """

    primary: tuple[Hit, ...]
    expanded: tuple[Hit, ...] = ()
    rejected: tuple[Hit, ...] = ()
    runner_up: tuple[Hit, ...] = ()
    meta: Mapping[str, Any] = field(default_factory=_empty)
    query: str = ""

    @property
    def should_refuse(self) -> bool:
        return bool(self.meta.get("should_refuse", not self.primary))

    def is_empty(self) -> bool:
        return not (self.primary or self.expanded or self.rejected)

    def top_k(self, k: int) -> tuple[Hit, ...]:
        """The ranking's first ``k``: primary and the hits the adaptive cutoff moved to
        ``runner_up`` (as primary hits again, still marked ``metadata["context_cutoff"]``),
        by score. What a framework contract that promises k hits returns (LangChain's
        retriever); the prompt is composed from ``primary`` alone."""
        cut = (replace(h, origin=Origin.PRIMARY) for h in self.runner_up
               if h.metadata.get(CONTEXT_CUTOFF))
        return tuple(sorted((*self.primary, *cut), key=lambda h: -h.score)[:k])

    def to_dict(self) -> dict[str, Any]:
        return {
            "primary": [h.to_dict() for h in self.primary],
            "expanded": [h.to_dict() for h in self.expanded],
            "rejected": [h.to_dict() for h in self.rejected],
            "runner_up": [h.to_dict() for h in self.runner_up],
            "meta": _plain(self.meta),
        }


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value
