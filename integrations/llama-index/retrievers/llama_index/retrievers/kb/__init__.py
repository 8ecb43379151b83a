"""LlamaIndex retriever for kb-retriever (distribution ``llama-index-retrievers-kb``).

Example::

    from kb_retriever import KnowledgeBase
    from llama_index.retrievers.kb import KBRetriever

    with KnowledgeBase(project="docs") as kb:
        nodes = KBRetriever(kb, k=5).retrieve("what cache layer did we standardise on?")

The node postprocessor lives in :mod:`llama_index.postprocessor.kb`.
"""

import warnings
from typing import Any

from .base import KBQueryBundle, KBRetriever
from .convert import (
    HIDDEN_METADATA_KEYS,
    VISIBLE_METADATA_KEYS,
    foreign,
    nodes_to_result,
    result_to_nodes,
)
from .synthesizer import KBSynthesizer

__version__ = "0.1.0"

# Moved to llama_index.embeddings.kb (llama-index-embeddings-kb); kept here for one release.
_MOVED = {"KBCoreEmbedding", "KBLlamaEmbedding"}


def __getattr__(name: str) -> Any:
    if name in _MOVED:
        warnings.warn(f"llama_index.retrievers.kb.{name} is deprecated: import it from "
                      "llama_index.embeddings.kb", DeprecationWarning, stacklevel=2)
        import llama_index.embeddings.kb as moved

        value = globals()[name] = getattr(moved, name)  # warn once per process
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

__all__ = [
    "HIDDEN_METADATA_KEYS",
    "VISIBLE_METADATA_KEYS",
    "KBQueryBundle",
    "KBRetriever",
    "KBSynthesizer",
    "foreign",
    "nodes_to_result",
    "result_to_nodes",
    "__version__",
]
