"""A base for embedders that wrap another library's model (the framework adapters use it)."""

from __future__ import annotations

import threading
from collections.abc import Sequence

from ..errors import ConfigError, EmbeddingError
from .base import check_vector, embedder_errors

_PROBE = "kb-retriever dimension probe"


class WrappedEmbedder:
    """``model_id`` plus a ``dimension`` that, unless given, is probed once, lazily.

    Subclasses implement :meth:`_probe` (embed one text with the wrapped model),
    ``embed_documents`` and ``embed_query``. Constructing does no I/O; the knowledge base reads
    ``dimension`` when it opens.
    """

    def __init__(self, *, model_id: str, dimension: int | None = None) -> None:
        if dimension is not None and (isinstance(dimension, bool) or dimension < 1):
            raise ConfigError(f"dimension must be a positive integer, got {dimension!r}")
        self._model_id = model_id
        self._dimension = dimension
        self._lock = threading.Lock()

    @property
    def model_id(self) -> str:
        return self._model_id

    @property
    def dimension(self) -> int:
        if self._dimension is None:
            with self._lock:  # one probe even when several threads open knowledge bases
                if self._dimension is None:
                    self._dimension = self._probed()
        return self._dimension

    def _probed(self) -> int:
        """The dimension of the wrapped model's vector for one text, checked as every vector
        is (a nested or empty answer would register a 1-d or 0-d model in the database), its
        failure an :class:`EmbeddingError`."""
        with embedder_errors():
            vector = self._probe(_PROBE)
        size = len(vector) if hasattr(vector, "__len__") else 0
        if size < 1:
            raise EmbeddingError(f"embedder {self._model_id!r} returned an empty or "
                                 "non-numeric vector for its dimension probe")
        return len(check_vector(vector, dimension=size, model_id=self._model_id))

    def _probe(self, text: str) -> Sequence[float]:
        raise NotImplementedError
