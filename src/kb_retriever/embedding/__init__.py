"""Embedders: the :class:`Embedder` protocol, the default MiniLM model and a hashing embedder."""

from .base import Embedder, check_vectors, embedder_errors
from .hashing import HashingEmbedder
from .minilm import MiniLMEmbedder

__all__ = ["Embedder", "HashingEmbedder", "MiniLMEmbedder", "check_vectors", "default_embedder",
           "embedder_errors"]


def default_embedder(name: str = "minilm") -> Embedder:
    """The embedder named by ``KB_EMBEDDER`` (``minilm``, the default, or ``hashing``)."""
    if name == "hashing":
        return HashingEmbedder()
    return MiniLMEmbedder()
