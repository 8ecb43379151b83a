"""LlamaIndex vector store over kb-retriever (distribution ``llama-index-vector-stores-kb``).

Example::

    from kb_retriever import KnowledgeBase
    from llama_index.core import StorageContext, VectorStoreIndex
    from llama_index.embeddings.kb import KBCoreEmbedding
    from llama_index.vector_stores.kb import KBVectorStore

    with KnowledgeBase() as kb:
        storage = StorageContext.from_defaults(vector_store=KBVectorStore(kb))
        index = VectorStoreIndex.from_documents(docs, storage_context=storage,
                                                embed_model=KBCoreEmbedding(kb.embedder))
        print(index.as_query_engine(llm=llm).query("which cache do we use?"))
"""

from .base import KBVectorStore
from .filters import to_kb_filters

__version__ = "0.1.0"

__all__ = ["KBVectorStore", "__version__", "to_kb_filters"]
