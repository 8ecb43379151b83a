"""KBNodePostprocessor over plain nodes (pure: no database)."""

from __future__ import annotations

import copy

import pytest
from llama_index.core.schema import (
    MetadataMode,
    NodeRelationship,
    NodeWithScore,
    RelatedNodeInfo,
    TextNode,
)
from llama_index.postprocessor.kb import KBNodePostprocessor

from kb_retriever import InputError, Settings

QUERY = "which cache layer do we use?"
TEXT = "We use a shared cache layer for every service."


def _node(slug: str, status: str | None, score: float, *, text: str = TEXT,
          canonical: bool | None = True, **extra: object) -> NodeWithScore:
    meta: dict[str, object] = {"slug": slug, "title": slug.upper(), "source_path": f"{slug}.md",
                               "canonical_type": "decision", **extra}
    if status is not None:
        meta["canonical_status"] = status
    if canonical is not None:
        meta["is_canonical"] = canonical
    node = TextNode(text=text, metadata=meta, relationships={
        NodeRelationship.SOURCE: RelatedNodeInfo(node_id=f"doc-{slug}")})
    return NodeWithScore(node=node, score=score)


def _snapshot(nodes: list[NodeWithScore]) -> list[tuple]:
    return [(n.node_id, n.score, copy.deepcopy(n.node.metadata),
             list(n.node.excluded_llm_metadata_keys)) for n in nodes]


def test_superseded_is_demoted_below_accepted_with_equal_score() -> None:
    nodes = [_node("dec-cache-v1", "superseded", 0.8), _node("dec-cache-v2", "accepted", 0.8)]
    before = _snapshot(nodes)
    out = KBNodePostprocessor(top_n=2).postprocess_nodes(nodes, query_str=QUERY)
    assert [n.metadata["slug"] for n in out] == ["dec-cache-v2", "dec-cache-v1"]
    assert out[0].score > out[1].score
    assert out[1].metadata["kb"]["scores"]["canonical_penalty"] == pytest.approx(0.4)
    assert [n.metadata["kb"]["retrieval_score"] for n in out] == [0.8, 0.8]
    assert [n.metadata["kb"]["rerank_rank"] for n in out] == [1, 2]
    assert _snapshot(nodes) == before  # inputs untouched
    assert all(o.node is not n.node for o in out for n in nodes)
    # ids and relationships survive; the new keys stay out of the LLM text
    assert {n.node_id for n in out} == {n.node_id for n in nodes}
    assert out[0].node.relationships[NodeRelationship.SOURCE].node_id == "doc-dec-cache-v2"
    llm_text = out[0].node.get_content(metadata_mode=MetadataMode.LLM)
    assert "retrieval_score" not in llm_text and "kb:" not in llm_text
    assert "canonical_penalty" not in llm_text


def test_top_n_and_per_document_cap() -> None:
    nodes = [
        _node("doc-a", "accepted", 0.9, text="cache layer one"),
        _node("doc-a", "accepted", 0.85, text="cache layer two"),
        _node("doc-a", "accepted", 0.8, text="cache layer three"),
        _node("doc-b", "accepted", 0.5, text="cache layer four"),
    ]
    out = KBNodePostprocessor(top_n=2, max_per_doc=1).postprocess_nodes(nodes, query_str=QUERY)
    assert [n.metadata["slug"] for n in out] == ["doc-a", "doc-b"]
    uncapped = KBNodePostprocessor(top_n=3, max_per_doc=0).postprocess_nodes(nodes,
                                                                            query_str=QUERY)
    assert [n.metadata["slug"] for n in uncapped] == ["doc-a", "doc-a", "doc-a"]
    assert len(KBNodePostprocessor(top_n=10).postprocess_nodes(nodes, query_str=QUERY)) == 4


def test_canonical_fields_read_from_metadata() -> None:
    # A status without the is_canonical flag still counts; string flags from JSON work.
    implicit = _node("old", "superseded", 0.8, canonical=None)
    stringly = _node("also-old", "deprecated", 0.8, canonical="true")
    plain = _node("notes", None, 0.8, canonical="false", retrieval_priority=90)
    out = KBNodePostprocessor(top_n=3).postprocess_nodes([implicit, stringly, plain],
                                                         query_str=QUERY)
    assert out[0].metadata["slug"] == "notes"
    assert out[0].metadata["kb"]["scores"]["canonical_boost"] == 0.0  # not canonical
    boosted = _node("high", "accepted", 0.8, retrieval_priority="90")
    low = _node("low", "accepted", 0.8, retrieval_priority=10)
    first = KBNodePostprocessor(top_n=1).postprocess_nodes([low, boosted], query_str=QUERY)
    assert first[0].metadata["slug"] == "high"


