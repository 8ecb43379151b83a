"""Rerank + canonical trust gradient + per-document cap, for nodes from any retriever."""

from __future__ import annotations

from llama_index.core.bridge.pydantic import Field
from llama_index.core.callbacks import CBEventType, EventPayload
from llama_index.core.instrumentation import get_dispatcher
from llama_index.core.instrumentation.events.rerank import ReRankEndEvent, ReRankStartEvent
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import NodeWithScore, QueryBundle
from llama_index.retrievers.kb.convert import HIDDEN_METADATA_KEYS, foreign

from kb_retriever import Hit, InputError, Settings
from kb_retriever.interop import DEFAULT_TOP_N, ForeignDocument, rerank_documents, reranked_metadata

__all__ = ["KBNodePostprocessor"]

dispatcher = get_dispatcher(__name__)

MODEL_NAME = "kb-retriever-rerank"


class KBNodePostprocessor(BaseNodePostprocessor):
    """Rerank nodes from any retriever with kb-retriever's weighted sum and trust gradient.

    The conversion is the core's (:mod:`kb_retriever.interop`, shared with the LangChain
    compressor). Each node becomes a rerank candidate: its text, its cosine similarity
    (``metadata["similarity"]``, or the one in a kb-retriever node's ``metadata["kb"]``), else
    ``NodeWithScore.score``, and the canonical fields read from ``node.metadata`` (over a
    frontmatter block that opens the node's text) (``is_canonical``, ``canonical_type`` or
    ``type``, ``canonical_status`` or ``status``, ``retrieval_priority``,
    ``generation_source``, ``tags``, ``slug``, ``source_path`` or ``file_path``,
    ``heading_path``, ``doc_date``) or from the ``metadata["kb"]["document"]`` record that
    ``KBRetriever`` and ``KBVectorStore`` put on their nodes, so their trust gradient holds. A
    node with a canonical type or status but no ``is_canonical`` key counts as canonical.
    Documents are told apart by the node's SOURCE relationship, else path, else slug.

    Returns at most ``top_n`` **new** nodes (inputs are never mutated), best first, at most
    ``max_per_doc`` per document while others are left (default:
    ``settings.max_chunks_per_doc``). The new score is the rerank total; under
    ``metadata["kb"]`` (hidden from LLM and embedding text) the breakdown (``scores``), the
    ``rerank_rank`` and the old score (``retrieval_score``).

    Example::

        from llama_index.core.query_engine import RetrieverQueryEngine

        engine = RetrieverQueryEngine.from_args(
            index.as_retriever(similarity_top_k=20), llm=llm,
            node_postprocessors=[KBNodePostprocessor(top_n=5)],
        )
    """

    top_n: int = Field(default=DEFAULT_TOP_N, ge=1, description="How many nodes to return.")
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
            raise InputError("KBNodePostprocessor needs the query: pass query_bundle or query_str")
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
        items = [foreign(n) for n in nodes]
        # each hit's chunk_id is its node's position
        top = rerank_documents(query, items, self.settings, top_n=self.top_n,
                               max_per_doc=self.max_per_doc)
        return [_rescored(nodes[hit.chunk_id], items[hit.chunk_id], hit, rank)
                for rank, hit in enumerate(top, 1)]


def _rescored(nws: NodeWithScore, item: ForeignDocument, hit: Hit, rank: int) -> NodeWithScore:
    node = nws.node
    metadata = reranked_metadata(node.metadata, hit, rank=rank,
                                 retrieval_score=item.retrieval_score)
    # model_copy is shallow: metadata and the key lists are replaced, never edited in place.
    copy = node.model_copy(update={
        "metadata": metadata,
        "excluded_llm_metadata_keys": _with_keys(node.excluded_llm_metadata_keys),
        "excluded_embed_metadata_keys": _with_keys(node.excluded_embed_metadata_keys),
    })
    return NodeWithScore(node=copy, score=hit.score)


def _with_keys(keys: list[str]) -> list[str]:
    return [*keys, *(k for k in HIDDEN_METADATA_KEYS if k not in keys)]
