"""A node's own metadata is its own: the document of a ``ref_doc_id`` holds only the fields that
every one of its nodes shares, so a filter on a key some nodes lack never matches them through
their document (the filters read a node's metadata, then its document's fields)."""

from __future__ import annotations

import pytest
from llama_index.core.schema import NodeRelationship, RelatedNodeInfo, TextNode
from llama_index.core.vector_stores.types import (
    FilterCondition,
    MetadataFilter,
    MetadataFilters,
    VectorStoreQuery,
)
from llama_index.vector_stores.kb import KBVectorStore

from kb_retriever import HashingEmbedder

pytestmark = pytest.mark.db

ADR = {"slug": "dec-billing", "type": "decision", "status": "accepted", "team": "billing"}


def _node(doc: str, i: int, text: str, metadata: dict, version: str = "v1") -> TextNode:
    node = TextNode(id_=f"{doc}-n{i}", text=text, metadata=metadata)
    node.relationships[NodeRelationship.SOURCE] = RelatedNodeInfo(node_id=doc, hash=version)
    return node


def _ids(store: KBVectorStore, *filters: MetadataFilter, condition: str = "and") -> list[str]:
    got = store.query(VectorStoreQuery(
        query_str="billing service", similarity_top_k=20,
        filters=MetadataFilters(filters=list(filters), condition=FilterCondition(condition))))
    return sorted(got.ids)


def _section(value: str | None, operator: str = "==") -> MetadataFilter:
    return MetadataFilter(key="section", value=value, operator=operator)


def test_a_key_only_some_nodes_have_filters_those_nodes_alone(make_kb):
    store = KBVectorStore(make_kb(embedder=HashingEmbedder(128)))
    store.add([
        _node("docA", 0, "Intro to the billing service.", {"section": "intro", "team": "pay"}),
        _node("docA", 1, "Retries in the billing service.", {"team": "pay"}),
        _node("docA", 2, "Logs of the billing service.", {"section": "appendix", "team": "pay"}),
        _node("docB", 0, "The billing service in Go.", {"section": "intro", "team": "go"}),
    ])
    assert _ids(store, _section("intro")) == ["docA-n0", "docB-n0"]
    assert _ids(store, _section("intro", "!=")) == ["docA-n1", "docA-n2"]
    assert _ids(store, _section(None, "is_empty")) == ["docA-n1"]
    assert _ids(store, _section("intro"), condition="not") == ["docA-n1", "docA-n2"]
    # a key every node of the document has still filters all of them
    assert _ids(store, MetadataFilter(key="team", value="pay")) == [
        "docA-n0", "docA-n1", "docA-n2"]
    got = store.get_nodes(filters=MetadataFilters(filters=[_section("intro")]))
    assert sorted(n.node_id for n in got) == ["docA-n0", "docB-n0"]
    # the document holds what its nodes share, nothing node-specific
    (doc,) = store.client.get_by_ids(["docA"])
    assert dict(doc.metadata) == {"team": "pay"}


def test_nodes_added_to_a_stored_version_keep_the_document_fields_shared(make_kb):
    kb = make_kb(embedder=HashingEmbedder(128))
    store = KBVectorStore(kb)
    store.add([_node("adr", 0, "Intro: the billing service bills.", {**ADR, "section": "intro"}),
               _node("adr", 1, "The billing service retries twice.", dict(ADR))])
    # the same version again (insert_nodes, or the next batch): added to the document
    store.add([_node("adr", 2, "The billing service logs to Loki.",
                     {**ADR, "section": "appendix"})])
    assert _ids(store, _section("appendix")) == ["adr-n2"]
    assert _ids(store, _section(None, "is_empty")) == ["adr-n1"]
    assert _ids(store, _section("intro", "!=")) == ["adr-n1", "adr-n2"]
    (doc,) = kb.get_by_ids(["adr"])
    assert len(doc.chunks) == 3 and dict(doc.metadata) == ADR
    assert (doc.canonical_type, doc.canonical_status, doc.slug) == (
        "decision", "accepted", "dec-billing")  # the shared canonical fields stay
    # a new version replaces the document, its fields too (nothing is kept from the old one)
    store.add([_node("adr", 0, "The billing service is retired.",
                     {**ADR, "status": "superseded"}, version="v2")])
    (doc,) = kb.get_by_ids(["adr"])
    assert [c.id for c in doc.chunks] == ["adr-n0"]
    assert doc.canonical_status == "superseded"
    assert dict(doc.metadata) == {**ADR, "status": "superseded"}


def test_a_frontmatter_block_in_the_first_node_is_the_documents(make_kb):
    """A reader that kept the block in the text: its fields stand for every node of the
    document, also after nodes are added to the same version."""
    kb = make_kb(embedder=HashingEmbedder(128))
    store = KBVectorStore(kb)
    head = "---\nslug: dec-billing\ntype: decision\nstatus: accepted\n---\nThe billing service."
    store.add([_node("adr", 0, head, {"section": "intro"}),
               _node("adr", 1, "The billing service retries.", {})])
    store.add([_node("adr", 2, "The billing service logs.", {"section": "appendix"})])
    (doc,) = kb.get_by_ids(["adr"])
    assert (doc.canonical_status, doc.slug) == ("accepted", "dec-billing")
    assert _ids(store, _section("appendix")) == ["adr-n2"]
    assert _ids(store, MetadataFilter(key="status", value="accepted")) == [
        "adr-n0", "adr-n1", "adr-n2"]
