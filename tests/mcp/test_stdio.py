"""`kb-retriever mcp` as a client starts it: a subprocess speaking MCP over stdio, through the
SDK's stdio_client, on the examples/kb database (default embedder)."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from .conftest import CALL_TIMEOUT, TEST_TIMEOUT_S, closed_port, text_of

pytestmark = [pytest.mark.db, pytest.mark.slow]


@asynccontextmanager
async def spawn(database_url: str, *args: str, errlog: Path) -> AsyncIterator[ClientSession]:
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "kb_retriever", "--database-url", database_url, "mcp", *args])
    with errlog.open("w") as err:
        try:
            async with asyncio.timeout(TEST_TIMEOUT_S), stdio_client(params, errlog=err) as (r, w), \
                    ClientSession(r, w, read_timeout_seconds=CALL_TIMEOUT) as client:
                await client.initialize()
                yield client
        except BaseException:
            print(errlog.read_text(), file=sys.stderr)  # the server's stderr, for the report
            raise


async def test_stdio_server_answers_and_survives_bad_input(example_kb, tmp_path) -> None:
    async with spawn(example_kb.url, "--project", "default", errlog=tmp_path / "err") as client:
        names = {t.name for t in (await client.list_tools()).tools}
        assert names == {"search_knowledge_base", "search_knowledge_base_structured",
                         "get_document"}
        bad = await client.call_tool("search_knowledge_base", {"query": ""})
        assert bad.isError and text_of(bad) == "InputError: query is empty"
        other = await client.call_tool("search_knowledge_base",
                                       {"query": "cache", "project": "elsewhere"})
        assert other.isError and "unknown project 'elsewhere'" in text_of(other)

        result = await client.call_tool("search_knowledge_base",
                                        {"query": "Can we use Memcached as the shared cache layer?"})
        assert not result.isError
        text = text_of(result)
        assert text.startswith("Grounding: ANSWER")
        assert "## ⚠ REJECTED APPROACHES" in text and "rej-memcached-2023" in text

        structured = await client.call_tool("search_knowledge_base_structured",
                                            {"query": "how do we roll back a deploy?", "limit": 2})
        assert structured.structuredContent is not None
        top = structured.structuredContent["primary"][0]["document"]
        assert top["slug"] == "runbook-deploy-rollback"
        doc = await client.call_tool("get_document", {"id": top["source_path"]})
        assert not doc.isError and "Type: runbook · Status: accepted" in text_of(doc)


async def test_stdio_server_with_its_database_down_answers_errors(tmp_path) -> None:
    url = f"postgresql://kb@127.0.0.1:{closed_port()}/kb"
    async with spawn(url, "--project", "a", "--project", "b", errlog=tmp_path / "err") as client:
        for _ in range(2):
            result = await client.call_tool("search_knowledge_base", {"query": "cache"})
            assert result.isError and text_of(result).startswith("UnavailableError: ")
        tools = (await client.list_tools()).tools
        project = tools[0].inputSchema["properties"]["project"]
        assert "one of a, b" in project["description"]
