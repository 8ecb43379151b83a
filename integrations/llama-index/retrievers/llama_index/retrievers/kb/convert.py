"""Converters between kb-retriever's hits and LlamaIndex nodes, both ways, through the core's
one converter (:mod:`kb_retriever.interop`, shared with the LangChain adapter).

Hit → node (the retriever): ``TextNode.id_`` is :attr:`Hit.uid` (unique per origin, so
LlamaIndex's dedup by node id keeps a chunk that is both primary and rejected), the final score
goes on ``NodeWithScore.score``; the metadata is :func:`kb_retriever.interop.hit_metadata`: the
citation fields (:data:`VISIBLE_METADATA_KEYS`, shown to the LLM and the embedder) and, under
``"kb"`` (:data:`HIDDEN_METADATA_KEYS`, hidden from both), the origin, the breakdown
(``kb.scores``), the document, the chunk ids, the cosine and the graph provenance.

Node → core (the postprocessor and the synthesizer): :func:`foreign`; canonical fields are read
from ``node.metadata`` (or its ``"kb"`` record), so nodes from any retriever can be reranked and
rendered.

Relationships: every node has ``SOURCE`` → its document (its stable id); a
graph-expanded node has ``PARENT`` → the node of the document it was reached from (the seed,
``from_slug``), with ``edge_type``, ``from_slug`` and ``hop`` in the relation's metadata.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from llama_index.core.schema import (
    MetadataMode,
    NodeRelationship,
    NodeWithScore,
    ObjectType,
    RelatedNodeInfo,
    TextNode,
)

from kb_retriever import DocumentRef, Hit, Origin, SearchResult
from kb_retriever.interop import (
    CITATION_KEYS,
    ForeignDocument,
    hit_metadata,
    result_from_documents,
)
from kb_retriever.write.from_memory import with_frontmatter

__all__ = [
    "HIDDEN_METADATA_KEYS", "VISIBLE_METADATA_KEYS", "document_node_id", "foreign",
    "nodes_to_result", "result_to_nodes",
]

#: Metadata the LLM and the embedder see: enough to cite a source and judge its status.
VISIBLE_METADATA_KEYS = CITATION_KEYS
#: Metadata kept for code (scores, ids, the document, graph provenance) and excluded from
#: LLM/embed text: the one ``"kb"`` record.
HIDDEN_METADATA_KEYS = ("kb",)


def document_node_id(doc: DocumentRef) -> str:
    """The id of a chunk's SOURCE document node, its ``ref_doc_id``: the document's stable id
    (a file's path, or the id it was added with), as ``KBVectorStore`` stores it."""
    return doc.source_path


def result_to_nodes(result: SearchResult, *, include_context: bool = True) -> list[NodeWithScore]:
    """Primary, then (with ``include_context``) expanded and rejected hits, as nodes."""
    hits: list[Hit] = list(result.primary)
    if include_context:
        hits += [*result.expanded, *result.rejected]
    seeds: dict[str, str] = {}  # slug -> id of the first node of that document
    nodes = []
    for hit in hits:
        nodes.append(_hit_to_node(hit, seeds))
        if hit.document.slug and hit.origin is not Origin.REJECTED:
            seeds.setdefault(hit.document.slug, hit.uid)
    return nodes


def _hit_to_node(hit: Hit, seeds: Mapping[str, str]) -> NodeWithScore:
    doc = hit.document
    # None would render as "canonical_type: None" in the LLM text.
    meta = {k: v for k, v in hit_metadata(hit).items() if v is not None}
    relationships: dict[NodeRelationship, Any] = {
        NodeRelationship.SOURCE: RelatedNodeInfo(
            node_id=document_node_id(doc), node_type=ObjectType.DOCUMENT,
            metadata={k: v for k, v in (("slug", doc.slug), ("title", doc.title),
                                        ("source_path", doc.source_path)) if v is not None},
        ),
    }
    seed = seeds.get(hit.from_slug or "") if hit.origin is Origin.GRAPH_EXPANSION else None
    if seed is not None:
        relationships[NodeRelationship.PARENT] = RelatedNodeInfo(
            node_id=seed, node_type=ObjectType.TEXT,
            metadata={"relation": "kb_graph_edge", "edge_type": hit.edge_type,
                      "from_slug": hit.from_slug, "hop": hit.hop},
        )
    node = TextNode(
        id_=hit.uid, text=hit.text, metadata=meta, relationships=relationships,
        excluded_llm_metadata_keys=list(HIDDEN_METADATA_KEYS),
        excluded_embed_metadata_keys=list(HIDDEN_METADATA_KEYS),
    )
    return NodeWithScore(node=node, score=hit.score)


# --- nodes from any retriever -> core types ------------------------------------------------


def foreign(nws: NodeWithScore) -> ForeignDocument:
    """A node of any retriever as the core's plain record: its text, metadata and score, its
    id, and its SOURCE document's id (which groups chunks by document). The fields of a
    frontmatter block that opens the text (a reader that kept it there, as
    ``SimpleDirectoryReader`` does) stand under its metadata: the trust gradient reads them."""
    node = nws.node
    source = node.source_node.node_id if node.source_node is not None else None
    text = node.get_content(metadata_mode=MetadataMode.NONE)
    return ForeignDocument(text, with_frontmatter(text, node.metadata), score=nws.score,
                           id=node.node_id, source_id=source)


def nodes_to_result(nodes: Sequence[NodeWithScore], query: str = "") -> SearchResult:
    """Group nodes by origin (``metadata["kb"]["origin"]``) into a :class:`SearchResult` for
    ``compose_prompt``; nodes of other retrievers, and runner-ups, are primary."""
    return result_from_documents([foreign(n) for n in nodes], query)
