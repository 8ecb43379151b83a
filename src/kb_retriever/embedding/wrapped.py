"""A base for embedders that wrap another library's model (the framework adapters use it)."""

from __future__ import annotations

import threading
from collections.abc import Sequence

from ..errors import ConfigError

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
                    self._dimension = len(self._probe(_PROBE))
        return self._dimension

    def _probe(self, text: str) -> Sequence[float]:
        raise NotImplementedError
