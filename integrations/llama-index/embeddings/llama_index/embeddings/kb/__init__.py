"""Embedding bridges between kb-retriever and LlamaIndex (``llama-index-embeddings-kb``).

* :class:`KBCoreEmbedding`: a kb-retriever ``Embedder`` (the default MiniLM, say) as a
  LlamaIndex ``BaseEmbedding``, to build a ``VectorStoreIndex`` with the knowledge base's model.
* :class:`KBLlamaEmbedding`: any LlamaIndex ``BaseEmbedding`` as a kb-retriever ``Embedder``.

Example::

    from kb_retriever import KnowledgeBase
    from llama_index.embeddings.kb import KBCoreEmbedding

    with KnowledgeBase() as kb:
        embed_model = KBCoreEmbedding(kb.embedder)
"""

from .base import KBCoreEmbedding, KBLlamaEmbedding

__version__ = "0.1.0"

__all__ = ["KBCoreEmbedding", "KBLlamaEmbedding", "__version__"]
