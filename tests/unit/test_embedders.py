"""The small embedders' edge cases: a wrapped model's dimension probe, the hashing embedder's
texts without a word."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from kb_retriever import EmbeddingError, HashingEmbedder
from kb_retriever.embedding.wrapped import WrappedEmbedder


class _Probed(WrappedEmbedder):
    def __init__(self, answer: object) -> None:
        super().__init__(model_id="probe-test")
        self._answer = answer

    def _probe(self, text: str) -> Sequence[float]:
        if isinstance(self._answer, Exception):
            raise self._answer
        return self._answer  # type: ignore[return-value]

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        raise NotImplementedError

    def embed_query(self, text: str) -> list[float]:
        raise NotImplementedError


@pytest.mark.parametrize("answer", [[], np.ones((1, 384)), [[0.1, 0.2]], "abc",
                                    [float("nan"), 1.0], ConnectionError("model server down")])
def test_a_wrapped_models_bad_probe_is_an_embedding_error(answer: object) -> None:
    """A probe answering ``[]`` gave a 0-d model, a (1, 384) array a 1-d one (registered in
    the database when the knowledge base opened); one that raised came out raw."""
    with pytest.raises(EmbeddingError):
        _ = _Probed(answer).dimension


def test_a_wrapped_models_probe_gives_its_dimension() -> None:
    assert _Probed(np.arange(1, 9, dtype=np.float32)).dimension == 8


def test_texts_without_an_ascii_word_are_not_all_one_vector() -> None:
    """Every text without an ASCII word had the same fixed vector: a Chinese query matched
    every Chinese, Cyrillic or punctuation-only chunk with cosine 1."""
    emb = HashingEmbedder(256)
    zh, ru, bang, zh_again = (np.array(v) for v in emb.embed_documents(
        ["缓存层是什么", "Кэш сессий", "!!!", "缓存层是什么"]))
    assert float(zh @ zh_again) == pytest.approx(1.0)
    assert max(abs(float(zh @ ru)), abs(float(zh @ bang)), abs(float(ru @ bang))) < 0.5
    assert all(float(np.linalg.norm(v)) == pytest.approx(1.0) for v in (zh, ru, bang))
