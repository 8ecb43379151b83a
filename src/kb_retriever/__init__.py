"""kb-retriever: retrieval with a trust gradient for engineering knowledge bases.

PostgreSQL + pgvector candidates (vector + full-text, fused by weighted RRF), a transparent
weighted-sum reranker with the canonical trust gradient, graph expansion, rejected-approach
injection, and a prompt composer. Framework-free: adapters live in their own distributions.

The names below are imported on first use (PEP 562), so ``import kb_retriever`` and
``kb-retriever --help`` do not load numpy, psycopg and the model runtime.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .errors import (
    ConfigError,
    EmbeddingError,
    FilterError,
    IngestError,
    IngestInterruptedError,
    InputError,
    KbError,
    QueryTimeoutError,
    SchemaError,
    StoreError,
    UnavailableError,
    WriteError,
)

if TYPE_CHECKING:
    from .embedding import Embedder, HashingEmbedder, MiniLMEmbedder
    from .filters import SearchFilters
    from .kb import KnowledgeBase
    from .models import (
        Candidate,
        ChunkRecord,
        DocumentRecord,
        DocumentRef,
        Hit,
        Origin,
        ScoreBreakdown,
        SearchResult,
        StoredChunk,
        StoredDocument,
    )
    from .prompt import PromptTemplate, compose_prompt
    from .search.meta import SearchMeta
    from .settings import Settings, load_settings
    from .write.from_files import IngestReport
    from .write.reembed import ReembedReport

__version__ = "0.1.0"

# name -> the module that defines it
_LAZY = {
    "Embedder": ".embedding", "HashingEmbedder": ".embedding", "MiniLMEmbedder": ".embedding",
    "SearchFilters": ".filters", "IngestReport": ".write.from_files", "KnowledgeBase": ".kb",
    "Candidate": ".models", "DocumentRef": ".models", "Hit": ".models", "Origin": ".models",
    "ScoreBreakdown": ".models", "SearchResult": ".models", "SearchMeta": ".search.meta",
    "PromptTemplate": ".prompt",
    "compose_prompt": ".prompt", "Settings": ".settings", "load_settings": ".settings",
    "ChunkRecord": ".models", "DocumentRecord": ".models", "StoredChunk": ".models",
    "StoredDocument": ".models", "ReembedReport": ".write.reembed",
}

__all__ = [
    "Candidate", "ChunkRecord", "ConfigError", "DocumentRecord", "DocumentRef", "Embedder",
    "EmbeddingError", "FilterError",
    "HashingEmbedder", "Hit", "IngestError", "IngestInterruptedError", "IngestReport",
    "InputError", "KbError", "QueryTimeoutError",
    "KnowledgeBase", "MiniLMEmbedder", "Origin", "PromptTemplate", "ReembedReport",
    "ScoreBreakdown",
    "SchemaError", "SearchFilters", "SearchMeta", "SearchResult", "Settings", "StoreError",
    "UnavailableError", "WriteError",
    "StoredChunk",
    "StoredDocument", "compose_prompt",
    "load_settings", "__version__",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'kb_retriever' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value  # the next access is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
