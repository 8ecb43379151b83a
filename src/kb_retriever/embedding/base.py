"""The embedder protocol and the one place that checks what an embedder returns."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Protocol, runtime_checkable

import numpy as np

from ..errors import EmbeddingError, KbError
from ..vocabulary import letters


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


def reads(embedder: Embedder, text: str) -> bool:
    """Whether ``embedder``'s model reads ``text``: the writing systems it was trained on (its
    optional ``scripts`` attribute, names of :data:`~kb_retriever.vocabulary.SCRIPTS`; absent
    or None, as for any embedder that does not say: every one) hold at least half the text's
    letters. A text without letters is read.

    >>> class English:
    ...     scripts = frozenset({"latin"})
    >>> reads(English(), "Which ERP do we run?"), reads(English(), "基幹システムはどこで動いている？")
    (True, False)
    >>> reads(object(), "基幹システムはどこで動いている？"), reads(English(), "ERP 2025")
    (True, True)
    """
    scripts = getattr(embedder, "scripts", None)
    if scripts is None:
        return True
    return 2 * letters(text, scripts) >= letters(text)


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
    return [check_vector(vec, dimension=dimension, model_id=model_id, item=i).tolist()
            for i, vec in enumerate(vectors)]


def check_vector(vec: Any, *, dimension: int, model_id: str, item: int = 0) -> np.ndarray:
    """One vector of an embedder's output as a float64 array, checked as :func:`check_vectors`
    does (numpy does the per-element work: the query path checks every search's vector).

    >>> check_vector([0.6, 0.8], dimension=2, model_id="m").tolist()
    [0.6, 0.8]
    """
    try:
        if isinstance(vec, (str, bytes)):
            raise TypeError(type(vec).__name__)
        values = np.asarray(vec, dtype=np.float64)
    except (TypeError, ValueError, OverflowError):
        values = None
    if values is None or values.ndim != 1:
        # None, strings or nested lists: a broken embedder, not bad user input.
        raise EmbeddingError(
            f"embedder {model_id!r} returned a non-numeric vector (item {item})"
        )
    if len(values) != dimension:
        raise EmbeddingError(
            f"embedder {model_id!r} returned a {len(values)}-d vector (item {item}); "
            f"expected {dimension}-d"
        )
    with np.errstate(over="ignore"):  # pgvector stores float32: 1e300 would become inf
        if not np.isfinite(values.astype(np.float32)).all():
            raise EmbeddingError(f"embedder {model_id!r} returned NaN or inf (item {item}), "
                                 "or a value beyond float32")
    if not values.astype(np.float32).any():  # (1e-50 is 0 in the float32 pgvector keeps)
        # A zero vector has no cosine direction; pgvector would return NaN distances.
        raise EmbeddingError(f"embedder {model_id!r} returned a zero vector (item {item})")
    return values
