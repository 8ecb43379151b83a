"""The adapters inside LlamaIndex: query engines, tools, synthesizer, embedding bridges."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from llama_index.core import VectorStoreIndex
from llama_index.core.embeddings import MockEmbedding
from llama_index.core.llms import MockLLM
from llama_index.core.query_engine import RetrieverQueryEngine
from llama_index.core.schema import TextNode
from llama_index.core.tools import RetrieverTool
from llama_index.embeddings.kb import KBCoreEmbedding, KBLlamaEmbedding
from llama_index.postprocessor.kb import KBNodePostprocessor
from llama_index.retrievers.kb import KBRetriever, KBSynthesizer

from kb_retriever import HashingEmbedder, KnowledgeBase

from .conftest import EXAMPLE_KB
from .test_retriever import ALL_K, ALL_ORIGINS, CACHE

REJECTED = "## \u26a0 REJECTED APPROACHES"
RELATED = "## \U0001f4ce RELATED CONTEXT"


def test_query_engine_with_kb_synthesizer_sends_the_three_blocks(kb: KnowledgeBase) -> None:
    retriever = KBRetriever(kb, k=ALL_K, include_context=True)
    engine = RetrieverQueryEngine(retriever=retriever,
                                  response_synthesizer=KBSynthesizer(llm=MockLLM(), project="p"))
    response = engine.query(ALL_ORIGINS)
    expected = retriever.retrieve(ALL_ORIGINS)
    assert [(n.node_id, n.score) for n in response.source_nodes] == [
        (n.node_id, n.score) for n in expected]
    text = response.response  # MockLLM echoes the system + user messages
    assert text.startswith("system: You are the knowledge assistant")
    assert text.index(REJECTED) < text.index(RELATED) < text.index("## Context")
    assert "- **[rej-memcached-2023]**" in text
    assert "From edge `" in text and "Project: p" in text
    assert f"user: {ALL_ORIGINS}" in text


@pytest.mark.asyncio(loop_scope="session")
async def test_async_query_engine_and_tool(akb: KnowledgeBase) -> None:
    retriever = KBRetriever(akb, k=2, include_context=True)
    engine = RetrieverQueryEngine(retriever=retriever,
                                  response_synthesizer=KBSynthesizer(llm=MockLLM()))
    sync = engine.query(CACHE)
    async_ = await engine.aquery(CACHE)
    assert [n.node_id for n in sync.source_nodes] == [n.node_id for n in async_.source_nodes]
    assert sync.response.split("\n", 2)[2] == async_.response.split("\n", 2)[2]  # after "now"

    tool = RetrieverTool.from_defaults(retriever, name="kb", description="team knowledge")
    output = await tool.acall(CACHE)
    assert output.raw_output and output.raw_output[0].metadata["slug"] == "dec-cache-v2"


def test_standard_engine_and_retriever_tool(kb: KnowledgeBase) -> None:
    retriever = KBRetriever(kb, k=2, include_context=True)
    engine = RetrieverQueryEngine.from_args(retriever, llm=MockLLM())
    response = engine.query(CACHE)
    assert response.source_nodes[0].metadata["slug"] == "dec-cache-v2"
    assert all(n.score is not None for n in response.source_nodes)
    # the "kb" record (breakdown, origin) never reaches the LLM
    assert "kb:" not in response.response and "canonical_penalty" not in response.response

    tool = RetrieverTool.from_defaults(retriever, name="kb", description="team knowledge")
    output = tool.call(CACHE)
    assert [n.node_id for n in output.raw_output] == [n.node_id for n in retriever.retrieve(CACHE)]
    assert "title: DEC-0007" in output.content
    assert "kb:" not in output.content and "origin:" not in output.content


def test_postprocessor_on_a_vector_index_retriever() -> None:
    """Nodes from an in-memory VectorStoreIndex: the superseded twin is demoted."""
    shared = "We standardise on one shared cache layer for every platform service."
    nodes = [
        TextNode(id_="v1", text=shared + " (2023)", metadata={
            "slug": "dec-cache-v1", "canonical_type": "decision",
            "canonical_status": "superseded", "retrieval_priority": 60}),
        TextNode(id_="v2", text=shared + " (2026)", metadata={
            "slug": "dec-cache-v2", "canonical_type": "decision",
            "canonical_status": "accepted", "retrieval_priority": 80}),
        TextNode(id_="n", text="Office plants need watering on Fridays.", metadata={}),
    ]
    index = VectorStoreIndex(nodes, embed_model=KBCoreEmbedding(HashingEmbedder(64)))
    engine = RetrieverQueryEngine.from_args(
        index.as_retriever(similarity_top_k=3), llm=MockLLM(),
        node_postprocessors=[KBNodePostprocessor(top_n=2)],
    )
    response = engine.query("which shared cache layer do we standardise on?")
    assert [n.node_id for n in response.source_nodes] == ["v2", "v1"]
    assert all("retrieval_score" in n.metadata["kb"] for n in response.source_nodes)
    rendered = KBSynthesizer(llm=MockLLM()).synthesize("q", response.source_nodes).response
    assert "Type: decision \u00b7 Status: superseded" in rendered and REJECTED not in rendered


def test_embedding_bridges(new_database: Callable[[], str]) -> None:
    inner = HashingEmbedder(64)
    llama = KBCoreEmbedding(inner)
    assert llama.model_name == inner.model_id
    assert llama.get_query_embedding("cache") == inner.embed_query("cache")
    assert llama.get_text_embedding_batch(["a b", "c d"]) == inner.embed_documents(["a b", "c d"])

    probed = KBLlamaEmbedding(MockEmbedding(embed_dim=12))
    assert probed.model_id == "llama-index:MockEmbedding"
    assert probed.dimension == 12
    assert KBLlamaEmbedding(llama, dimension=64).model_id == inner.model_id

    # A LlamaIndex embedding drives a real knowledge base end to end.
    embedder = KBLlamaEmbedding(llama)
    with KnowledgeBase(embedder=embedder, database_url=new_database()) as base:
        assert embedder.dimension == 64
        base.ingest([EXAMPLE_KB / "dec-cache-v2.md"])
        (node,) = KBRetriever(base, k=1, include_context=False).retrieve(CACHE)
        assert node.metadata["slug"] == "dec-cache-v2"
    with pytest.raises(TypeError):
        KBLlamaEmbedding(inner)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        KBLlamaEmbedding(llama, dimension=0)
