"""``similarity_top_k`` nodes whenever they exist, or a typed error: never silently fewer.

One search returns at most ``KB_MAX_LIMIT`` hits (``Settings.max_limit``); a query for more used
to come back cut to that many plus the runner-ups."""

from __future__ import annotations

import pytest
from llama_index.core import VectorStoreIndex
from llama_index.core.schema import NodeRelationship, RelatedNodeInfo, TextNode
from llama_index.core.vector_stores.types import VectorStoreQuery
from llama_index.embeddings.kb import KBCoreEmbedding
from llama_index.vector_stores.kb import KBVectorStore

from kb_retriever import HashingEmbedder, InputError, Settings

pytestmark = pytest.mark.db


@pytest.fixture
def store(make_kb) -> KBVectorStore:
    kb = make_kb(embedder=HashingEmbedder(128),
                 settings=Settings(max_limit=5, default_limit=5, runner_up_limit=0))
    nodes = []
    for i in range(12):
        node = TextNode(id_=f"n{i}", text=f"Record {i} on the throughput of component {i}.")
        node.relationships[NodeRelationship.SOURCE] = RelatedNodeInfo(node_id=f"d{i}", hash="1")
        nodes.append(node)
    store = KBVectorStore(kb)
    store.add(nodes)
    return store


async def test_top_k_above_the_limit_is_an_input_error(store):
    query = VectorStoreQuery(query_str="component throughput", similarity_top_k=5)
    assert len(store.query(query).nodes) == 5  # the limit itself: k nodes
    for mode in ("default", "hybrid", "text_search", "mmr"):
        over = VectorStoreQuery(query_str="component throughput", similarity_top_k=6, mode=mode)
        with pytest.raises(InputError, match=r"similarity_top_k is 6.* 5 .*KB_MAX_LIMIT"):
            store.query(over)
        with pytest.raises(InputError, match="KB_MAX_LIMIT"):
            await store.aquery(over)
    index = VectorStoreIndex.from_vector_store(
        store, embed_model=KBCoreEmbedding(store.client.embedder))
    with pytest.raises(InputError, match="KB_MAX_LIMIT"):
        index.as_retriever(similarity_top_k=12).retrieve("component throughput")
