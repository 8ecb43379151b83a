"""The MCP server through the SDK's own ClientSession, in process, on a real PostgreSQL:
the tools and their schemas, the trust gradient in the output, and every bad input as an
error result after which the server goes on answering."""

from __future__ import annotations

import json

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

from kb_retriever import HashingEmbedder, KnowledgeBase, Settings
from kb_retriever.mcp import Scope, build_server

from .conftest import closed_port, connect, text_of

pytestmark = pytest.mark.db

QUESTION = "what cache layer did we standardise on?"
# about the rejected Memcached record: the ⚠ block warns about it (decision 0009)
PROPOSAL = "can we use memcached as shared cache?"
READ_TOOLS = {"search_knowledge_base", "search_knowledge_base_structured", "get_document"}


@pytest.fixture(scope="module")
def server(example_kb):
    return build_server(example_kb, Scope(projects=("default",)))


async def test_read_only_by_default_with_typed_schemas(server) -> None:
    async with connect(server) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert set(tools) == READ_TOOLS  # no add_document / delete_document
        search = tools["search_knowledge_base"]
        assert search.inputSchema["required"] == ["query"]
        props = search.inputSchema["properties"]
        assert props["query"]["type"] == "string"
        assert {"type": "integer"} in props["limit"]["anyOf"]
        assert {"additionalProperties": True, "type": "object"} in props["filters"]["anyOf"]
        assert "one of default" in props["project"]["description"]
        assert "REJECTED APPROACHES" in (search.description or "")
        assert "should_refuse" in (search.description or "")
        assert search.annotations is not None and search.annotations.readOnlyHint is True
        structured = tools["search_knowledge_base_structured"]
        assert structured.outputSchema is not None
        assert set(structured.outputSchema["required"]) == {
            "primary", "expanded", "rejected", "runner_up", "meta"}
        prompts = (await client.list_prompts()).prompts
        assert [p.name for p in prompts] == ["answer_from_knowledge_base"]


async def test_search_returns_the_blocks_and_the_refusal_decision(server) -> None:
    async with connect(server) as client:
        result = await client.call_tool("search_knowledge_base", {"query": PROPOSAL})
        assert not result.isError
        text = text_of(result)
        assert text.startswith("Grounding: ANSWER (should_refuse: false)")
        assert text.index("## ⚠ REJECTED APPROACHES") < text.index("## 📎 RELATED CONTEXT") \
            < text.index("## Context")
        assert "**[rej-memcached-2023]**" in text
        assert "Type: decision · Status: accepted" in text
        assert "Path: dec-cache-v2.md" in text

        refused = await client.call_tool(
            "search_knowledge_base", {"query": "what is the best recipe for a chocolate souffle?"})
        assert not refused.isError
        assert text_of(refused).startswith("Grounding: REFUSE (should_refuse: true)")


async def test_structured_search_is_the_json_contract(server, example_kb) -> None:
    async with connect(server) as client:
        result = await client.call_tool("search_knowledge_base_structured",
                                        {"query": QUESTION, "limit": 3,
                                         "filters": {"canonical_types": ["decision"]}})
        assert not result.isError
        data = result.structuredContent
        assert data is not None and json.loads(text_of(result)) == data
        assert len(data["primary"]) <= 3
        top = data["primary"][0]
        assert top["document"]["slug"] == "dec-cache-v2"
        assert {"vector", "keyword", "total", "canonical_penalty"} <= set(top["scores"])
        assert all(h["document"]["canonical_type"] == "decision" for h in data["primary"])
        assert data["meta"]["should_refuse"] is False
        assert data["meta"]["search_strategy"]["filters_applied"] >= 1
        direct = example_kb.search(QUESTION, limit=3, filters={"canonical_types": ["decision"]})
        assert [h["chunk_uid"] for h in data["primary"]] == [h.chunk_uid for h in direct.primary]


async def test_get_document_by_the_path_of_a_hit(server) -> None:
    async with connect(server) as client:
        found = await client.call_tool("get_document", {"id": "dec-cache-v2.md"})
        assert not found.isError
        text = text_of(found)
        assert text.startswith("Id: dec-cache-v2.md\nProject: default\n")
        assert "Slug: dec-cache-v2" in text and "Redis" in text
        paged = await client.call_tool("get_document", {"id": "dec-cache-v2.md", "offset": 10})
        assert "Text: characters 10-" in text_of(paged)
        missing = await client.call_tool("get_document", {"id": "no-such-doc.md"})
        assert missing.isError
        assert text_of(missing) == ("InputError: no document with id 'no-such-doc.md' in "
                                    "default; ids are the Path lines of search results")


