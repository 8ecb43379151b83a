"""KBPromptComposer in LCEL chains and kb_search_tool as an agent calls it."""

from __future__ import annotations

from datetime import UTC, datetime
from operator import itemgetter

import pytest
from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_core.messages import ToolMessage
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import RunnableParallel, RunnablePassthrough
from langchain_kb_retriever import KBPromptComposer, KBRetriever, kb_search_tool

from kb_retriever import InputError, KnowledgeBase, compose_prompt

pytestmark = pytest.mark.db

Q = "can we use memcached as shared cache?"
NOW = datetime(2026, 6, 1, 9, 0, tzinfo=UTC)
REJECTED, RELATED, CONTEXT = "## \u26a0 REJECTED APPROACHES", "## \U0001f4ce RELATED CONTEXT", "## Context"


def test_composer_renders_three_blocks_from_every_input(example_kb: KnowledgeBase) -> None:
    retriever = KBRetriever(kb=example_kb, k=4)
    composer = KBPromptComposer(retriever=retriever, now=NOW, timezone="UTC")
    from_question = composer.invoke(Q)
    for header in (REJECTED, RELATED, CONTEXT):
        assert header in from_question
    assert "Project: default" in from_question
    # A SearchResult renders exactly as the core renders it.
    result = retriever.search(Q)
    assert composer.invoke(result) == compose_prompt(result, project="default", now=NOW,
                                                     timezone="UTC")
    # Documents round-trip into the same blocks.
    docs = retriever.invoke(Q, include_context=True)
    assert composer.invoke(docs) == from_question
    # Plain documents of another retriever land under ## Context.
    assert REJECTED not in composer.invoke(docs[:1])


def test_composer_errors(example_kb: KnowledgeBase) -> None:
    with pytest.raises(InputError, match="needs KBPromptComposer"):
        KBPromptComposer().invoke("a question")
    with pytest.raises(InputError, match="takes a question"):
        KBPromptComposer().invoke(42)  # type: ignore[arg-type]
    # was a raw TypeError ("multiple values for keyword argument 'include_context'")
    composer = KBPromptComposer(retriever=KBRetriever(kb=example_kb))
    with pytest.raises(InputError, match="include_context is not an option"):
        composer.invoke("which cache?", include_context=False)


def test_lcel_chain_with_sources(example_kb: KnowledgeBase) -> None:
    retriever = KBRetriever(kb=example_kb, k=3, include_context=True)
    composer = KBPromptComposer(retriever=retriever, now=NOW)
    prompt = ChatPromptTemplate.from_messages([("system", "{context}"), ("human", "{question}")])
    model = FakeListChatModel(responses=["Redis (dec-cache-v2)."])
    simple = ({"context": composer, "question": RunnablePassthrough()}
              | prompt | model | StrOutputParser())
    assert simple.invoke(Q) == "Redis (dec-cache-v2)."
    with_sources = (RunnableParallel(docs=retriever, question=RunnablePassthrough())
                    .assign(context=itemgetter("docs") | composer)
                    .assign(answer=prompt | model | StrOutputParser()))
    out = with_sources.invoke(Q)
    assert out["answer"] == "Redis (dec-cache-v2)."
    assert CONTEXT in out["context"] and out["docs"]


async def test_composer_async(async_example_kb: KnowledgeBase) -> None:
    composer = KBPromptComposer(retriever=KBRetriever(kb=async_example_kb, k=2), now=NOW)
    assert await composer.ainvoke(Q, k=2) == composer.invoke(Q, k=2)


def test_tool_schema(example_kb: KnowledgeBase) -> None:
    tool = kb_search_tool(example_kb, k=3)
    schema = tool.tool_call_schema.model_json_schema()
    assert set(schema["properties"]) == {"query", "k", "filters", "project"}
    assert schema["required"] == ["query"]
    filters = tool.args_schema.model_json_schema()["$defs"]["KBSearchFilters"]["properties"]
    assert set(filters) == {"source_types", "canonical_types", "tags", "folder_globs",
                            "date_from", "date_to", "where"}
    # the core's vocabulary, not a copy of it
    from kb_retriever.vocabulary import CANONICAL_TYPES, SOURCE_TYPES

    assert tuple(filters["source_types"]["anyOf"][0]["items"]["enum"]) == SOURCE_TYPES
    assert tuple(filters["canonical_types"]["anyOf"][0]["items"]["enum"]) == CANONICAL_TYPES
    assert tool.response_format == "content_and_artifact"


def test_tool_invoked_like_an_agent(example_kb: KnowledgeBase) -> None:
    tool = kb_search_tool(example_kb, k=3, allowed_projects=["default"])
    call = {"type": "tool_call", "id": "call-1", "name": "kb_search",
            "args": {"query": Q, "k": 2, "filters": {"canonical_types": ["decision",
                                                                        "rejected-approach"]}}}
    msg = tool.invoke(call)
    assert isinstance(msg, ToolMessage) and msg.tool_call_id == "call-1"
    assert CONTEXT in msg.content and REJECTED in msg.content
    primary = [d for d in msg.artifact if d.metadata["kb"]["origin"] == "primary"]
    assert len(primary) == 2
    assert {d.metadata["kb"]["document"]["canonical_type"] for d in primary} <= {
        "decision", "rejected-approach"}
    # Mistakes go back to the model as text, not as a crash of the agent loop.
    denied = tool.invoke({**call, "args": {"query": Q, "project": "secret"}})
    assert "not available" in denied.content
    # Schema violations too (issue 19: they used to raise ValidationError into the agent).
    for args, field in (({"query": Q, "filters": {"canonical_types": ["adr"]}}, "canonical_types"),
                        ({"query": Q, "k": 500}, "k"),
                        ({"query": Q, "filters": {"date_from": "last week"}}, "date_from")):
        bad = tool.invoke({**call, "args": args})
        assert isinstance(bad, ToolMessage) and bad.status == "error"
        assert bad.content.startswith("invalid arguments:") and field in bad.content
    refused = tool.invoke({**call, "args": {"query": Q, "filters": {"where": {"$xor": []}}}})
    assert refused.status == "error" and "$xor" in refused.content


def test_tool_output_is_the_blocks_without_the_preamble(example_kb: KnowledgeBase) -> None:
    call = {"type": "tool_call", "id": "c2", "name": "kb_search", "args": {"query": Q, "k": 2}}
    bare = kb_search_tool(example_kb).invoke(call).content
    assert CONTEXT in bare and "You are the knowledge assistant" not in bare
    assert "__NO_GROUNDED_ANSWER__" not in bare
    full = kb_search_tool(example_kb, include_preamble=True).invoke(call).content
    assert full.startswith("You are the knowledge assistant") and full.endswith(bare)


def test_tool_accepts_a_filter_expression(example_kb: KnowledgeBase) -> None:
    tool = kb_search_tool(example_kb, k=3)
    msg = tool.invoke({"type": "tool_call", "id": "c3", "name": "kb_search", "args": {
        "query": Q, "filters": {"where": {"$not": {"canonical_type": "decision"}}}}})
    primary = [d for d in msg.artifact if d.metadata["kb"]["origin"] == "primary"]
    assert primary and all(d.metadata["kb"]["document"]["canonical_type"] != "decision"
                           for d in primary)


async def test_tool_async(async_example_kb: KnowledgeBase) -> None:
    tool = kb_search_tool(async_example_kb, k=2)
    msg = await tool.ainvoke({"type": "tool_call", "id": "c", "name": "kb_search",
                              "args": {"query": Q, "filters": {"date_to": "2100-01-01"}}})
    assert CONTEXT in msg.content and msg.artifact
