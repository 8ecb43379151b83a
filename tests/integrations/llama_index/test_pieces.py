"""Nodes of one text in one LlamaIndex document are pieces of their own when they differ."""

from __future__ import annotations

import pytest
from llama_index.core import Document, StorageContext, VectorStoreIndex
from llama_index.core.node_parser import SentenceSplitter
from llama_index.core.schema import NodeRelationship, RelatedNodeInfo, TextNode
from llama_index.embeddings.kb import KBCoreEmbedding
from llama_index.vector_stores.kb import KBVectorStore

from kb_retriever import HashingEmbedder

pytestmark = pytest.mark.db


def _insert(kb, nodes, batch: int) -> None:
    storage = StorageContext.from_defaults(vector_store=KBVectorStore(kb))
    VectorStoreIndex(nodes, storage_context=storage, embed_model=KBCoreEmbedding(kb.embedder),
                     insert_batch_size=batch)


def test_a_footer_on_two_pages_in_two_batches_is_two_nodes(make_kb):
    """The second page's footer, in a later insert batch than the first's, replaced it: the
    same text was taken for the same node inserted again."""
    kb = make_kb(embedder=HashingEmbedder(128))
    source = RelatedNodeInfo(node_id="report", hash="v1")
    nodes = []
    for i, text in enumerate(["Page one's findings.", "Confidential.",
                              "Page two's findings.", "Confidential."]):
        node = TextNode(id_=f"n{i}", text=text, metadata={"page": i // 2 + 1})
        node.relationships[NodeRelationship.SOURCE] = source
        nodes.append(node)
    _insert(kb, nodes, batch=2)
    (stored,) = kb.get_by_ids(["report"])
    assert [(c.text, c.metadata["page"]) for c in stored.chunks] == [
        ("Page one's findings.", 1), ("Confidential.", 1),
        ("Page two's findings.", 2), ("Confidential.", 2)]


def test_a_repeated_paragraph_split_in_batches_keeps_every_node_and_reinserting_adds_none(
        make_kb):
    """A parsed document whose one paragraph comes back four times: each is a node of its own
    (its place and neighbours differ), across batches and when the document is inserted
    again under new node ids."""
    kb = make_kb(embedder=HashingEmbedder(128))
    parts = [f"Section {i} explains step {i} of the rollout in detail." for i in range(8)]
    text = "\n\n".join(p if i % 2 else "Ask the on-call lead before any change."
                       for i, p in enumerate(parts))
    splitter = SentenceSplitter(chunk_size=16, chunk_overlap=0)
    nodes = splitter.get_nodes_from_documents([Document(id_="guide", text=text)])
    texts = [n.get_content() for n in nodes]
    assert texts.count("Ask the on-call lead before any change.") == 4
    for _ in range(2):
        again = splitter.get_nodes_from_documents([Document(id_="guide", text=text)])
        _insert(kb, again, batch=3)
        (stored,) = kb.get_by_ids(["guide"])
        assert [c.text for c in stored.chunks] == texts