@pytest.mark.parametrize(("arguments", "message"), [
    ({"query": ""}, "InputError: query is empty"),
    ({"query": "   "}, "InputError: query is empty"),
    ({"query": "x" * 20_000}, "InputError: query is 20000 characters; the maximum is 10000 "
                              "(KB_MAX_QUERY_CHARS)"),
    ({}, "invalid arguments: query: Field required"),
    ({"query": 42}, "invalid arguments: query: Input should be a valid string"),
    ({"query": "cache", "limit": "many"}, "invalid arguments: limit: Input should be a valid "
                                          "integer"),
    ({"query": "cache", "limit": 0}, "InputError: limit must be between 1 and 200, got 0"),
    ({"query": "cache", "limit": True}, "invalid arguments: limit: Input should be a valid "
                                        "integer"),
    ({"query": "cache", "filters": "tags"}, "invalid arguments: filters: Input should be a "
                                            "valid dictionary"),
    ({"query": "cache", "filters": {"colour": "red"}}, "FilterError: unknown filter key(s) "
                                                       "['colour']; valid: source_types"),
    ({"query": "cache", "project": "payroll"}, "InputError: unknown project 'payroll': this "
                                               "server serves default"),
    # LangChain's spellings: the SDK dropped them, so the search ran unfiltered
    ({"query": "cache", "filter": {"tags": ["x"]}, "k": 1},
     "InputError: unknown argument(s) 'filter', 'k'; the arguments are query, project, limit, "
     "filters (search_knowledge_base"),
])
async def test_bad_input_is_an_error_result_and_the_server_stays_up(server, arguments,
                                                                    message) -> None:
    async with connect(server) as client:
        for tool in ("search_knowledge_base", "search_knowledge_base_structured"):
            result = await client.call_tool(tool, arguments)
            assert result.isError
            text = text_of(result)
            assert text.startswith(message) and "\n" not in text
            assert result.structuredContent is None
        after = await client.call_tool("search_knowledge_base", {"query": QUESTION})
        assert not after.isError


async def test_unknown_tool_and_write_tools_are_refused_when_read_only(server) -> None:
    async with connect(server) as client:
        for name in ("add_document", "delete_document", "drop_everything"):
            result = await client.call_tool(name, {"text": "x", "id": "x"})
            assert result.isError and text_of(result) == f"Unknown tool: {name}"


async def test_prompt_template_composes_the_whole_prompt(server) -> None:
    async with connect(server) as client:
        prompt = await client.get_prompt("answer_from_knowledge_base", {"question": PROPOSAL})
        text = prompt.messages[0].content.text  # type: ignore[union-attr]
        assert text.startswith("You are the knowledge assistant")
        assert "## ⚠ REJECTED APPROACHES" in text and text.endswith(f"Question: {PROPOSAL}")
        assert "Grounding:" not in text
        # the grounding gate's decision reaches the prompt, as the search tool states it
        # (the prompt carried the nearest matches as context and no sign of the refusal)
        off_topic = "what is the best recipe for a chocolate souffle?"
        refused = await client.get_prompt("answer_from_knowledge_base", {"question": off_topic})
        text = refused.messages[0].content.text  # type: ignore[union-attr]
        assert text.startswith("Grounding: REFUSE (should_refuse: true)")
        assert "\n\nYou are the knowledge assistant" in text and text.endswith(off_topic)


@pytest.mark.parametrize(("arguments", "message"), [
    ({"question": ""}, "InputError: query is empty"),
    ({"project": "default"}, "InputError: missing argument(s) question (answer_from_knowledge_base)"),
    ({"question": "cache", "project": "payroll"},
     "InputError: unknown project 'payroll': this server serves default"),
    ({"question": "cache", "limit": "3"},
     "InputError: unknown argument(s) 'limit'; the arguments are question, project "
     "(answer_from_knowledge_base)"),
])
async def test_bad_prompt_arguments_are_one_line_errors(server, arguments, message,
                                                        capfd) -> None:
    """The SDK wrapped them ("Error rendering prompt ...") and logged each with its
    traceback."""
    from mcp.shared.exceptions import McpError

    async with connect(server) as client:
        with pytest.raises(McpError) as info:
            await client.get_prompt("answer_from_knowledge_base", arguments)
    assert str(info.value) == message
    assert "Traceback" not in capfd.readouterr().err


async def test_a_database_that_is_down_is_an_error_result() -> None:
    kb = KnowledgeBase(Settings(), embedder=HashingEmbedder(256),
                       database_url=f"postgresql://kb@127.0.0.1:{closed_port()}/kb")
    server = build_server(kb, Scope(projects=("default",)))
    try:
        async with connect(server) as client:
            for _ in range(2):  # every call tries again, and the server is still there
                result = await client.call_tool("search_knowledge_base", {"query": QUESTION})
                assert result.isError
                text = text_of(result)
                assert text.startswith("UnavailableError: ") and "refused" in text and "\n" not in text
            empty = await client.call_tool("search_knowledge_base", {"query": ""})
            assert text_of(empty) == "InputError: query is empty"  # checked before any I/O
            doc = await client.call_tool("get_document", {"id": "a.md"})
            assert doc.isError and text_of(doc).startswith("UnavailableError: ")
            assert {t.name for t in (await client.list_tools()).tools} == READ_TOOLS
    finally:
        await kb.aclose()


