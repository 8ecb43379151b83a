"""Frozen data passed between pipeline stages.

Stages never mutate these; they return new objects (``dataclasses.replace``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import MISSING, dataclass, field, fields
from datetime import datetime
from enum import StrEnum
from types import MappingProxyType
from typing import Any, NamedTuple, TypeVar

__all__ = [
    "CANONICAL_STATUSES",
    "CANONICAL_TYPES",
    "Candidate",
    "ChunkDraft",
    "DocumentDraft",
    "DocumentRef",
    "EdgeDraft",
    "Hit",
    "Origin",
    "ScoreBreakdown",
    "SearchResult",
    "construct",
]

CANONICAL_TYPES = (
    "project-index", "module-kb", "decision", "runbook", "standard", "incident",
    "integration", "domain-concept", "rejected-approach",
)
CANONICAL_STATUSES = ("draft", "review", "accepted", "superseded", "deprecated", "archived")
SOURCE_TYPES = ("markdown", "text", "pdf", "docx")

def _empty() -> Mapping[str, Any]:
    return MappingProxyType({})


_T = TypeVar("_T")


class _Spec(NamedTuple):
    plain: dict[str, Any]  # the fields with a default value
    factories: dict[str, Callable[[], Any]]  # the fields with a default factory
    names: frozenset[str]
    size: int  # the number of fields


_SPECS: dict[type, _Spec] = {}


def _spec(cls: type) -> _Spec:
    fs = fields(cls)  # type: ignore[arg-type]
    spec = _SPECS[cls] = _Spec(
        plain={f.name: f.default for f in fs if f.default is not MISSING},
        factories={f.name: f.default_factory for f in fs if f.default_factory is not MISSING},
        names=frozenset(f.name for f in fs), size=len(fs))
    return spec


def construct(cls: type[_T], values: Mapping[str, Any]) -> _T:
    """``cls(**values)`` for a frozen model of this module, without running its ``__init__``.

    A frozen dataclass's ``__init__`` sets each field through ``object.__setattr__``, and a
    search builds four such objects per candidate: this fills the instance's ``__dict__`` at
    once (like pydantic's ``model_construct``); decision 0004 measured that it pays under load.
    Defaults apply as in ``__init__``; an
    unknown or missing required field raises :class:`TypeError` (mypy cannot check the keys:
    tests/unit/test_rows.py compares each converter with the ordinary constructor).

    >>> ref = construct(DocumentRef, {"id": 1, "tenant_id": "t", "project_key": "p",
    ...                               "doc_key": "k", "title": "T", "source_path": "a.md"})
    >>> ref == DocumentRef(1, "t", "p", "k", "T", "a.md"), ref.retrieval_priority
    (True, 50)
    """
    spec = _SPECS.get(cls) or _spec(cls)
    obj = object.__new__(cls)
    data = obj.__dict__
    if len(values) != spec.size:  # some fields left to their defaults
        data.update(spec.plain)
        data.update(values)
        for name, factory in spec.factories.items():
            if name not in values:
                data[name] = factory()
    else:
        data.update(values)
    if len(data) != spec.size or not data.keys() <= spec.names:
        bad = sorted(data.keys() - spec.names) or sorted(spec.names - data.keys())
        raise TypeError(f"{cls.__name__}: unknown or missing fields {bad}")
    return obj


class Origin(StrEnum):
    PRIMARY = "primary"
    GRAPH_EXPANSION = "graph_expansion"
    REJECTED = "rejected"
    RUNNER_UP = "runner_up"


# --------------------------------------------------------------------------------------------
# Ingest side: what a loader/parser/chunker produces before anything touches the database.
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ChunkDraft:
    """One chunk as produced by a chunker (0-based ``order``; ``text`` is exactly what is embedded)."""

    order: int
    text: str
    heading_path: str = ""
    metadata: Mapping[str, Any] = field(default_factory=_empty)
    uid: str | None = None  # the caller's chunk id; None: derived (documents.chunk_uid)
    embedding: Sequence[float] | None = None  # the caller's vector; None: the embedder's


@dataclass(frozen=True)
class EdgeDraft:
    """An edge from the document being ingested to ``to_slug``."""

    to_slug: str
    edge_type: str
    weight: float
    provenance: str


@dataclass(frozen=True)
class DocumentDraft:
    """A parsed source file, ready to be embedded and written.

    ``canonical_warnings`` lists why a frontmatter block was not accepted as canonical.
    """

    source_path: str  # relative path (posix), unique per (tenant, project)
    doc_key: str  # file name without extension
    title: str
    source_type: str
    content_hash: str  # sha256 of the raw source bytes (+ parser version)
    chunks: tuple[ChunkDraft, ...]
    edges: tuple[EdgeDraft, ...] = ()
    doc_id: str | None = None
    slug: str | None = None
    is_canonical: bool = False
    canonical_type: str | None = None
    canonical_status: str | None = None
    retrieval_priority: int = 50
    generation_source: str = "human"
    evidence_tier: str | None = None
    tags: tuple[str, ...] = ()
    owners: tuple[str, ...] = ()
    summary: str | None = None
    language: str | None = None
    doc_date: datetime | None = None
    frontmatter: Mapping[str, Any] = field(default_factory=_empty)
    canonical_warnings: tuple[str, ...] = ()
    # A document added from memory (KnowledgeBase.add_documents): its text and metadata as
    # given, returned by get_by_ids. None for files.
    content: str | None = None
    record_metadata: Mapping[str, Any] | None = None


# --------------------------------------------------------------------------------------------
# Search side.
# --------------------------------------------------------------------------------------------


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
    rejected approaches that correlate with the query, ``runner_up`` candidates below top-k.
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
