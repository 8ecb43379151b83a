"""`kb-retriever mcp --transport streamable-http`: a subprocess on a loopback port, reached by
the SDK's streamable HTTP client; a request naming another host is refused (DNS rebinding)."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from .conftest import CALL_TIMEOUT, TEST_TIMEOUT_S, closed_port, text_of

pytestmark = pytest.mark.slow


@pytest.fixture
def http_server(tmp_path: Path) -> Iterator[str]:
    """The server on a free loopback port, its database down (a closed port): the transport
    is under test here, the tools are tested in process and over stdio."""
    port = closed_port()
    log = (tmp_path / "server.log").open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "kb_retriever", "--database-url",
         f"postgresql://kb@127.0.0.1:{closed_port()}/kb", "mcp", "--project", "default",
         "--transport", "streamable-http", "--port", str(port)],
        stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError((tmp_path / "server.log").read_text()) from None
                time.sleep(0.2)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


async def test_streamable_http_serves_the_tools(http_server: str) -> None:
    async with asyncio.timeout(TEST_TIMEOUT_S), streamable_http_client(http_server) as (r, w, _), \
            ClientSession(r, w, read_timeout_seconds=CALL_TIMEOUT) as client:
        await client.initialize()
        names = {t.name for t in (await client.list_tools()).tools}
        assert "search_knowledge_base" in names and "add_document" not in names
        result = await client.call_tool("search_knowledge_base", {"query": "cache"})
        assert result.isError and text_of(result).startswith("UnavailableError: ")
        bad = await client.call_tool("search_knowledge_base", {"query": ""})
        assert bad.isError and text_of(bad) == "InputError: query is empty"


async def test_another_host_header_is_refused(http_server: str) -> None:
    async with httpx.AsyncClient(timeout=30) as http:
        response = await http.post(http_server, headers={
            "Host": "attacker.example", "Accept": "application/json, text/event-stream",
            "Content-Type": "application/json"},
            json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
    assert response.status_code == 421