async def test_a_database_that_is_down_is_a_one_line_prompt_error(capfd) -> None:
    """The prompt's own failure (not its arguments') went through the SDK: "Error rendering
    prompt answer_from_knowledge_base: ..." without the error's type, and its traceback in
    the server's log."""
    from mcp.shared.exceptions import McpError

    kb = KnowledgeBase(Settings(), embedder=HashingEmbedder(256),
                       database_url=f"postgresql://kb@127.0.0.1:{closed_port()}/kb")
    server = build_server(kb, Scope(projects=("default",)))
    try:
        async with connect(server) as client:
            with pytest.raises(McpError) as info:
                await client.get_prompt("answer_from_knowledge_base", {"question": QUESTION})
        message = str(info.value)
        assert message.startswith("UnavailableError: ") and "\n" not in message
        assert "Traceback" not in capfd.readouterr().err
    finally:
        await kb.aclose()


async def test_a_database_that_goes_away_is_an_error_result(new_database, pg_server_url) -> None:
    url = new_database()
    # a search waits for a connection up to the pool's timeout (10 s by default) before its
    # error: each of the two below would
    kb = KnowledgeBase(Settings(pool_timeout_s=2), embedder=HashingEmbedder(256),
                       database_url=url).open()
    kb.add_documents([{"text": "Deploys freeze on Fridays.", "id": "note-freeze"}])
    server = build_server(kb, Scope(projects=("default",)))
    try:
        async with connect(server) as client:
            ok = await client.call_tool("search_knowledge_base", {"query": "deploy freeze"})
            assert not ok.isError and "Path: note-freeze" in text_of(ok)
            with psycopg.connect(pg_server_url, autocommit=True) as admin:
                admin.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(
                    sql.Identifier(conninfo_to_dict(url)["dbname"])))
            for _ in range(2):
                gone = await client.call_tool("search_knowledge_base", {"query": "deploy freeze"})
                assert gone.isError and text_of(gone).startswith("UnavailableError: ")
            assert {t.name for t in (await client.list_tools()).tools} == READ_TOOLS
    finally:
        await kb.aclose()


async def test_writes_only_when_allowed_and_only_in_scope(make_kb) -> None:
    kb = make_kb()
    server = build_server(kb, Scope(projects=("notes", "ops"), allow_writes=True))
    async with connect(server) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert set(tools) == READ_TOOLS | {"add_document", "delete_document"}
        assert tools["delete_document"].annotations.destructiveHint is True  # type: ignore[union-attr]
        record = {"text": "# Pager\n\nPage the on-call through Opsgenie.", "id": "runbook-pager",
                  "metadata": {"type": "runbook", "status": "accepted", "slug": "rb-pager"},
                  "project": "ops"}
        added = await client.call_tool("add_document", record)
        assert not added.isError and text_of(added) == "Stored document 'runbook-pager' in project ops."
        unscoped = await client.call_tool("add_document", {"text": "x"})
        assert unscoped.isError and "give project" in text_of(unscoped)
        outside = await client.call_tool("add_document", {"text": "x", "project": "hr"})
        assert outside.isError and "unknown project 'hr'" in text_of(outside)
        nul = await client.call_tool("add_document", {"text": "a\x00b", "project": "ops"})
        assert nul.isError and text_of(nul) == ("InputError: document text contains a NUL character, "
                                                "which PostgreSQL cannot store")

        search = await client.call_tool("search_knowledge_base", {"query": "who do we page?"})
        assert "Path: runbook-pager\nProject: ops\n" in text_of(search)  # (a server of two)
        doc = await client.call_tool("get_document", {"id": "runbook-pager"})
        assert "Project: ops" in text_of(doc) and "Opsgenie" in text_of(doc)

        deleted = await client.call_tool("delete_document", {"id": "runbook-pager", "project": "ops"})
        assert text_of(deleted) == "Deleted 1 document(s) with id 'runbook-pager' from project ops."
        again = await client.call_tool("get_document", {"id": "runbook-pager"})
        assert again.isError
    assert kb.get_by_ids(["runbook-pager"], project="ops") == []


async def test_an_id_that_reads_as_json_is_kept_as_written(make_kb) -> None:
    """The SDK decodes a JSON string given for a parameter typed ``str | None``: the id
    "null" became None (a derived id), and '["a"]' a list (a validation error)."""
    kb = make_kb()
    server = build_server(kb, Scope(projects=("ops",), allow_writes=True))
    async with connect(server) as client:
        for given in ("null", '["a"]', "42"):
            added = await client.call_tool("add_document", {"text": f"# N\n\nnote {given}",
                                                            "id": given})
            assert text_of(added) == f"Stored document {given!r} in project ops."
    assert {d.id for d in kb.get_by_ids(["null", '["a"]', "42"], project="ops")} == {
        "null", '["a"]', "42"}
