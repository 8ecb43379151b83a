"""Frozen data passed between stages; stages never mutate it, they return new objects
(``dataclasses.replace``).

``drafts``: what the write side produces from files and records; ``records``: documents added
from memory and read back; ``listing``: projects and documents in brief; ``results``:
candidates, hits and the search result; ``base``: the fast constructor they share.
"""

from ..vocabulary import CANONICAL_STATUSES, CANONICAL_TYPES, SOURCE_TYPES
from .drafts import ChunkDraft, DocumentDraft, EdgeDraft
from .frozen import construct
from .listing import DocumentSummary, ProjectSummary
from .records import ChunkRecord, DocumentRecord, StoredChunk, StoredDocument
from .results import Candidate, DocumentRef, Hit, Origin, ScoreBreakdown, SearchResult

__all__ = [
    "CANONICAL_STATUSES", "CANONICAL_TYPES", "SOURCE_TYPES", "Candidate", "ChunkDraft",
    "ChunkRecord", "DocumentDraft", "DocumentRecord", "DocumentRef", "DocumentSummary",
    "EdgeDraft", "Hit", "Origin", "ProjectSummary", "ScoreBreakdown", "SearchResult",
    "StoredChunk", "StoredDocument", "construct",
]
