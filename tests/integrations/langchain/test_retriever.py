"""KBRetriever against a real knowledge base: options, metadata, async parity, tracing."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langchain_kb_retriever import KBRetriever

from kb_retriever import InputError, KnowledgeBase

pytestmark = pytest.mark.db

CACHE_Q = "can we use memcached as shared cache?"


def _ids_scores(docs: list[Any]) -> list[tuple[str, float]]:
    return [(d.id, d.metadata["score"]) for d in docs]


def test_default_returns_exactly_k_primary_documents(example_kb: KnowledgeBase) -> None:
    docs = KBRetriever(kb=example_kb, k=4).invoke(CACHE_Q)
    assert len(docs) == 4
    assert {d.metadata["kb"]["origin"] for d in docs} == {"primary"}
    scores = [d.metadata["score"] for d in docs]
    assert scores == sorted(scores, reverse=True)


def test_include_context_appends_expanded_and_rejected_with_unique_ids(
    example_kb: KnowledgeBase,
) -> None:
    retriever = KBRetriever(kb=example_kb, k=4)
    docs = retriever.invoke(CACHE_Q, include_context=True)
    origins = [d.metadata["kb"]["origin"] for d in docs]
    assert origins[:4] == ["primary"] * 4
    assert "graph_expansion" in origins and "rejected" in origins
    # Blocks stay grouped: primary, then graph neighbours, then rejected approaches.
    assert origins == sorted(origins, key=["primary", "graph_expansion", "rejected"].index)
    ids = [d.id for d in docs]
    assert len(ids) == len(set(ids))
    rejected = next(d for d in docs if d.metadata["kb"]["origin"] == "rejected")
    assert rejected.metadata["kb"]["document"]["canonical_type"] == "rejected-approach"
    graph = next(d for d in docs if d.metadata["kb"]["origin"] == "graph_expansion")
    assert graph.metadata["kb"]["edge_type"] and graph.metadata["kb"]["from_slug"]
    # Each block can be switched off on its own.
    only_graph = retriever.invoke(CACHE_Q, include_context=True, include_rejected=False)
    assert "rejected" not in {d.metadata["kb"]["origin"] for d in only_graph}


def test_metadata_keys(example_kb: KnowledgeBase) -> None:
    retriever = KBRetriever(kb=example_kb, k=1, filters={"canonical_types": ["decision"]})
    doc = retriever.invoke("which cache layer do we use?")[0]
    meta = doc.metadata
    kb = meta["kb"]
    assert meta["score"] == meta["relevance_score"]
    assert meta["slug"] == kb["document"]["slug"] == "dec-cache-v2"
    assert meta["source"] == "dec-cache-v2.md"
    assert meta["title"] == kb["document"]["title"]
    assert {"origin", "scores", "document", "heading_path", "chunk_id", "chunk_uid",
            "similarity"} <= set(kb)
    # Document.id is the stable chunk id (issue 15); the integer row id stays in chunk_id.
    assert doc.id == kb["chunk_uid"] and len(doc.id) == 32 and isinstance(kb["chunk_id"], int)
    assert kb["scores"]["total"] == pytest.approx(meta["score"], abs=1e-5)
    assert kb["document"]["canonical_status"] == "accepted"
    assert doc.page_content.strip()


def test_per_call_k_and_filters(example_kb: KnowledgeBase) -> None:
    retriever = KBRetriever(kb=example_kb, k=5)
    assert len(retriever.invoke("deploy rollback", k=2)) == 2
    runbooks = retriever.invoke("deploy rollback", filters={"canonical_types": ["runbook"]})
    assert runbooks
    assert {d.metadata["kb"]["document"]["canonical_type"] for d in runbooks} == {"runbook"}
    # Per-call filters merge over the constructor's, key by key.
    scoped = KBRetriever(kb=example_kb, k=5, filters={"canonical_types": ["standard"]})
    assert {d.metadata["kb"]["document"]["canonical_type"]
            for d in scoped.invoke("logging format")} == {"standard"}
    merged = scoped.invoke("logging format", filters={"canonical_types": ["runbook"]})
    assert {d.metadata["kb"]["document"]["canonical_type"] for d in merged} == {"runbook"}
    # batch forwards the same keywords to every query.
    assert [len(x) for x in retriever.batch(["cache", "kafka"], k=1)] == [1, 1]


def test_per_call_scope_never_crosses_tenants_or_projects(example_kb: KnowledgeBase) -> None:
    retriever = KBRetriever(kb=example_kb, k=3)
    assert retriever.invoke(CACHE_Q, tenant="someone-else") == []
    assert retriever.invoke(CACHE_Q, project="another-project") == []
    assert len(retriever.invoke(CACHE_Q, project=["default", "another-project"])) == 3


def test_unknown_and_bad_kwargs_are_rejected(example_kb: KnowledgeBase) -> None:
    retriever = KBRetriever(kb=example_kb)
    with pytest.raises(InputError, match="unexpected keyword.*'top_k'.*valid: k, filters"):
        retriever.invoke(CACHE_Q, top_k=3)
    with pytest.raises(InputError, match="positive integer"):
        retriever.invoke(CACHE_Q, k=0)
    with pytest.raises(InputError, match="unknown filter"):
        retriever.invoke(CACHE_Q, filters={"colour": "red"})
    # "false" was read as True (bool of a non-empty string): the context came back
    with pytest.raises(InputError, match="include_context must be True or False"):
        retriever.invoke(CACHE_Q, include_context="false")
    # per call as in the constructor: a threshold does not go with MMR (it was ignored)
    with pytest.raises(InputError, match="score_threshold goes with"):
        KBRetriever(kb=example_kb, search_type="mmr").invoke(CACHE_Q, score_threshold=100)


async def test_sync_async_parity(async_example_kb: KnowledgeBase) -> None:
    retriever = KBRetriever(kb=async_example_kb, k=4, include_context=True)
    sync_docs = retriever.invoke(CACHE_Q, filters={"tags": ["cache"]})
    async_docs = await retriever.ainvoke(CACHE_Q, filters={"tags": ["cache"]})
    assert sync_docs
    assert _ids_scores(async_docs) == _ids_scores(sync_docs)
    assert [len(x) for x in await retriever.abatch(["cache", "kafka"], k=1,
                                                    include_context=False)] == [1, 1]


class _Recorder(BaseCallbackHandler):
    def __init__(self) -> None:
        self.metadata: dict[str, Any] = {}

    def on_retriever_start(self, serialized: Any, query: str, **kwargs: Any) -> None:
        self.metadata = dict(kwargs.get("metadata") or {})


def test_langsmith_params(example_kb: KnowledgeBase) -> None:
    retriever = KBRetriever(kb=example_kb, k=1)
    params = retriever._get_ls_params()
    assert params == {
        "ls_retriever_name": "kb_retriever",
        "ls_vector_store_provider": "PGVector",
        "ls_embedding_provider": "MiniLMEmbedder",
        "ls_embedding_model": example_kb.embedder.model_id,
    }
    recorder = _Recorder()
    retriever.invoke(CACHE_Q, config={"callbacks": [recorder]})
    assert recorder.metadata["ls_retriever_name"] == "kb_retriever"
    assert recorder.metadata["ls_embedding_model"] == "all-MiniLM-L6-v2-int8"


def test_constructor_validates_k(example_kb: KnowledgeBase) -> None:
    with pytest.raises(ValueError):
        KBRetriever(kb=example_kb, k=0)
