"""KBRetriever against a real PostgreSQL (examples/kb/, hashing embedder)."""

from __future__ import annotations

import pytest
from llama_index.core.schema import MetadataMode, NodeRelationship, QueryBundle
from llama_index.retrievers.kb import HIDDEN_METADATA_KEYS, KBQueryBundle, KBRetriever

from kb_retriever import FilterError, HashingEmbedder, KnowledgeBase, Settings

from .conftest import CountingEmbedder

# With the hashing embedder this query yields all three origins at k = 3: primary (the Redis
# decision, then the rejected Memcached record it names, issue 27's placement), the graph
# neighbour of the answer's document (decision 0016: only the first canonical document seeds
# the walk) and the warning.
ALL_ORIGINS = "memcached shared cache"
ALL_K = 3
CACHE = "what cache layer did we standardise on?"


def _ids_scores(nodes):
    return [(n.node_id, n.score) for n in nodes]


def test_nodes_carry_score_metadata_and_unique_ids(kb: KnowledgeBase) -> None:
    nodes = KBRetriever(kb, k=ALL_K, include_context=True).retrieve(ALL_ORIGINS)
    origins = [n.metadata["kb"]["origin"] for n in nodes]
    assert origins[0] == "primary"
    assert {"graph_expansion", "rejected"} <= set(origins)
    ids = [n.node_id for n in nodes]
    assert len(ids) == len(set(ids))  # LlamaIndex dedups by node id: none may collide
    # the rejected record shown in primary is warned about with the chunk it shows
    primary = next(n for n in nodes if n.metadata["kb"]["origin"] == "primary"
                   and n.metadata["slug"] == "rej-memcached-2023")
    rejected = next(n for n in nodes if n.metadata["kb"]["origin"] == "rejected")
    assert primary.metadata["kb"]["chunk_id"] == rejected.metadata["kb"]["chunk_id"]
    assert primary.node_id != rejected.node_id

    result = kb.search(ALL_ORIGINS, limit=ALL_K)
    expected = [*result.primary, *result.expanded, *result.rejected]
    assert [(n.node_id, n.score) for n in nodes] == [(h.uid, h.score) for h in expected]
    meta = primary.metadata
    hit = next(h for h in result.primary if h.document.slug == "rej-memcached-2023")
    assert meta["slug"] == hit.document.slug == "rej-memcached-2023"
    assert meta["title"] == hit.document.title
    assert meta["source_path"] == hit.document.source_path
    assert meta["heading_path"] == hit.heading_path
    assert meta["canonical_type"] == "rejected-approach"
    assert meta["canonical_status"] == hit.document.canonical_status
    assert meta["kb"]["scores"] == hit.scores.to_dict()
    assert meta["kb"]["document"]["slug"] == hit.document.slug
    assert meta["kb"]["similarity"] == hit.similarity
    assert primary.node.get_content(metadata_mode=MetadataMode.NONE) == hit.text


def test_breakdown_and_origin_are_hidden_from_llm_and_embedding_text(kb: KnowledgeBase) -> None:
    for n in KBRetriever(kb, k=2, include_context=True).retrieve(ALL_ORIGINS):
        for mode in (MetadataMode.LLM, MetadataMode.EMBED):
            text = n.node.get_content(metadata_mode=mode)
            for key in ("kb", "scores", "origin", "chunk_id", "similarity", "from_slug"):
                assert f"{key}:" not in text
            assert f"title: {n.metadata['title']}" in text
            assert f"source_path: {n.metadata['source_path']}" in text
            assert "None" not in text.split("\n\n")[0]  # no empty metadata lines
        assert set(HIDDEN_METADATA_KEYS) <= set(n.node.excluded_llm_metadata_keys)


def test_relationships_point_to_document_and_graph_seed(kb: KnowledgeBase) -> None:
    nodes = KBRetriever(kb, k=ALL_K, include_context=True).retrieve(ALL_ORIGINS)
    by_id = {n.node_id: n for n in nodes}
    for n in nodes:
        source = n.node.relationships[NodeRelationship.SOURCE]
        assert source.node_id == n.metadata["source_path"] == n.node.ref_doc_id
        assert source.metadata["slug"] == n.metadata.get("slug")
    expanded = [n for n in nodes if n.metadata["kb"]["origin"] == "graph_expansion"]
    assert expanded
    for n in expanded:
        parent = n.node.relationships[NodeRelationship.PARENT]
        seed = by_id[parent.node_id]
        kb = n.metadata["kb"]
        assert seed.metadata["slug"] == kb["from_slug"] == parent.metadata["from_slug"]
        assert parent.metadata["edge_type"] == kb["edge_type"]
        assert parent.metadata["relation"] == "kb_graph_edge"


