"""``kb_search_tool``: a ``StructuredTool`` an agent can call with a query, k and filters."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date
from typing import Any, Literal

from langchain_core.documents import Document
from langchain_core.tools import StructuredTool, ToolException
from pydantic import BaseModel, ConfigDict, Field

from kb_retriever import KbError, KnowledgeBase
from kb_retriever.vocabulary import CANONICAL_TYPES, SOURCE_TYPES

from .prompt import KBPromptComposer
from .retrievers import KBRetriever

__all__ = ["KBSearchFilters", "KBSearchInput", "kb_search_tool"]

# The core's vocabulary as literals, so the model sees the valid values in the JSON schema
# instead of learning them from an error (``Literal[("a", "b")]`` is ``Literal["a", "b"]``).
SourceType = Literal[SOURCE_TYPES]  # type: ignore[valid-type]
CanonicalType = Literal[CANONICAL_TYPES]  # type: ignore[valid-type]

DEFAULT_DESCRIPTION = (
    "Search the engineering knowledge base (decisions, runbooks, standards, incidents, module "
    "docs). Returns context blocks: rejected approaches (never propose them), related "
    "documents, and the matching chunks with their title and path to cite."
)


class KBSearchFilters(BaseModel):
    """Optional narrowing of a knowledge-base search (values OR-ed, dimensions AND-ed)."""

    model_config = ConfigDict(extra="forbid")

    source_types: list[SourceType] | None = Field(None, description="File kinds to search.")
    canonical_types: list[CanonicalType] | None = Field(
        None, description="Canonical document types to search.")
    tags: list[str] | None = Field(None, description="Frontmatter tags; any of them matches.")
    folder_globs: list[str] | None = Field(
        None, description="Path globs such as 'runbooks/**'.")
    date_from: date | None = Field(None, description="Only documents dated on/after (ISO).")
    date_to: date | None = Field(None, description="Only documents dated on/before (ISO).")
    where: dict[str, Any] | None = Field(
        None, description="A filter expression over document fields (canonical_type, "
        "canonical_status, slug, title, tags, retrieval_priority, doc_date, ...) and metadata "
        "keys: {field: value} or {field: {$eq|$ne|$in|$nin|$gt|$gte|$lt|$lte|$between|$like|"
        "$ilike|$exists: value}}, combined with $and, $or, $not.")


class KBSearchInput(BaseModel):
    """The arguments of the knowledge-base search tool."""

    model_config = ConfigDict(extra="forbid")

    query: str = Field(description="What to look for, in natural language.")
    k: int | None = Field(None, ge=1, le=50, description="How many chunks to return.")
    filters: KBSearchFilters | None = Field(None, description="Optional filters.")
    project: str | None = Field(None, description="Project to search; default: the usual one.")


def kb_search_tool(source: KnowledgeBase | KBRetriever, *, name: str = "kb_search",
                   description: str = DEFAULT_DESCRIPTION,
                   composer: KBPromptComposer | None = None,
                   allowed_projects: Sequence[str] | None = None,
                   include_preamble: bool = False, **retriever_fields: Any,
                   ) -> StructuredTool:
    """A ``StructuredTool`` over a knowledge base, for agents.

    Arguments the model fills in: ``query``, ``k``, ``filters`` (typed: source_types,
    canonical_types, tags, folder_globs, date_from, date_to) and ``project``. The tool
    returns the composed context (the three blocks of :func:`kb_retriever.compose_prompt`)
    as content, without the system preamble (its rules belong in the agent's own system
    prompt; ``include_preamble=True`` adds them), and, with
    ``response_format="content_and_artifact"``, the ``Document`` list (primary, then graph and
    rejected) as the ``ToolMessage`` artifact. Bad arguments (a schema violation such as
    ``k: 500`` or an unknown canonical type, or a value the knowledge base refuses) come back
    to the model as an error ``ToolMessage`` it can read and correct, never as an exception.

    ``source`` is a :class:`KnowledgeBase` (``retriever_fields`` such as ``k`` or ``tenant``
    build the retriever) or a ready :class:`KBRetriever`. ``allowed_projects`` restricts
    which projects the model may name; the tenant is never the model's choice.

    Example::

        tool = kb_search_tool(kb, k=4)
        msg = tool.invoke({"type": "tool_call", "id": "1", "name": "kb_search",
                           "args": {"query": "cache layer", "filters": {"tags": ["cache"]}}})
        print(msg.content)        # the composed context
        print(msg.artifact[0].id) # the chunk ids, for citations
    """
    retriever = (source if isinstance(source, KBRetriever)
                 else KBRetriever(kb=source, **retriever_fields))
    render = composer or KBPromptComposer(retriever=retriever, include_preamble=include_preamble)
    allowed = None if allowed_projects is None else frozenset(allowed_projects)

    def options(k: int | None, filters: KBSearchFilters | dict[str, Any] | None,
                project: str | None) -> dict[str, Any]:
        if allowed is not None and project is not None and project not in allowed:
            raise ToolException(
                f"project {project!r} is not available; choose one of {sorted(allowed)}")
        opts: dict[str, Any] = {"include_context": True}
        if k is not None:
            opts["k"] = k
        if isinstance(filters, KBSearchFilters):
            filters = filters.model_dump(exclude_none=True)
        filters = dict(filters or {})
        if filters.get("where") is not None:
            opts["filter"] = filters.pop("where")
        filters.pop("where", None)
        if filters:
            opts["filters"] = {key: (v.isoformat() if isinstance(v, date) else v)
                               for key, v in filters.items()}
        if project is not None:
            opts["project"] = project
        return opts

    def run(query: str, k: int | None = None, filters: Any = None,
            project: str | None = None) -> tuple[str, list[Document]]:
        opts = options(k, filters, project)
        try:
            result = retriever.search(query, **opts)
        except KbError as exc:
            raise ToolException(str(exc)) from exc
        return render.render(result), retriever.to_documents(result, **opts)

    async def arun(query: str, k: int | None = None, filters: Any = None,
                   project: str | None = None) -> tuple[str, list[Document]]:
        opts = options(k, filters, project)
        try:
            result = await retriever.asearch(query, **opts)
        except KbError as exc:
            raise ToolException(str(exc)) from exc
        return render.render(result), await retriever.ato_documents(result, **opts)

    return StructuredTool.from_function(
        func=run, coroutine=arun, name=name, description=description,
        args_schema=KBSearchInput, response_format="content_and_artifact",
        handle_tool_error=True, handle_validation_error=_validation_message,
    )


def _validation_message(exc: Exception) -> str:
    """A schema violation as one readable line per bad field, for the model to correct."""
    errors = getattr(exc, "errors", None)
    if not callable(errors):
        return f"invalid arguments: {exc}"
    lines = []
    for err in errors():
        where = ".".join(str(p) for p in err.get("loc", ())) or "arguments"
        lines.append(f"{where}: {err.get('msg', 'invalid')}")
    return "invalid arguments: " + "; ".join(lines)
