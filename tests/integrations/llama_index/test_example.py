"""examples/llamaindex_query_engine.py runs against a test database and answers correctly."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest

from kb_retriever import MiniLMEmbedder

from ..examples import load_example


class MemoEmbedder:
    """The session's MiniLM, remembering vectors: the example embeds every chunk twice (the
    knowledge base and the in-memory index), and the second pass need not cost a second."""

    def __init__(self, inner: MiniLMEmbedder) -> None:
        self.inner = inner
        self.model_id, self.dimension = inner.model_id, inner.dimension
        self.memo: dict[str, list[float]] = {}

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        missing = list(dict.fromkeys(t for t in texts if t not in self.memo))
        if missing:
            self.memo.update(zip(missing, self.inner.embed_documents(missing), strict=True))
        return [self.memo[t] for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self.inner.embed_query(text)


def test_example_runs(new_database: Callable[[], str], minilm: MiniLMEmbedder,
                      capsys: pytest.CaptureFixture[str]) -> None:
    example = load_example("llamaindex_query_engine")

    assert example.main(new_database(), embedder=MemoEmbedder(minilm)) == 0
    out = capsys.readouterr().out
    assert "=== KBRetriever + KBSynthesizer ===" in out
    assert "=== VectorStoreIndex retriever + KBNodePostprocessor ===" in out
    assert "## Context" in out and "(retrieval score " in out
    assert "answer sources: ['dec-cache-v2', 'dec-cache-v2']" in out


def test_vector_store_example_runs(new_database: Callable[[], str], minilm: MiniLMEmbedder,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    example = load_example("llamaindex_vector_store")
    response = example.main(database_url=new_database(), embedder=minilm)
    top = response.source_nodes[0].node
    assert top.metadata["file_name"] == "dec-cache-v2.md"
    assert top.metadata["kb"]["document"]["canonical_status"] == "accepted"
    statuses = [n.node.metadata["kb"]["document"]["canonical_status"]
                for n in response.source_nodes]
    assert "superseded" not in statuses[:1]
    assert "documents indexed" in capsys.readouterr().out