@pytest.mark.asyncio(loop_scope="session")
async def test_sync_and_async_return_the_same_nodes(akb: KnowledgeBase) -> None:
    retriever = KBRetriever(akb, k=3)
    for query in (ALL_ORIGINS, CACHE):
        sync = retriever.retrieve(query)
        async_ = await retriever.aretrieve(query)
        assert sync and _ids_scores(sync) == _ids_scores(async_)
        assert [n.metadata for n in sync] == [n.metadata for n in async_]


@pytest.mark.asyncio(loop_scope="session")
async def test_precomputed_query_embedding_is_used(
    akb: KnowledgeBase, counting_embedder: CountingEmbedder
) -> None:
    retriever = KBRetriever(akb, k=3)
    expected = _ids_scores(retriever.retrieve(CACHE))
    vector = HashingEmbedder(256).embed_query(CACHE)
    before = counting_embedder.query_calls
    bundle = QueryBundle(query_str=CACHE, embedding=vector)
    assert _ids_scores(retriever.retrieve(bundle)) == expected
    assert _ids_scores(await retriever.aretrieve(bundle)) == expected
    assert counting_embedder.query_calls == before
    # Opting out re-embeds the query text (for bundles shared with other embedding models).
    KBRetriever(akb, k=3, use_query_embedding=False).retrieve(bundle)
    assert counting_embedder.query_calls == before + 1


def test_include_context_false_returns_primary_only(kb: KnowledgeBase) -> None:
    nodes = KBRetriever(kb, k=2, include_context=False).retrieve(ALL_ORIGINS)
    assert len(nodes) == 2
    assert {n.metadata["kb"]["origin"] for n in nodes} == {"primary"}


def test_per_call_overrides(kb: KnowledgeBase) -> None:
    retriever = KBRetriever(kb, k=5, include_context=False)
    runbooks = retriever.with_filters({"canonical_types": ["runbook"]}, k=2)
    nodes = runbooks.retrieve("how do we roll back a deploy during on-call?")
    assert len(nodes) == 2
    assert {n.metadata["canonical_type"] for n in nodes} == {"runbook"}
    assert retriever.filters.is_empty() and retriever.k == 5  # the original is unchanged

    bundle = KBQueryBundle(CACHE, k=1, filters={"canonical_types": ["decision"]})
    (only,) = retriever.retrieve(bundle)
    assert only.metadata["canonical_type"] == "decision"
    assert retriever.retrieve(KBQueryBundle(CACHE, project="no-such-project")) == []


def test_bad_arguments_fail_at_construction(kb: KnowledgeBase) -> None:
    with pytest.raises(FilterError):
        KBRetriever(kb, filters={"no_such_filter": 1})
    with pytest.raises(ValueError, match="k must be"):
        KBRetriever(kb, k=0)
    with pytest.raises(TypeError):
        KBRetriever("not a knowledge base")  # type: ignore[arg-type]


def test_the_adaptive_cutoff_can_give_fewer_than_k_and_the_docstring_says_so(
        kb: KnowledgeBase) -> None:
    """The retriever returns the search's primary hits: the context cutoff moves weak ones to
    ``runner_up`` (behaviour kept; the docs used to promise exactly ``k``)."""
    result = kb.search(CACHE, limit=8)
    nodes = KBRetriever(kb, k=8).retrieve(CACHE)
    assert [n.node_id for n in nodes] == [h.uid for h in result.primary]
    assert len(nodes) < 8 and any(h.metadata.get("context_cutoff") for h in result.runner_up)
    with KnowledgeBase(Settings(context_cutoff=0), embedder=kb.embedder,
                       database_url=kb.url) as off:
        assert len(KBRetriever(off, k=8).retrieve(CACHE)) == 8
    doc = " ".join((KBRetriever.__doc__ or "").split())
    assert "exactly ``k``" not in doc
    assert "adaptive context cutoff (``KB_CONTEXT_CUTOFF``" in doc
    assert "``KB_CONTEXT_CUTOFF=0`` (``Settings(context_cutoff=0)``) to turn it off" in doc
