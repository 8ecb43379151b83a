"""LangChain adapters for kb-retriever: thin converters over the framework-free core.

* :class:`KBRetriever` — a ``BaseRetriever`` (per-call ``k``/``filters``, real async).
* :class:`KBCompressor` — the core rerank + canonical trust gradient as a
  ``BaseDocumentCompressor`` for documents of any retriever.
* :class:`KBPromptComposer` — a runnable rendering the rejected / related / context blocks.
* :func:`kb_search_tool` — a ``StructuredTool`` with typed filters, for agents.
* :class:`LangChainEmbedder` — any LangChain ``Embeddings`` as the core's embedder
  (``KBEmbeddings``, its old name, is deprecated).
* :class:`KBVectorStore` — a ``VectorStore``: LangChain documents in, the pipeline's ranking
  out (``from_documents``, ``add_documents``, ``delete``, ``get_by_ids``, async twins).

Example::

    from kb_retriever import KnowledgeBase
    from langchain_kb_retriever import KBPromptComposer, KBRetriever

    with KnowledgeBase() as kb:
        kb.ingest(["examples/kb"])
        retriever = KBRetriever(kb=kb, k=4)
        print(KBPromptComposer(retriever=retriever).invoke("which cache do we use?"))
"""

from .compressors import KBCompressor
from .embeddings import LangChainEmbedder
from .prompt import KBPromptComposer
from .retrievers import KBRetriever
from .tools import KBSearchFilters, KBSearchInput, kb_search_tool
from .vectorstores import KBVectorStore

__version__ = "0.1.0"

__all__ = [
    "KBCompressor",
    "LangChainEmbedder",
    "KBPromptComposer",
    "KBRetriever",
    "KBSearchFilters",
    "KBSearchInput",
    "KBVectorStore",
    "__version__",
    "kb_search_tool",
]


def __getattr__(name: str) -> object:
    if name == "KBEmbeddings":
        import warnings

        warnings.warn("KBEmbeddings is now LangChainEmbedder (it wraps a LangChain Embeddings "
                      "for the core); the old name goes in the next release",
                      DeprecationWarning, stacklevel=2)
        return LangChainEmbedder
    raise AttributeError(f"module 'langchain_kb_retriever' has no attribute {name!r}")
