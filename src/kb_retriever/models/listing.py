"""What a listing of the knowledge base shows: its projects and their documents, in brief."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["DocumentSummary", "ProjectSummary"]


@dataclass(frozen=True)
class ProjectSummary:
    """A project that holds documents: how many, their chunks, and the embedding model it is
    bound to (``kb_projects``; None for a project written before models were recorded)."""

    project: str
    documents: int
    chunks: int
    model_id: str | None
    dimension: int | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class DocumentSummary:
    """A document in brief: its id (a file's path, or the id it was added with), key, slug,
    title, canonical type and status, and its chunk count."""

    id: str
    doc_key: str
    slug: str | None
    title: str
    source_type: str
    canonical_type: str | None
    canonical_status: str | None
    chunks: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
