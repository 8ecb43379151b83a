"""The embedder protocol and the one place that checks what an embedder returns."""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Protocol, runtime_checkable

from ..errors import EmbeddingError, KbError


@runtime_checkable
class Embedder(Protocol):
    """Anything that turns text into fixed-size vectors.

    ``model_id`` names the model (it keys the embedding cache, so two models never share
    cached vectors); ``dimension`` is fixed per database at first use.
    """

    @property
    def model_id(self) -> str: ...

    @property
    def dimension(self) -> int: ...

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]: ...

    def embed_query(self, text: str) -> list[float]: ...


@contextmanager
def embedder_errors() -> Iterator[None]:
    """Turn any embedder's own exception (LangChain, LlamaIndex, ...) into an
    :class:`EmbeddingError`; the library's own errors pass through unchanged."""
    try:
        yield
    except KbError:
        raise
    except Exception as exc:
        raise EmbeddingError(f"the embedder failed: {type(exc).__name__}: {exc}") from exc


def check_vectors(vectors: Sequence[Sequence[float]], *, count: int, dimension: int,
                  model_id: str) -> list[list[float]]:
    """Validate an embedder's output: right count, right dimension, finite, non-zero."""
    if vectors is None or isinstance(vectors, (str, bytes)) or not hasattr(vectors, "__len__"):
        raise EmbeddingError(
            f"embedder {model_id!r} returned {type(vectors).__name__}, not a list of vectors"
        )
    if len(vectors) != count:
        raise EmbeddingError(
            f"embedder {model_id!r} returned {len(vectors)} vectors for {count} texts"
        )
    out: list[list[float]] = []
    for i, vec in enumerate(vectors):
        try:
            if isinstance(vec, (str, bytes)):
                raise TypeError(type(vec).__name__)
            values = [float(x) for x in vec]
        except (TypeError, ValueError):
            # None, strings or nested lists: a broken embedder, not bad user input.
            raise EmbeddingError(
                f"embedder {model_id!r} returned a non-numeric vector (item {i})"
            ) from None
        if len(values) != dimension:
            raise EmbeddingError(
                f"embedder {model_id!r} returned a {len(values)}-d vector (item {i}); "
                f"expected {dimension}-d"
            )
        if not all(math.isfinite(x) for x in values):
            raise EmbeddingError(f"embedder {model_id!r} returned NaN or inf (item {i})")
        if not any(values):
            # A zero vector has no cosine direction; pgvector would return NaN distances.
            raise EmbeddingError(f"embedder {model_id!r} returned a zero vector (item {i})")
        out.append(values)
    return out
