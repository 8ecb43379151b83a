"""LangChainEmbedder: a LangChain Embeddings model as the core's embedder, end to end."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from langchain_core.embeddings import DeterministicFakeEmbedding
from langchain_kb_retriever import KBRetriever, LangChainEmbedder

from kb_retriever import ConfigError, KnowledgeBase

EXAMPLE_KB = Path(__file__).resolve().parents[3] / "examples" / "kb"


class _Counting(DeterministicFakeEmbedding):
    calls: int = 0

    def embed_query(self, text: str) -> list[float]:
        self.calls += 1
        return super().embed_query(text)


def test_dimension_is_probed_lazily_once() -> None:
    inner = _Counting(size=48)
    emb = LangChainEmbedder(inner)
    assert inner.calls == 0
    assert emb.dimension == 48 and emb.dimension == 48
    assert inner.calls == 1
    assert emb.model_id == "langchain:_Counting:48"
    assert LangChainEmbedder(inner, dimension=48, model_id="m").model_id == "m"
    with pytest.raises(ConfigError):
        LangChainEmbedder(object())  # type: ignore[arg-type]


@pytest.mark.db
def test_knowledge_base_runs_on_a_langchain_model(new_database: Callable[[], str]) -> None:
    emb = LangChainEmbedder(DeterministicFakeEmbedding(size=64))
    with KnowledgeBase(embedder=emb, database_url=new_database()) as kb:
        report = kb.ingest([EXAMPLE_KB / "dec-cache-v2.md", EXAMPLE_KB / "rej-memcached-2023.md"])
        assert not report.failed
        retriever = KBRetriever(kb=kb, k=2)
        docs = retriever.invoke("redis cache layer")
        assert len(docs) == 2
        params = retriever._get_ls_params()
        assert params["ls_embedding_provider"] == "DeterministicFakeEmbedding"
        assert params["ls_embedding_model"] == "langchain:DeterministicFakeEmbedding:64"


def test_the_old_name_still_imports_with_a_warning() -> None:
    import langchain_kb_retriever

    with pytest.warns(DeprecationWarning, match="LangChainEmbedder"):
        old = langchain_kb_retriever.KBEmbeddings
    assert old is LangChainEmbedder
