"""LlamaIndex retriever for kb-retriever (distribution ``llama-index-kb-retriever``).

Example::

    from kb_retriever import KnowledgeBase
    from llama_index.retrievers.kb import KBRetriever

    with KnowledgeBase(project="docs") as kb:
        nodes = KBRetriever(kb, k=5).retrieve("what cache layer did we standardise on?")

The node postprocessor lives in :mod:`llama_index.postprocessor.kb`.
"""

from .base import KBQueryBundle, KBRetriever
from .convert import (
    HIDDEN_METADATA_KEYS,
    VISIBLE_METADATA_KEYS,
    node_to_candidate,
    nodes_to_result,
    result_to_nodes,
)
from .embedding import KBCoreEmbedding, KBLlamaEmbedding
from .synthesizer import KBSynthesizer

__all__ = [
    "HIDDEN_METADATA_KEYS",
    "VISIBLE_METADATA_KEYS",
    "KBCoreEmbedding",
    "KBLlamaEmbedding",
    "KBQueryBundle",
    "KBRetriever",
    "KBSynthesizer",
    "node_to_candidate",
    "nodes_to_result",
    "result_to_nodes",
]
