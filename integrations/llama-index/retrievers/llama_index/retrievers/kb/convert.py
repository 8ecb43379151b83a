"""Converters between kb-retriever's hits and LlamaIndex nodes, both ways.

Hit → node (the retriever): ``TextNode.id_`` is :attr:`Hit.uid` (unique per origin, so
LlamaIndex's dedup by node id keeps a chunk that is both primary and rejected), the final score
goes on ``NodeWithScore.score`` and the breakdown under ``metadata["kb_scores"]``.

Node → candidate/hit (the postprocessor and the synthesizer): canonical fields are read from
``node.metadata``, so nodes from any retriever can be reranked and rendered.

Relationships: every node has ``SOURCE`` → its document (its stable id); a
graph-expanded node has ``PARENT`` → the node of the document it was reached from (the seed,
``from_slug``), with ``edge_type``, ``from_slug`` and ``hop`` in the relation's metadata.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import PurePosixPath
from types import MappingProxyType
from typing import Any

from llama_index.core.schema import (
    MetadataMode,
    NodeRelationship,
    NodeWithScore,
    ObjectType,
    RelatedNodeInfo,
    TextNode,
)

from kb_retriever import Candidate, DocumentRef, Hit, Origin, ScoreBreakdown, SearchResult
from kb_retriever.interop.coerce import as_date as _date
from kb_retriever.interop.coerce import as_flag as _flag
from kb_retriever.interop.coerce import as_float as _float
from kb_retriever.interop.coerce import as_int as _int
from kb_retriever.interop.coerce import as_opt_str as _opt
from kb_retriever.interop.coerce import as_tags as _tags

__all__ = [
    "HIDDEN_METADATA_KEYS", "VISIBLE_METADATA_KEYS", "document_node_id", "node_to_candidate",
    "node_to_hit", "nodes_to_result", "result_to_nodes",
]

#: Metadata the LLM and the embedder see: enough to cite a source and judge its status.
VISIBLE_METADATA_KEYS = (
    "title", "source_path", "heading_path", "slug", "canonical_type", "canonical_status",
)
#: Metadata kept for code (scores, ids, graph provenance) and excluded from LLM/embed text.
HIDDEN_METADATA_KEYS = (
    "kb_origin", "kb_scores", "kb_chunk_id", "kb_document_id", "doc_key", "project_key",
    "is_canonical", "retrieval_priority", "generation_source", "evidence_tier", "tags", "summary",
    "doc_date", "similarity", "edge_type", "from_slug", "hop", "retrieval_score",
)


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
    meta: dict[str, Any] = {
        "title": doc.title, "source_path": doc.source_path, "heading_path": hit.heading_path,
        "slug": doc.slug, "canonical_type": doc.canonical_type,
        "canonical_status": doc.canonical_status,
        "kb_origin": hit.origin.value, "kb_scores": hit.scores.to_dict(),
        "kb_chunk_id": hit.chunk_id, "kb_document_id": doc.id, "doc_key": doc.doc_key,
        "project_key": doc.project_key, "is_canonical": doc.is_canonical,
        "retrieval_priority": doc.retrieval_priority, "generation_source": doc.generation_source,
        "evidence_tier": doc.evidence_tier, "tags": list(doc.tags), "summary": doc.summary,
        "doc_date": doc.doc_date.isoformat() if doc.doc_date else None,
        "similarity": hit.similarity, "edge_type": hit.edge_type, "from_slug": hit.from_slug,
        "hop": hit.hop,
    }
    # None would render as "canonical_type: None" in the LLM text.
    meta = {k: v for k, v in meta.items() if v is not None}
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


def node_to_candidate(nws: NodeWithScore, position: int, doc_ids: dict[str, int]) -> Candidate:
    """A rerank candidate; ``chunk_id`` is ``position`` so the caller can map hits back.

    ``doc_ids`` assigns one int per document key across a call (the per-document cap needs it).
    """
    node, meta = nws.node, nws.node.metadata
    return Candidate(
        chunk_id=position, text=node.get_content(metadata_mode=MetadataMode.NONE),
        heading_path=_text(meta.get("heading_path")), chunk_order=position,
        document=_document(nws, doc_ids), vector_similarity=nws.score, vector_rank=position + 1,
        fused_score=nws.score or 0.0, metadata=MappingProxyType(dict(meta)),
    )


def node_to_hit(nws: NodeWithScore, position: int, doc_ids: dict[str, int]) -> Hit:
    """A hit for rendering (origin from ``kb_origin``; graph fields from metadata)."""
    meta = nws.node.metadata
    try:
        origin = Origin(meta.get("kb_origin", Origin.PRIMARY.value))
    except ValueError:
        origin = Origin.PRIMARY
    score = nws.score or 0.0
    chunk_id = meta.get("kb_chunk_id")
    return Hit(
        chunk_id=chunk_id if isinstance(chunk_id, int) else position,
        text=nws.node.get_content(metadata_mode=MetadataMode.NONE),
        heading_path=_text(meta.get("heading_path")), score=score,
        scores=ScoreBreakdown(total=score), origin=origin, document=_document(nws, doc_ids),
        similarity=_float(meta.get("similarity")), edge_type=_opt(meta.get("edge_type")),
        from_slug=_opt(meta.get("from_slug")), hop=_int(meta.get("hop"), None),
    )


def nodes_to_result(nodes: Sequence[NodeWithScore], query: str = "") -> SearchResult:
    """Group nodes by origin into a :class:`SearchResult` (for ``compose_prompt``)."""
    doc_ids: dict[str, int] = {}
    hits = [node_to_hit(n, i, doc_ids) for i, n in enumerate(nodes)]

    def pick(*origins: Origin) -> tuple[Hit, ...]:
        return tuple(h for h in hits if h.origin in origins)

    return SearchResult(
        primary=pick(Origin.PRIMARY, Origin.RUNNER_UP), expanded=pick(Origin.GRAPH_EXPANSION),
        rejected=pick(Origin.REJECTED), query=query,
    )


def _document(nws: NodeWithScore, doc_ids: dict[str, int]) -> DocumentRef:
    node, meta = nws.node, nws.node.metadata
    source = node.source_node.node_id if node.source_node is not None else None
    path = _text(meta.get("source_path") or meta.get("file_path") or meta.get("file_name"))
    slug = _opt(meta.get("slug"))
    key = source or (f"slug:{slug}" if slug else None) or (f"path:{path}" if path else None)
    key = key or f"node:{node.node_id}"
    doc_id = doc_ids.setdefault(key, len(doc_ids) + 1)
    ctype, cstatus = _opt(meta.get("canonical_type")), _opt(meta.get("canonical_status"))
    # A loader that sets a canonical type or status without the flag still means canonical.
    canonical = _flag(meta["is_canonical"]) if "is_canonical" in meta else bool(ctype or cstatus)
    doc_key = _text(meta.get("doc_key")) or (PurePosixPath(path).stem if path else slug or key)
    return DocumentRef(
        id=doc_id, tenant_id="default", project_key=_text(meta.get("project_key")) or "default",
        doc_key=doc_key, title=_text(meta.get("title") or meta.get("file_name")) or doc_key,
        source_path=path, slug=slug, is_canonical=canonical, canonical_type=ctype,
        canonical_status=cstatus, retrieval_priority=_int(meta.get("retrieval_priority"), 50),
        generation_source=_text(meta.get("generation_source")) or "human",
        evidence_tier=_opt(meta.get("evidence_tier")), tags=_tags(meta.get("tags")),
        summary=_opt(meta.get("summary")), doc_date=_date(meta.get("doc_date")),
    )


def _text(value: Any) -> str:
    return "" if value is None else str(value)





