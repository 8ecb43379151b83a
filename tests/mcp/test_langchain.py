"""The server's tools in LangChain through langchain-mcp-adapters: loaded from a real MCP
session (in process), their schemas intact, invoked as an agent would call them."""

from __future__ import annotations

import asyncio
import sys

import pytest

pytest.importorskip("langchain_mcp_adapters")

from langchain_core.messages import ToolMessage  # noqa: E402
from langchain_mcp_adapters.tools import load_mcp_tools  # noqa: E402

from kb_retriever.mcp import Scope, build_server  # noqa: E402

from .conftest import connect  # noqa: E402

pytestmark = pytest.mark.db


def _call(name: str, args: dict[str, object]) -> dict[str, object]:
    return {"type": "tool_call", "id": "call-1", "name": name, "args": args}


def _text(message: ToolMessage) -> str:
    content = message.content
    return content if isinstance(content, str) else "".join(
        b["text"] for b in content if isinstance(b, dict) and b.get("type") == "text")


async def test_langchain_loads_and_invokes_the_tools(example_kb) -> None:
    server = build_server(example_kb, Scope(projects=("default",)))
    async with connect(server) as session:
        tools = {t.name: t for t in await load_mcp_tools(session)}
        assert set(tools) == {"search_knowledge_base", "search_knowledge_base_structured",
                              "get_document"}
        search = tools["search_knowledge_base"]
        assert set(search.args) == {"query", "project", "limit", "filters"}
        assert "REJECTED APPROACHES" in search.description

        message = await search.ainvoke(_call("search_knowledge_base",
                                             {"query": "Can we use Memcached as the cache layer?"}))
        assert isinstance(message, ToolMessage) and message.status == "success"
        text = _text(message)
        assert text.startswith("Grounding: ANSWER")
        assert "## ⚠ REJECTED APPROACHES" in text and "rej-memcached-2023" in text

        structured = await tools["search_knowledge_base_structured"].ainvoke(
            _call("search_knowledge_base_structured", {"query": "deploy rollback", "limit": 2}))
        assert structured.artifact["structured_content"]["primary"][0]["scores"]["total"] > 0

        # An error result reaches the model as an error message it can act on, not a crash.
        failed = await search.ainvoke(_call("search_knowledge_base",
                                            {"query": "cache", "project": "payroll"}))
        assert failed.status == "error"
        assert "unknown project 'payroll': this server serves default" in _text(failed)


@pytest.mark.slow
async def test_the_readme_configuration_over_stdio(example_kb) -> None:
    """MultiServerMCPClient starts `kb-retriever mcp` as the README shows, one session for
    several calls."""
    from pathlib import Path

    from langchain_mcp_adapters.client import MultiServerMCPClient

    from .conftest import TEST_TIMEOUT_S

    command = str(Path(sys.executable).with_name("kb-retriever"))
    client = MultiServerMCPClient({"kb": {
        "transport": "stdio", "command": command, "args": ["mcp", "--project", "default"],
        "env": {"KB_DATABASE_URL": example_kb.url}}})
    async with asyncio.timeout(TEST_TIMEOUT_S), client.session("kb") as session:
        tools = {t.name: t for t in await load_mcp_tools(session)}
        message = await tools["search_knowledge_base"].ainvoke(
            _call("search_knowledge_base", {"query": "how do we roll back a deploy?"}))
        assert "Path: runbook-deploy-rollback.md" in _text(message)
        doc = await tools["get_document"].ainvoke(
            _call("get_document", {"id": "runbook-deploy-rollback.md"}))
        assert _text(doc).startswith("Id: runbook-deploy-rollback.md")
