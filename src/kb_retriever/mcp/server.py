"""The MCP server: the knowledge base's search, documents and composed prompt as tools, on the
official ``mcp`` SDK (its ``FastMCP`` server; ``mcp>=1.24,<2``).

:func:`build_server` wires the pure parts of ``tools.py`` to a :class:`KnowledgeBase`;
:func:`serve` runs it over stdio or streamable HTTP (loopback only) and closes the knowledge
base at the end. Every tool is a coroutine over the library's async twins, so no database
call blocks the event loop. A failure is an error result (``isError``) with one line, and the
server stays up: the knowledge base is opened on the first call that needs it, and again
after a failed attempt, so a database that is down answers with an error, not a dead server.
"""

# No `from __future__ import annotations`: the SDK reads the tools' signatures at run time,
# and their argument types are local aliases that carry this server's limits.

import asyncio
import ipaddress
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Annotated, Any, Literal

import anyio
from mcp.server.fastmcp import FastMCP
from mcp.server.fastmcp.exceptions import ToolError
from mcp.server.transport_security import TransportSecuritySettings
from mcp.types import ContentBlock, GetPromptResult, PromptMessage, TextContent, ToolAnnotations
from pydantic import Field

from ..errors import ConfigError, InputError
from ..filters.dimensions import parse_filters
from ..kb import KnowledgeBase
from ..models import SearchResult
from ..prompt.compose import compose_prompt
from ..search.plan import validate_limit, validate_query
from ..settings import Settings
from . import descriptions as d
from .tools import (
    DOCUMENT_CHARS,
    Scope,
    SearchPayload,
    describe_failure,
    document_text,
    refusal_line,
    search_payload,
    search_text,
)

__all__ = ["build_server", "check_host", "serve"]

Transport = Literal["stdio", "streamable-http"]
_READ = ToolAnnotations(readOnlyHint=True, destructiveHint=False, idempotentHint=True,
                        openWorldHint=False)


class _Opener:
    """The knowledge base, opened on first use and retried after a failed open."""

    def __init__(self, kb: KnowledgeBase) -> None:
        self._kb = kb
        self._ready = False
        self._lock = asyncio.Lock()

    async def __call__(self) -> KnowledgeBase:
        if not self._ready:
            async with self._lock:
                if not self._ready:
                    await asyncio.to_thread(self._kb.open)  # may start the embedded server
                    self._ready = True
        return self._kb


def _known(name: str, arguments: dict[str, Any] | None, names: Iterable[str]) -> None:
    """Raise :class:`InputError` for the ``arguments`` that tool or prompt ``name`` does not
    take (the SDK drops them: a misspelt ``filter`` would search unfiltered)."""
    valid = list(names)
    unknown = sorted(set(arguments or {}) - set(valid))
    if unknown:
        raise InputError(f"unknown argument(s) {', '.join(map(repr, unknown))}; the arguments "
                         f"are {', '.join(valid)} ({name})")


class _Server(FastMCP):
    """FastMCP whose tool and prompt failures read as one line (the SDK would prefix its own
    words, show a validation error over several lines, and log a prompt's bad input with its
    traceback), and where an argument a tool or prompt does not take is an error."""

    #: Checks of a prompt's arguments before it renders, by prompt name (they raise).
    prompt_checks: dict[str, Callable[[dict[str, Any]], None]]
    #: The prompts rendered here, not by the SDK (which logs a failure's traceback and
    #: words it its own way), by name: their text from their arguments.
    prompt_renders: dict[str, Callable[..., Awaitable[str]]]

    async def call_tool(self, name: str, arguments: dict[str, Any]
                        ) -> Sequence[ContentBlock] | dict[str, Any]:
        try:
            for tool in await self.list_tools():
                if tool.name == name:
                    _known(name, arguments, tool.inputSchema.get("properties", {}))
            return await super().call_tool(name, arguments)
        except Exception as exc:
            cause = exc.__cause__ if isinstance(exc, ToolError) and exc.__cause__ else exc
            if isinstance(cause, ToolError):  # the SDK's own: "Unknown tool: x"
                raise ToolError(" ".join(str(cause).split())) from None
            raise ToolError(describe_failure(cause)) from None

    async def get_prompt(self, name: str, arguments: dict[str, Any] | None = None
                         ) -> GetPromptResult:
        try:
            for prompt in await self.list_prompts():
                if prompt.name == name:
                    _known(name, arguments, [a.name for a in prompt.arguments or ()])
                    self.prompt_checks.get(name, lambda _: None)(arguments or {})
                    if (render := self.prompt_renders.get(name)) is not None:
                        if missing := [a.name for a in prompt.arguments or ()
                                       if a.required and a.name not in (arguments or {})]:
                            raise InputError(f"missing argument(s) {', '.join(missing)} ({name})")
                        text = TextContent(type="text", text=await render(**(arguments or {})))
                        return GetPromptResult(description=prompt.description,
                                               messages=[PromptMessage(role="user", content=text)])
        except Exception as exc:
            raise ValueError(describe_failure(exc)) from None
        return await super().get_prompt(name, arguments)


