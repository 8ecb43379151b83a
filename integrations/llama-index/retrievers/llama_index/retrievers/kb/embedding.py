"""Deprecated: the embedding bridges moved to ``llama_index.embeddings.kb``
(distribution ``llama-index-embeddings-kb``); this path works for one more release."""

from __future__ import annotations

import warnings

from llama_index.embeddings.kb import KBCoreEmbedding, KBLlamaEmbedding

warnings.warn("llama_index.retrievers.kb.embedding is deprecated: import KBCoreEmbedding and "
              "KBLlamaEmbedding from llama_index.embeddings.kb", DeprecationWarning, stacklevel=2)

__all__ = ["KBCoreEmbedding", "KBLlamaEmbedding"]
