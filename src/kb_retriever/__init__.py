"""kb-retriever: retrieval with a trust gradient for engineering knowledge bases.

PostgreSQL + pgvector candidates (vector + full-text, fused by weighted RRF), a transparent
weighted-sum reranker with the canonical trust gradient, graph expansion, rejected-approach
injection, and a prompt composer. Framework-free: adapters live in their own distributions.
"""

from .documents import ChunkRecord, DocumentRecord, StoredChunk, StoredDocument
from .embedding import Embedder, HashingEmbedder, MiniLMEmbedder
from .errors import (
    ConfigError,
    EmbeddingError,
    FilterError,
    IngestError,
    InputError,
    KbError,
    SchemaError,
    StoreError,
)
from .filters import SearchFilters
from .ingestion import IngestReport
from .kb import KnowledgeBase
from .models import Candidate, DocumentRef, Hit, Origin, ScoreBreakdown, SearchResult
from .prompt import PromptTemplate, compose_prompt
from .settings import Settings, load_settings

__version__ = "0.1.0"

__all__ = [
    "Candidate", "ChunkRecord", "ConfigError", "DocumentRecord", "DocumentRef", "Embedder",
    "EmbeddingError", "FilterError",
    "HashingEmbedder", "Hit", "IngestError", "IngestReport", "InputError", "KbError",
    "KnowledgeBase", "MiniLMEmbedder", "Origin", "PromptTemplate", "ScoreBreakdown",
    "SchemaError", "SearchFilters", "SearchResult", "Settings", "StoreError", "StoredChunk",
    "StoredDocument", "compose_prompt",
    "load_settings", "__version__",
]
