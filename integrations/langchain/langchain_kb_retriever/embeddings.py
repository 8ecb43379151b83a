"""``LangChainEmbedder``: any LangChain ``Embeddings`` as a kb-retriever ``Embedder``.

It is the bridge from LangChain into the core, not a LangChain ``Embeddings`` itself; its old
name ``LangChainEmbedder`` (which read like one) still imports, with a ``DeprecationWarning``, for
one release."""

from __future__ import annotations

from collections.abc import Sequence

from langchain_core.embeddings import Embeddings

from kb_retriever import ConfigError
from kb_retriever.embedding.wrapped import WrappedEmbedder

__all__ = ["LangChainEmbedder"]


class LangChainEmbedder(WrappedEmbedder):
    """Wrap a LangChain ``Embeddings`` so a :class:`~kb_retriever.KnowledgeBase` can use it.

    The core needs a ``model_id`` (it keys the embedding cache, so two models never share
    vectors) and a fixed ``dimension``. ``model_id`` defaults to the wrapped class name plus
    its ``model``/``model_name`` attribute; ``dimension``, unless given, is found by embedding
    one probe string the first time it is read (the knowledge base reads it when it opens).

    Example::

        from kb_retriever import KnowledgeBase
        from langchain_core.embeddings import DeterministicFakeEmbedding
        from langchain_kb_retriever import LangChainEmbedder

        embedder = LangChainEmbedder(DeterministicFakeEmbedding(size=256))
        with KnowledgeBase(embedder=embedder) as kb:
            kb.ingest(["examples/kb"])
    """

    def __init__(self, embeddings: Embeddings, *, model_id: str | None = None,
                 dimension: int | None = None) -> None:
        if not isinstance(embeddings, Embeddings):
            raise ConfigError(
                f"LangChainEmbedder wraps a langchain_core Embeddings, got {type(embeddings).__name__}"
            )
        super().__init__(model_id=model_id or _default_model_id(embeddings), dimension=dimension)
        self.embeddings = embeddings

    @property
    def provider_name(self) -> str:
        """The wrapped class name (what LangSmith shows as the embedding provider)."""
        return type(self.embeddings).__name__

    def _probe(self, text: str) -> list[float]:
        return self.embeddings.embed_query(text)

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        return self.embeddings.embed_documents(list(texts))

    def embed_query(self, text: str) -> list[float]:
        return self.embeddings.embed_query(text)

    def __repr__(self) -> str:
        return f"LangChainEmbedder({self.provider_name}, model_id={self._model_id!r})"


def _default_model_id(embeddings: Embeddings) -> str:
    name = type(embeddings).__name__
    for attr in ("model", "model_name", "model_id"):
        value = getattr(embeddings, attr, None)
        if isinstance(value, str) and value:
            return f"langchain:{name}:{value}"
    size = getattr(embeddings, "size", None)  # the fake embeddings of langchain_core
    return f"langchain:{name}" + (f":{size}" if isinstance(size, int) else "")
