"""Helpers of the MCP tests: a real client session on a server built over a real database."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any

import pytest

pytest.importorskip("mcp")

from mcp import ClientSession  # noqa: E402
from mcp.shared.memory import create_connected_server_and_client_session  # noqa: E402
from mcp.types import CallToolResult, TextContent  # noqa: E402

# Every client call and every test is bounded: a hung server fails the test, not the run.
CALL_TIMEOUT = timedelta(seconds=60)
TEST_TIMEOUT_S = 180


@asynccontextmanager
async def connect(server: Any) -> AsyncIterator[ClientSession]:
    """An initialised client session on ``server``, in process (memory streams)."""
    async with asyncio.timeout(TEST_TIMEOUT_S):
        async with create_connected_server_and_client_session(
                server, read_timeout_seconds=CALL_TIMEOUT) as client:
            yield client


def text_of(result: CallToolResult) -> str:
    assert len(result.content) == 1 and isinstance(result.content[0], TextContent)
    return result.content[0].text


def closed_port() -> int:
    """A local TCP port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