def test_canonical_fields_in_our_kb_record_count() -> None:
    """Nodes of KBRetriever and KBVectorStore carry the canonical fields under
    ``metadata["kb"]["document"]`` and their cosine under ``kb.similarity``."""
    def ours(slug: str, status: str, cosine: float) -> NodeWithScore:
        kb = {"document": {"slug": slug, "is_canonical": True, "canonical_type": "decision",
                           "canonical_status": status, "retrieval_priority": 80},
              "similarity": cosine, "scores": {"total": 0.9}}
        node = TextNode(text=TEXT, metadata={"type": "decision", "status": status, "kb": kb})
        return NodeWithScore(node=node, score=0.9)  # a final score, not a cosine

    out = KBNodePostprocessor(top_n=2).postprocess_nodes(
        [ours("v1", "superseded", 0.6), ours("v2", "accepted", 0.5)], query_str=QUERY)
    kbs = [n.metadata["kb"] for n in out]
    assert [k["document"]["slug"] for k in kbs] == ["v2", "v1"]
    assert kbs[1]["scores"]["canonical_penalty"] == pytest.approx(0.4)
    assert [k["scores"]["raw_similarity"] for k in kbs] == [0.5, 0.6]
    assert [k["retrieval_score"] for k in kbs] == [0.9, 0.9]


async def test_async_matches_sync() -> None:
    nodes = [_node("dec-cache-v1", "superseded", 0.9), _node("dec-cache-v2", "accepted", 0.7)]
    post = KBNodePostprocessor(top_n=2)
    sync = post.postprocess_nodes(nodes, query_str=QUERY)
    async_ = await post.apostprocess_nodes(nodes, query_str=QUERY)
    assert [(n.node_id, n.score) for n in sync] == [(n.node_id, n.score) for n in async_]


def test_settings_are_honoured_and_not_serialised() -> None:
    nodes = [_node("dec-cache-v1", "superseded", 0.8), _node("dec-cache-v2", "accepted", 0.8)]
    off = KBNodePostprocessor(settings=Settings(canonical_enabled=False, reranking_enabled=False))
    out = off.postprocess_nodes(nodes, query_str=QUERY)
    assert [n.metadata["slug"] for n in out] == ["dec-cache-v1", "dec-cache-v2"]  # input order
    assert KBNodePostprocessor.class_name() == "KBNodePostprocessor"
    data = KBNodePostprocessor(top_n=3).to_dict()
    assert data["class_name"] == "KBNodePostprocessor" and data["top_n"] == 3
    assert "settings" not in data


def test_edge_cases() -> None:
    post = KBNodePostprocessor()
    assert post.postprocess_nodes([], query_str=QUERY) == []
    with pytest.raises(InputError, match="needs the query"):  # a ValueError too
        post.postprocess_nodes([_node("a", "accepted", 0.5)])
    none_score = NodeWithScore(node=TextNode(text="cache layer"), score=None)
    (out,) = post.postprocess_nodes([none_score], query_str=QUERY)
    assert out.score is not None and out.metadata["kb"]["retrieval_score"] is None
    with pytest.raises(ValueError):
        KBNodePostprocessor(top_n=0)


def test_a_frontmatter_block_in_the_text_and_type_status_keys_are_read() -> None:
    """``SimpleDirectoryReader`` leaves a Markdown file's frontmatter in the node's text, and
    the vector stores' documents say ``type`` / ``status``: neither was read, so the superseded
    decision (the closer match) stayed first."""
    def node(i: str, text: str, score: float, **meta: object) -> NodeWithScore:
        return NodeWithScore(node=TextNode(id_=i, text=text, metadata={"file_path": f"{i}.md",
                                                                       **meta}), score=score)

    block = [node("v1", f"---\ntype: decision\nstatus: superseded\n---\n{TEXT}", 0.8),
             node("v2", f"---\ntype: decision\nstatus: accepted\n---\n{TEXT}", 0.75)]
    keys = [node("v1", TEXT, 0.8, type="decision", status="superseded"),
            node("v2", TEXT, 0.75, type="decision", status="accepted")]
    for nodes in (block, keys):
        out = KBNodePostprocessor(top_n=2).postprocess_nodes(nodes, query_str=QUERY)
        assert [n.node.node_id for n in out] == ["v2", "v1"]
        assert out[1].metadata["kb"]["scores"]["canonical_penalty"] > 0