def check_host(host: str) -> str:
    """``host`` if it is a loopback address: the HTTP transport has no authentication."""
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise ConfigError(f"--host {host} is not a loopback address; the MCP server has no "
                          "authentication, so it binds 127.0.0.1, ::1 or localhost only")
    return host


def build_server(kb: KnowledgeBase, scope: Scope, *, host: str = "127.0.0.1", port: int = 8000,
                 log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "WARNING") -> FastMCP:
    """An MCP server over ``kb`` for the projects and tenant of ``scope``.

    The server does not own ``kb``: :func:`serve` closes it, a caller that passes its own
    closes it too. Write tools exist only with ``scope.allow_writes``.

    Example::

        from mcp.shared.memory import create_connected_server_and_client_session

        server = build_server(KnowledgeBase(), Scope(projects=("platform",)))
        async with create_connected_server_and_client_session(server) as client:
            await client.call_tool("search_knowledge_base", {"query": "cache layer"})
    """
    check_host(host)
    hosts = dict.fromkeys([f"[{host}]" if ":" in host else host, "127.0.0.1", "localhost", "[::1]"])
    security = TransportSecuritySettings(  # DNS-rebinding protection for the HTTP transport
        enable_dns_rebinding_protection=True,
        allowed_hosts=[f"{h}:*" for h in hosts], allowed_origins=[f"http://{h}:*" for h in hosts])
    server = _Server("kb-retriever", instructions=d.INSTRUCTIONS, host=host, port=port,
                     log_level=log_level, transport_security=security)
    server.prompt_checks, server.prompt_renders = {}, {}
    opened = _Opener(kb)
    s = kb.settings
    h = d.arg_help(scope.projects, max_query_chars=s.max_query_chars, max_limit=s.max_limit,
                   default_limit=s.default_limit)
    _add_read_tools(server, opened, scope, s, h)
    if scope.allow_writes:
        _add_write_tools(server, opened, scope, h)
    return server


def _add_read_tools(server: _Server, opened: _Opener, scope: Scope, s: Settings,
                    h: dict[str, str]) -> None:
    """The search tools, the document reader and the prompt template."""
    Query = Annotated[str, Field(description=h["query"])]
    Project = Annotated[str | None, Field(description=h["project"])]
    Limit = Annotated[int | None, Field(description=h["limit"], strict=True)]  # true is no 1
    Filters = Annotated[dict[str, Any] | None, Field(description=h["filters"])]

    async def _search(query: str, project: str | None, limit: int | None,
                      filters: dict[str, Any] | None) -> tuple[SearchResult, list[str]]:
        projects = scope.searched(project)
        # The library's own checks, before any I/O: bad input reads as bad input even when
        # the database is down (the search runs them again; they are cheap and pure).
        validate_query(query, s)
        if limit is not None:
            validate_limit(limit, s)
        parse_filters(filters)
        base = await opened()
        result = await base.asearch(query, project=projects, tenant=scope.tenant, limit=limit,
                                    filters=filters, consistent=scope.allow_writes)
        return result, projects

    async def search_knowledge_base(query: Query, project: Project = None, limit: Limit = None,
                                    filters: Filters = None) -> str:
        result, projects = await _search(query, project, limit, filters)
        return search_text(result, projects=projects)

    async def search_knowledge_base_structured(query: Query, project: Project = None,
                                               limit: Limit = None,
                                               filters: Filters = None) -> SearchPayload:
        result, _ = await _search(query, project, limit, filters)
        return search_payload(result)

    async def get_document(id: Annotated[str, Field(description=h["id"])],
                           project: Project = None,
                           offset: Annotated[int, Field(description=h["offset"])] = 0) -> str:
        base = await opened()
        found = [(p, doc) for p in scope.searched(project)
                 for doc in await base.aget_by_ids([id], project=p, tenant=scope.tenant,
                                                   consistent=scope.allow_writes)]
        if not found:
            raise InputError(f"no document with id {id[:200]!r} in {project or scope.label}; "
                             "ids are the Path lines of search results")
        if len(found) > 1:
            raise InputError(f"id {id[:200]!r} is in several projects "
                             f"({', '.join(p for p, _ in found)}): give project")
        where, doc = found[0]
        return document_text(doc, project=where, offset=offset)

    server.add_tool(search_knowledge_base, title="Search the knowledge base",
                    description=d.SEARCH, annotations=_READ, structured_output=False)
    server.add_tool(search_knowledge_base_structured, title="Search, with score breakdowns",
                    description=d.STRUCTURED, annotations=_READ, structured_output=True)
    server.add_tool(get_document, title="Read a document",
                    description=d.GET.format(chars=f"{DOCUMENT_CHARS:,}"), annotations=_READ,
                    structured_output=False)

    async def answer_from_knowledge_base(
            question: Annotated[str, Field(description=h["question"])],
            project: Project = None) -> str:
        result, projects = await _search(question, project, None, None)
        system = compose_prompt(result, project=", ".join(projects), timezone=s.prompt_timezone,
                                name_projects=len(projects) > 1)
        if result.meta["should_refuse"]:  # the gate's decision, as the search tool states it
            system = f"{refusal_line(result)}\n\n{system}"
        return f"{system}\nQuestion: {question}"

    def check_question(arguments: dict[str, Any]) -> None:  # the library's checks, no I/O
        if "question" in arguments:  # else get_prompt says it is missing
            validate_query(arguments["question"], s)
        scope.searched(arguments.get("project"))

    server.prompt(name="answer_from_knowledge_base", description=d.PROMPT)(
        answer_from_knowledge_base)
    server.prompt_checks["answer_from_knowledge_base"] = check_question
    server.prompt_renders["answer_from_knowledge_base"] = answer_from_knowledge_base


