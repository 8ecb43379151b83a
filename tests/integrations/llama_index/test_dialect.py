"""LlamaIndex's dialect: ``MetadataFilters`` (nested AND/OR/NOT), ``similarity_top_k``."""

from __future__ import annotations

import pytest
from llama_index.core.vector_stores.types import (
    FilterCondition,
    FilterOperator,
    MetadataFilter,
    MetadataFilters,
)
from llama_index.retrievers.kb import KBQueryBundle, KBRetriever

from kb_retriever import FilterError, InputError, KnowledgeBase

pytestmark = pytest.mark.db

QUERY = "what cache layer did we standardise on?"


def _types(nodes: list) -> list[str | None]:
    return [n.metadata.get("canonical_type") for n in nodes]


def test_nested_metadata_filters_are_honoured(kb: KnowledgeBase) -> None:
    filters = MetadataFilters(filters=[
        MetadataFilter(key="canonical_type", value="decision"),
        MetadataFilters(filters=[
            MetadataFilter(key="tags", value=["redis", "oauth"], operator=FilterOperator.ANY),
            MetadataFilter(key="canonical_status", value="superseded"),
        ], condition=FilterCondition.OR),
    ], condition=FilterCondition.AND)
    nodes = KBRetriever(kb, similarity_top_k=5, filters=filters).retrieve(QUERY)
    assert nodes and set(_types(nodes)) == {"decision"}
    excluded = MetadataFilters(filters=[MetadataFilter(key="canonical_type", value="decision")],
                               condition=FilterCondition.NOT)
    others = KBRetriever(kb, k=5).retrieve(KBQueryBundle(QUERY, filters=excluded))
    assert others and "decision" not in _types(others)


def test_text_match_and_is_empty(kb: KnowledgeBase) -> None:
    like = MetadataFilters(filters=[MetadataFilter(
        key="title", value="REDIS", operator=FilterOperator.TEXT_MATCH_INSENSITIVE)])
    nodes = KBRetriever(kb, k=3, filters=like).retrieve(QUERY)
    assert nodes and all("redis" in n.metadata["title"].lower() for n in nodes)
    no_slug = MetadataFilters(filters=[MetadataFilter(
        key="slug", value=None, operator=FilterOperator.IS_EMPTY)])
    assert all(not n.metadata.get("slug")
               for n in KBRetriever(kb, k=3, filters=no_slug).retrieve(QUERY))


def test_k_is_exact_by_default_and_similarity_top_k_is_its_name(kb: KnowledgeBase) -> None:
    assert len(KBRetriever(kb, k=3).retrieve(QUERY)) == 3
    retriever = KBRetriever(kb, similarity_top_k=2)
    assert retriever.similarity_top_k == 2 and len(retriever.retrieve(QUERY)) == 2
    with_context = KBRetriever(kb, k=1, include_context=True).retrieve(QUERY)
    assert len(with_context) > 1
    with pytest.raises(InputError, match="disagree"):
        KBRetriever(kb, k=2, similarity_top_k=3)
    with pytest.raises(InputError, match=r"\['top_k'\].*valid: k, similarity_top_k"):
        KBRetriever(kb, top_k=3)  # type: ignore[call-arg]
    with pytest.raises(InputError, match="positive integer"):
        KBRetriever(kb, similarity_top_k=0)


def test_unsupported_operators_fail_clearly(kb: KnowledgeBase) -> None:
    bad = MetadataFilters(filters=[MetadataFilter(key="team", value=["a"],
                                                  operator=FilterOperator.ALL)])
    with pytest.raises(FilterError, match="not supported"):
        KBRetriever(kb, filters=bad)
