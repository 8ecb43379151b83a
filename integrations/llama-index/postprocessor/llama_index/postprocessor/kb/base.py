"""Rerank + canonical trust gradient + per-document cap, for nodes from any retriever."""

from __future__ import annotations

from llama_index.core.bridge.pydantic import Field
from llama_index.core.callbacks import CBEventType, EventPayload
from llama_index.core.instrumentation import get_dispatcher
from llama_index.core.instrumentation.events.rerank import ReRankEndEvent, ReRankStartEvent
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import NodeWithScore, QueryBundle
from llama_index.retrievers.kb.convert import node_to_candidate

from kb_retriever import Hit, Settings
from kb_retriever.ranking import diversify, rerank

__all__ = ["KBNodePostprocessor"]

dispatcher = get_dispatcher(__name__)

MODEL_NAME = "kb-retriever-rerank"
# Added to every output node; hidden from LLM and embedding text like the retriever's breakdown.
_ADDED_KEYS = ("retrieval_score", "kb_scores")


class KBNodePostprocessor(BaseNodePostprocessor):
    """Rerank nodes from any retriever with kb-retriever's weighted sum and trust gradient.

    Each node becomes a rerank candidate: its text, ``NodeWithScore.score`` as the similarity,
    and the canonical fields read from ``node.metadata`` (``is_canonical``, ``canonical_type``,
    ``canonical_status``, ``retrieval_priority``, ``generation_source``, ``tags``, ``slug``,
    ``source_path`` or ``file_path``, ``heading_path``, ``doc_date``). A node with a canonical
    type or status but no ``is_canonical`` key counts as canonical. Documents are told apart by
    the node's SOURCE relationship, else slug, else path.

    Returns at most ``top_n`` **new** nodes (inputs are never mutated), best first, at most
    ``max_per_doc`` per document while others are left (default:
    ``settings.max_chunks_per_doc``). The new score is the rerank total; the old one is kept in
    ``metadata["retrieval_score"]`` and the breakdown in ``metadata["kb_scores"]``.

    Example::

        from llama_index.core.query_engine import RetrieverQueryEngine

        engine = RetrieverQueryEngine.from_args(
            index.as_retriever(similarity_top_k=20), llm=llm,
            node_postprocessors=[KBNodePostprocessor(top_n=5)],
        )
    """

    top_n: int = Field(default=8, ge=1, description="How many nodes to return.")
    max_per_doc: int | None = Field(
        default=None, ge=0, description="Chunks per document (0: no cap; None: settings)."
    )
    # Excluded from serialisation: it may carry a database URL with a password.
    settings: Settings = Field(default_factory=Settings, exclude=True)

    @classmethod
    def class_name(cls) -> str:
        return "KBNodePostprocessor"

    def _postprocess_nodes(self, nodes: list[NodeWithScore],
                           query_bundle: QueryBundle | None = None) -> list[NodeWithScore]:
        if query_bundle is None:
            raise ValueError("KBNodePostprocessor needs the query: pass query_bundle or query_str")
        dispatcher.event(ReRankStartEvent(query=query_bundle, nodes=nodes, top_n=self.top_n,
                                          model_name=MODEL_NAME))
        with self.callback_manager.event(
            CBEventType.RERANKING,
            payload={EventPayload.NODES: nodes, EventPayload.MODEL_NAME: MODEL_NAME,
                     EventPayload.QUERY_STR: query_bundle.query_str,
                     EventPayload.TOP_K: self.top_n},
        ) as event:
            out = self._rank(nodes, query_bundle.query_str)
            event.on_end(payload={EventPayload.NODES: out})
        dispatcher.event(ReRankEndEvent(nodes=out))
        return out

    async def _apostprocess_nodes(self, nodes: list[NodeWithScore],
                                  query_bundle: QueryBundle | None = None) -> list[NodeWithScore]:
        # Pure CPU over a few dozen nodes: a thread hop would cost more than the work.
        return self._postprocess_nodes(nodes, query_bundle)

    def _rank(self, nodes: list[NodeWithScore], query: str) -> list[NodeWithScore]:
        if not nodes:
            return []
        doc_ids: dict[str, int] = {}
        # chunk_id = input position, so each hit maps back to its node.
        candidates = [node_to_candidate(n, i, doc_ids) for i, n in enumerate(nodes)]
        hits = rerank(query, candidates, self.settings)
        cap = self.settings.max_chunks_per_doc if self.max_per_doc is None else self.max_per_doc
        top, _ = diversify(hits, self.top_n, cap)
        return [_rescored(nodes[hit.chunk_id], hit) for hit in top]


def _rescored(nws: NodeWithScore, hit: Hit) -> NodeWithScore:
    node = nws.node
    metadata = {**node.metadata, "retrieval_score": nws.score, "kb_scores": hit.scores.to_dict()}
    # model_copy is shallow: metadata and the key lists are replaced, never edited in place.
    copy = node.model_copy(update={
        "metadata": metadata,
        "excluded_llm_metadata_keys": _with_keys(node.excluded_llm_metadata_keys),
        "excluded_embed_metadata_keys": _with_keys(node.excluded_embed_metadata_keys),
    })
    return NodeWithScore(node=copy, score=hit.score)


def _with_keys(keys: list[str]) -> list[str]:
    return [*keys, *(k for k in _ADDED_KEYS if k not in keys)]
