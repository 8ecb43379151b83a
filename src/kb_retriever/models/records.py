"""Documents from memory, in and out: the records a caller adds and the documents it reads back."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .frozen import empty as _empty

__all__ = ["ChunkRecord", "DocumentRecord", "StoredChunk", "StoredDocument"]


@dataclass(frozen=True)
class ChunkRecord:
    """A chunk the caller split (and maybe embedded) already; kept exactly as given."""

    text: str
    id: str | None = None
    metadata: Mapping[str, Any] = field(default_factory=_empty)
    embedding: Sequence[float] | None = None


@dataclass(frozen=True)
class DocumentRecord:
    """An in-memory document for :meth:`KnowledgeBase.add_documents`.

    ``metadata`` may carry the canonical fields (``slug``, ``type``, ``status``,
    ``retrieval_priority``, ``tags``, ``supersedes``, edge lists …), as may a frontmatter block
    at the top of ``text`` (the metadata wins where both give a field). With ``chunks`` the
    text is not split again: the chunks are stored as given.
    """

    text: str = ""
    metadata: Mapping[str, Any] = field(default_factory=_empty)
    id: str | None = None
    chunks: tuple[ChunkRecord, ...] | None = None


@dataclass(frozen=True)
class StoredChunk:
    """A chunk as stored: its stable id, its document's id, text and metadata."""

    id: str
    document_id: str
    text: str
    order: int
    heading_path: str = ""
    metadata: Mapping[str, Any] = field(default_factory=_empty)
    embedding: tuple[float, ...] | None = None  # only when asked for (with_embeddings=True)


@dataclass(frozen=True)
class StoredDocument:
    """A document as stored. ``text``/``metadata`` are exactly what was added for a document
    added from memory; for a file, its chunks' text and its frontmatter."""

    id: str
    text: str
    metadata: Mapping[str, Any]
    chunks: tuple[StoredChunk, ...]
    title: str
    source_type: str
    is_canonical: bool = False
    canonical_type: str | None = None
    canonical_status: str | None = None
    slug: str | None = None
