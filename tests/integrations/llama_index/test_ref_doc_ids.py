"""``doc_ids`` and a ``ref_doc_id`` filter select the nodes whose ``ref_doc_id`` the adapter
reports: the id given to LlamaIndex for its nodes, the document's id (a file's path) for the
chunks of ingested files (they carry no ``ref_doc_id`` key in their metadata)."""

from __future__ import annotations

import pytest
from llama_index.core import VectorStoreIndex
from llama_index.core.schema import NodeRelationship, RelatedNodeInfo, TextNode
from llama_index.core.vector_stores.types import (
    MetadataFilter,
    MetadataFilters,
    VectorStoreQuery,
)
from llama_index.embeddings.kb import KBCoreEmbedding
from llama_index.retrievers.kb import KBRetriever
from llama_index.vector_stores.kb import KBVectorStore

from kb_retriever import HashingEmbedder

from .conftest import EXAMPLE_KB

pytestmark = pytest.mark.db

QUERY = "which shared cache layer did we standardise on?"


def _ref(ref: str, operator: str = "==") -> MetadataFilters:
    return MetadataFilters(filters=[MetadataFilter(key="ref_doc_id", value=ref,
                                                   operator=operator)])


@pytest.fixture
def store(make_kb) -> KBVectorStore:
    kb = make_kb(embedder=HashingEmbedder(256))
    assert not kb.ingest([EXAMPLE_KB]).failed
    nodes = [TextNode(id_=f"cache-notes-{i}", text=text, metadata={"team": "platform"})
             for i, text in enumerate(["The shared cache layer notes: Redis cluster.",
                                       "The shared cache layer notes: eviction is LRU."])]
    for node in nodes:
        node.relationships[NodeRelationship.SOURCE] = RelatedNodeInfo(node_id="notes", hash="1")
    store = KBVectorStore(kb)
    store.add(nodes)
    return store


def test_doc_ids_and_ref_doc_id_filters_select_what_the_nodes_report(store):
    top = store.query(VectorStoreQuery(query_str=QUERY, similarity_top_k=3)).nodes
    file_ref = next(n.ref_doc_id for n in top if n.ref_doc_id != "notes")
    assert file_ref is not None
    index = VectorStoreIndex.from_vector_store(
        store, embed_model=KBCoreEmbedding(store.client.embedder))
    for ref in (file_ref, "notes"):
        chunks = len(store.client.get_by_ids([ref])[0].chunks)
        by_ids = index.as_retriever(similarity_top_k=20, doc_ids=[ref]).retrieve(QUERY)
        assert len(by_ids) == chunks and {n.node.ref_doc_id for n in by_ids} == {ref}
        by_filter = store.query(VectorStoreQuery(query_str=QUERY, similarity_top_k=20,
                                                 filters=_ref(ref))).nodes
        assert sorted(n.node_id for n in by_filter) == sorted(n.node.node_id for n in by_ids)
        got = store.get_nodes(filters=_ref(ref))
        assert len(got) == chunks and {n.ref_doc_id for n in got} == {ref}
        others = store.query(VectorStoreQuery(query_str=QUERY, similarity_top_k=5,
                                              filters=_ref(ref, "!="))).nodes
        assert len(others) == 5 and ref not in {n.ref_doc_id for n in others}
    store.delete_nodes(filters=_ref(file_ref))  # what delete_ref_doc(file_ref) deletes
    assert store.client.get_by_ids([file_ref]) == []


def test_the_retriever_reads_ref_doc_id_as_its_nodes_report_it(store):
    file_ref = KBRetriever(store.client, k=1).retrieve(QUERY)[0].node.ref_doc_id
    for ref in (file_ref, "notes"):
        nodes = KBRetriever(store.client, k=5, filters=_ref(ref)).retrieve(QUERY)
        assert nodes and {n.node.ref_doc_id for n in nodes} == {ref}