def _add_write_tools(server: FastMCP, opened: _Opener, scope: Scope, h: dict[str, str]) -> None:
    WriteProject = Annotated[str | None, Field(description=h["write_project"])]

    async def add_document(text: Annotated[str, Field(description=h["text"])],
                           # str, not str | None: the SDK would decode "null" or '["a"]'
                           id: Annotated[str, Field(description=h["new_id"])] = "",
                           metadata: Annotated[dict[str, Any] | None,
                                               Field(description=h["metadata"])] = None,
                           project: WriteProject = None) -> str:
        target = scope.one(project)
        record: dict[str, Any] = {"text": text, "metadata": metadata or {}}
        if id:  # (none: one is derived from the text and metadata)
            record["id"] = id
        base = await opened()
        ids = await base.aadd_documents([record], project=target, tenant=scope.tenant)
        return f"Stored document {ids[0]!r} in project {target}."

    async def delete_document(id: Annotated[str, Field(description=h["id"])],
                              project: WriteProject = None) -> str:
        target = scope.one(project)
        base = await opened()
        count = await base.adelete([id], project=target, tenant=scope.tenant)
        return f"Deleted {count} document(s) with id {id[:200]!r} from project {target}."

    server.add_tool(add_document, title="Add a document", description=d.ADD,
                    annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=True,
                                                idempotentHint=True, openWorldHint=False),
                    structured_output=False)
    server.add_tool(delete_document, title="Delete a document", description=d.DELETE,
                    annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=True,
                                                idempotentHint=True, openWorldHint=False),
                    structured_output=False)


def serve(kb: KnowledgeBase, scope: Scope, *, transport: Transport = "stdio",
          host: str = "127.0.0.1", port: int = 8000, verbose: bool = False) -> None:
    """Run the server until the client disconnects (stdio) or the process is stopped (HTTP),
    then close ``kb``."""
    # (stdio listens on no address: a --host given with it is not checked, as the CLI says)
    server = build_server(kb, scope, host=host if transport != "stdio" else "127.0.0.1",
                          port=port, log_level="INFO" if verbose else "WARNING")

    async def run() -> None:
        try:
            if transport == "stdio":
                await server.run_stdio_async()
            else:
                await server.run_streamable_http_async()
        finally:
            await kb.aclose()

    try:
        anyio.run(run)
    except SystemExit as exc:  # uvicorn's startup failure, after logging why (port in use ...)
        if transport == "stdio" or not exc.code:
            raise
        raise ConfigError(f"could not serve on http://{host}:{port}/mcp "
                          "(the address is in use or not allowed: see the line above)") from None
