"""Embedding bridges, both directions.

* :class:`KBLlamaEmbedding`: any LlamaIndex ``BaseEmbedding`` as a kb-retriever ``Embedder``
  (to ingest and search a knowledge base with, say, ``OpenAIEmbedding``).
* :class:`KBCoreEmbedding`: a kb-retriever ``Embedder`` (e.g. the default MiniLM) as a LlamaIndex
  ``BaseEmbedding`` (to build a ``VectorStoreIndex`` with the same model as the knowledge base).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.bridge.pydantic import PrivateAttr

from kb_retriever import Embedder
from kb_retriever.embedding.wrapped import WrappedEmbedder

__all__ = ["KBCoreEmbedding", "KBLlamaEmbedding"]



class KBLlamaEmbedding(WrappedEmbedder):
    """A LlamaIndex ``BaseEmbedding`` as a kb-retriever :class:`~kb_retriever.Embedder`.

    ``model_id`` (it keys the embedding cache) defaults to the embedding's ``model_name``, or
    its class name when that is ``"unknown"``. ``dimension`` is probed lazily with one
    embedding call unless given, so constructing does no I/O.

    Example::

        from kb_retriever import KnowledgeBase
        from llama_index.embeddings.openai import OpenAIEmbedding

        embedder = KBLlamaEmbedding(OpenAIEmbedding(model="text-embedding-3-small"),
                                    dimension=1536)
        with KnowledgeBase(embedder=embedder) as kb:
            kb.ingest(["docs/"])
    """

    def __init__(self, embedding: BaseEmbedding, *, dimension: int | None = None,
                 model_id: str | None = None) -> None:
        if not isinstance(embedding, BaseEmbedding):
            raise TypeError("embedding must be a llama_index BaseEmbedding, "
                            f"not {type(embedding).__name__}")
        name = embedding.model_name
        super().__init__(model_id=model_id or (name if name and name != "unknown"
                                               else f"llama-index:{embedding.class_name()}"),
                         dimension=dimension)
        self.embedding = embedding

    def _probe(self, text: str) -> list[float]:
        return list(self.embedding.get_text_embedding(text))

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        return [list(v) for v in self.embedding.get_text_embedding_batch(list(texts))]

    def embed_query(self, text: str) -> list[float]:
        return list(self.embedding.get_query_embedding(text))


class KBCoreEmbedding(BaseEmbedding):
    """A kb-retriever :class:`~kb_retriever.Embedder` as a LlamaIndex ``BaseEmbedding``.

    Example::

        from kb_retriever import MiniLMEmbedder
        from llama_index.core import VectorStoreIndex

        index = VectorStoreIndex(nodes, embed_model=KBCoreEmbedding(MiniLMEmbedder()))
    """

    _embedder: Embedder = PrivateAttr()

    def __init__(self, embedder: Embedder, **kwargs: object) -> None:
        if not isinstance(embedder, Embedder):
            raise TypeError("embedder must provide model_id, dimension, embed_documents, "
                            "embed_query")
        kwargs.setdefault("model_name", embedder.model_id)
        kwargs.setdefault("embed_batch_size", 32)  # the MiniLM embedder batches 32 at a time
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self._embedder = embedder

    @classmethod
    def class_name(cls) -> str:
        return "KBCoreEmbedding"

    def _get_query_embedding(self, query: str) -> list[float]:
        return list(self._embedder.embed_query(query))

    def _get_text_embedding(self, text: str) -> list[float]:
        return list(self._embedder.embed_documents([text])[0])

    def _get_text_embeddings(self, texts: list[str]) -> list[list[float]]:
        return [list(v) for v in self._embedder.embed_documents(texts)]

    # The core embedders are synchronous CPU work: run them off the event loop.
    async def _aget_query_embedding(self, query: str) -> list[float]:
        return await asyncio.to_thread(self._get_query_embedding, query)

    async def _aget_text_embedding(self, text: str) -> list[float]:
        return await asyncio.to_thread(self._get_text_embedding, text)

    async def _aget_text_embeddings(self, texts: list[str]) -> list[list[float]]:
        return await asyncio.to_thread(self._get_text_embeddings, texts)
