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
