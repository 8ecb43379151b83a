"""Re-adding a LlamaIndex document replaces its nodes; inserting nodes adds to it."""

from __future__ import annotations

import pytest
from llama_index.core import Document, StorageContext, VectorStoreIndex
from llama_index.core.node_parser import SentenceSplitter
from llama_index.embeddings.kb import KBCoreEmbedding
from llama_index.vector_stores.kb import KBVectorStore

from kb_retriever import HashingEmbedder

pytestmark = pytest.mark.db

TEXT = " ".join(f"Sentence {i} says that the shared cache layer is Redis cluster." for i in range(60))


def _index(kb, documents):
    storage = StorageContext.from_defaults(vector_store=KBVectorStore(kb))
    return VectorStoreIndex.from_documents(
        documents, storage_context=storage, embed_model=KBCoreEmbedding(kb.embedder),
        transformations=[SentenceSplitter(chunk_size=128, chunk_overlap=0)])


def test_the_same_document_twice_is_stored_once(make_kb):
    kb = make_kb(embedder=HashingEmbedder(128))
    doc = Document(id_="adr", text=TEXT, metadata={"slug": "dec-cache", "type": "decision",
                                                   "status": "accepted"})
    _index(kb, [doc])
    first = kb.get_by_ids(["adr"])[0]
    _index(kb, [Document(id_="adr", text=TEXT, metadata=dict(doc.metadata))])  # new node ids
    again = kb.get_by_ids(["adr"])[0]
    assert [c.text for c in again.chunks] == [c.text for c in first.chunks]
    assert len(first.chunks) > 3
    hits = kb.search("shared cache layer", limit=10).primary
    assert len({h.text for h in hits}) == len(hits)  # no node listed twice


def test_a_changed_document_replaces_its_nodes(make_kb):
    kb = make_kb(embedder=HashingEmbedder(128))
    _index(kb, [Document(id_="adr", text=TEXT)])
    _index(kb, [Document(id_="adr", text="The shared cache layer is now Valkey.")])
    (stored,) = kb.get_by_ids(["adr"])
    assert [c.text for c in stored.chunks] == ["The shared cache layer is now Valkey."]


def test_nodes_inserted_after_some_were_deleted_join_the_rest(make_kb):
    """Deleting some nodes left the document without a version: the next nodes of that same
    source (inserted to fix the deleted one) replaced every node it still held."""
    from llama_index.core.schema import NodeRelationship, RelatedNodeInfo, TextNode

    kb = make_kb(embedder=HashingEmbedder(128))
    store = KBVectorStore(kb)
    index = VectorStoreIndex.from_vector_store(store, embed_model=KBCoreEmbedding(kb.embedder))
    source = RelatedNodeInfo(node_id="guide", hash="v1")

    def node(i: int, text: str) -> TextNode:
        n = TextNode(id_=f"n{i}", text=text)
        n.relationships[NodeRelationship.SOURCE] = source
        return n

    index.insert_nodes([node(i, f"Step {i} of the deploy guide.") for i in range(3)])
    store.delete_nodes(["n1"])
    index.insert_nodes([node(1, "Step 1 of the deploy guide, fixed.")])
    (stored,) = kb.get_by_ids(["guide"])
    assert sorted(c.text for c in stored.chunks) == [
        "Step 0 of the deploy guide.", "Step 1 of the deploy guide, fixed.",
        "Step 2 of the deploy guide."]
