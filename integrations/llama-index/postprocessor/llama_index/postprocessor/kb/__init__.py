"""LlamaIndex node postprocessor for kb-retriever (distribution ``llama-index-postprocessor-kb``).

Example::

    from llama_index.postprocessor.kb import KBNodePostprocessor

    nodes = KBNodePostprocessor(top_n=5).postprocess_nodes(nodes, query_str="cache layer?")
"""

from .base import KBNodePostprocessor

__version__ = "0.1.0"

__all__ = ["KBNodePostprocessor", "__version__"]
