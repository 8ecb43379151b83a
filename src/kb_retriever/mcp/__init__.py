"""kb-retriever as a Model Context Protocol server: ``kb-retriever mcp`` (extra ``[mcp]``).

The search (composed prompt blocks and refusal decision, or the structured hits with their
score breakdowns), documents by id and a prompt template, as MCP tools for any MCP client:
LangChain and LangGraph through langchain-mcp-adapters, LlamaIndex through
llama-index-tools-mcp, desktop and IDE agents natively.

``tools.py`` holds the pure parts (scope checks, failure messages, result conversion);
``server.py`` needs the ``mcp`` SDK and is imported on first use, with an install hint when
the extra is missing.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError

if TYPE_CHECKING:
    from .server import build_server, check_host, serve
    from .tools import Scope

__all__ = ["Scope", "build_server", "check_host", "serve"]

MISSING = ("the MCP server needs the mcp extra: pip install 'kb-retriever[mcp]' "
           "(the official mcp SDK, version 1.24 or later, before 2)")


def __getattr__(name: str) -> Any:
    if name == "Scope":
        from .tools import Scope

        return Scope
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    try:
        server = importlib.import_module(".server", __name__)
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] == "mcp":
            raise ConfigError(MISSING) from None
        raise
    return getattr(server, name)
