"""A response synthesizer that answers with kb-retriever's composed prompt.

LlamaIndex's stock synthesizers flatten nodes into one ``{context_str}``, which loses the
three blocks (rejected approaches, related context, context) that the prompt is built around.
This synthesizer regroups the nodes by ``metadata["kb"]["origin"]`` into a ``SearchResult``,
renders it with :func:`kb_retriever.compose_prompt` as the **system** message, and sends the
query as the **user** message, in one LLM call.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from llama_index.core.base.llms.types import ChatMessage, MessageRole
from llama_index.core.base.response.schema import Response
from llama_index.core.callbacks import CallbackManager, CBEventType, EventPayload
from llama_index.core.instrumentation import get_dispatcher
from llama_index.core.instrumentation.events.synthesis import (
    SynthesizeEndEvent,
    SynthesizeStartEvent,
)
from llama_index.core.llms import LLM
from llama_index.core.response_synthesizers import BaseSynthesizer
from llama_index.core.schema import NodeWithScore, QueryBundle, QueryType, TextNode

from kb_retriever import PromptTemplate, compose_prompt

from .convert import nodes_to_result

__all__ = ["KBSynthesizer"]

dispatcher = get_dispatcher(__name__)


class KBSynthesizer(BaseSynthesizer):
    """Answer from nodes with the composed kb-retriever prompt (no streaming).

    Works with nodes from :class:`~llama_index.retrievers.kb.KBRetriever` (all three blocks) and
    from any other retriever (every node lands in ``## Context``).

    Example::

        from llama_index.core.query_engine import RetrieverQueryEngine

        engine = RetrieverQueryEngine(retriever=KBRetriever(kb, include_context=True),
                                      response_synthesizer=KBSynthesizer(llm=llm))
        print(engine.query("how do we rotate the oauth key?"))
    """

    def __init__(self, llm: LLM | None = None, *, project: str | None = None,
                 timezone: str = "UTC", max_chars: int | None = None,
                 template: PromptTemplate | None = None,
                 callback_manager: CallbackManager | None = None) -> None:
        super().__init__(llm=llm, callback_manager=callback_manager)
        self._project = project
        self._timezone = timezone
        self._max_chars = max_chars
        self._template = template

    def messages(self, query_str: str, nodes: Sequence[NodeWithScore]) -> list[ChatMessage]:
        """The system + user messages sent to the LLM (useful to inspect or log)."""
        system = compose_prompt(
            nodes_to_result(nodes, query_str), project=self._project, timezone=self._timezone,
            max_chars=self._max_chars, template=self._template,
        )
        return [ChatMessage(role=MessageRole.SYSTEM, content=system),
                ChatMessage(role=MessageRole.USER, content=query_str)]

    def synthesize(self, query: QueryType, nodes: list[NodeWithScore],
                   additional_source_nodes: Sequence[NodeWithScore] | None = None,
                   **response_kwargs: Any) -> Response:
        bundle = _bundle(query)
        dispatcher.event(SynthesizeStartEvent(query=bundle))
        with self._callback_manager.event(
            CBEventType.SYNTHESIZE, payload={EventPayload.QUERY_STR: bundle.query_str}
        ) as event:
            reply = self._llm.chat(self.messages(bundle.query_str, nodes), **response_kwargs)
            response = self._response(reply.message.content, nodes, additional_source_nodes)
            event.on_end(payload={EventPayload.RESPONSE: response})
        dispatcher.event(SynthesizeEndEvent(query=bundle, response=response))
        return response

    async def asynthesize(self, query: QueryType, nodes: list[NodeWithScore],
                          additional_source_nodes: Sequence[NodeWithScore] | None = None,
                          **response_kwargs: Any) -> Response:
        bundle = _bundle(query)
        dispatcher.event(SynthesizeStartEvent(query=bundle))
        with self._callback_manager.event(
            CBEventType.SYNTHESIZE, payload={EventPayload.QUERY_STR: bundle.query_str}
        ) as event:
            messages = self.messages(bundle.query_str, nodes)
            reply = await self._llm.achat(messages, **response_kwargs)
            response = self._response(reply.message.content, nodes, additional_source_nodes)
            event.on_end(payload={EventPayload.RESPONSE: response})
        dispatcher.event(SynthesizeEndEvent(query=bundle, response=response))
        return response

    # BaseSynthesizer's text-chunk hooks: plain chunks become primary context items.
    def get_response(self, query_str: str, text_chunks: Sequence[str],
                     **response_kwargs: Any) -> str:
        response = self.synthesize(query_str, _chunk_nodes(text_chunks), **response_kwargs)
        return response.response or ""

    async def aget_response(self, query_str: str, text_chunks: Sequence[str],
                            **response_kwargs: Any) -> str:
        response = await self.asynthesize(query_str, _chunk_nodes(text_chunks), **response_kwargs)
        return response.response or ""

    def _get_prompts(self) -> dict[str, Any]:
        return {}

    def _update_prompts(self, prompts_dict: Any) -> None:
        """The prompt is kb-retriever's; customise it with ``template=``."""

    def _response(self, text: str | None, nodes: Sequence[NodeWithScore],
                  extra: Sequence[NodeWithScore] | None) -> Response:
        source_nodes = [*nodes, *(extra or [])]
        return Response(text or "", source_nodes=source_nodes,
                        metadata={n.node.node_id: n.node.metadata for n in source_nodes})


def _bundle(query: QueryType) -> QueryBundle:
    return QueryBundle(query_str=query) if isinstance(query, str) else query


def _chunk_nodes(text_chunks: Sequence[str]) -> list[NodeWithScore]:
    return [NodeWithScore(node=TextNode(text=t)) for t in text_chunks]
