"""The write side: what a loader, parser or chunker produces before anything touches the
database."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from .frozen import empty as _empty

__all__ = ["ChunkDraft", "DocumentDraft", "EdgeDraft"]


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
