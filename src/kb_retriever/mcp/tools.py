"""The pure half of the MCP server: which projects a call may touch, what a failure says, and
how a search result or a stored document becomes a tool's output.

Nothing here imports the MCP SDK or touches a database, so it is tested as plain functions
(``tests/mcp/test_tools.py``); ``server.py`` wires it to the SDK and to the knowledge base.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypedDict

from pydantic import ValidationError

from ..errors import InputError, KbError
from ..kb_documents import valid_name
from ..models import SearchResult, StoredDocument
from ..prompt.compose import compose_prompt

__all__ = ["DOCUMENT_CHARS", "Scope", "SearchPayload", "describe_failure",
           "document_text", "refusal_line", "search_payload", "search_text"]

logger = logging.getLogger(__name__)

#: The characters of a document that one ``get_document`` call returns: about 5,000 tokens,
#: room for a whole decision record or runbook without swamping an agent's context; longer
#: documents are read in pages (``offset``).
DOCUMENT_CHARS = 20_000
METADATA_CHARS = 2_000  # of a document's metadata, in get_document's header
# A failure's message is one line of at most this many characters: enough for a filter
# error that lists the valid keys, short enough to sit in a model's context.
_MESSAGE_CHARS = 600


@dataclass(frozen=True)
class Scope:
    """What a server may touch: these projects of one tenant, and writes only if allowed."""

    projects: tuple[str, ...]
    tenant: str = "default"
    allow_writes: bool = False

    def __post_init__(self) -> None:
        if not self.projects:
            raise InputError("the server needs at least one project")
        object.__setattr__(self, "projects", tuple(dict.fromkeys(
            valid_name("project", p) for p in self.projects)))
        object.__setattr__(self, "tenant", valid_name("tenant", self.tenant))

    @property
    def label(self) -> str:
        return ", ".join(self.projects)

    def searched(self, project: str | None) -> list[str]:
        """The projects a search covers: the one asked for (it must be in scope), else all."""
        if project is None:
            return list(self.projects)
        return [self._check(project)]

    def one(self, project: str | None) -> str:
        """The single project a write goes to: the one asked for, or the only one in scope."""
        if project is None:
            if len(self.projects) == 1:
                return self.projects[0]
            raise InputError(f"give project: this server serves several ({self.label})")
        return self._check(project)

    def _check(self, project: str) -> str:
        if project not in self.projects:
            raise InputError(f"unknown project {project[:120]!r}: this server serves {self.label}")
        return project


def describe_failure(exc: BaseException) -> str:
    """One line for an error result: what was wrong and, where the library says it, what to do.

    Argument validation errors name each bad field; the library's typed errors keep their
    message, after its type (passwords are redacted by the store); anything else is logged with its
    traceback on stderr and reported by its type."""
    if isinstance(exc, ValidationError):
        fields = "; ".join(f"{'.'.join(str(p) for p in err['loc']) or 'arguments'}: {err['msg']}"
                           for err in exc.errors())
        text = f"invalid arguments: {fields}"
    elif isinstance(exc, KbError):
        text = f"{type(exc).__name__}: {exc}"
    else:
        logger.error("tool failed unexpectedly", exc_info=exc)
        text = f"unexpected {type(exc).__name__}: {exc}"
    line = " ".join(text.split())
    return line if len(line) <= _MESSAGE_CHARS else line[:_MESSAGE_CHARS - 1] + "…"


def refusal_line(result: SearchResult) -> str:
    """The grounding gate's decision, stated for a model."""
    if result.meta["should_refuse"]:
        return ("Grounding: REFUSE (should_refuse: true). The knowledge base has no grounded "
                "evidence for this question: tell the user it does not cover it, and do not "
                "answer from general knowledge. Any blocks below are the nearest matches, "
                "for reference only.")
    return ("Grounding: ANSWER (should_refuse: false). Answer from the blocks below and cite "
            "each claim by its document title and Path.")


def search_text(result: SearchResult, *, projects: Sequence[str]) -> str:
    """The refusal decision, then the rejected, related and context blocks with citations."""
    blocks = compose_prompt(result, project=", ".join(projects), include_preamble=False,
                            name_projects=len(projects) > 1)
    return f"{refusal_line(result)}\n\n{blocks}"


class SearchPayload(TypedDict):
    """The ``search --json`` contract object (DESIGN.md): chunks with score breakdowns."""

    primary: list[dict[str, Any]]
    expanded: list[dict[str, Any]]
    rejected: list[dict[str, Any]]
    runner_up: list[dict[str, Any]]
    meta: dict[str, Any]


def search_payload(result: SearchResult) -> SearchPayload:
    """``result.to_dict()``, made JSON-safe as ``search --json`` prints it (dates as text)."""
    plain = json.loads(json.dumps(result.to_dict(), ensure_ascii=False, default=str))
    return SearchPayload(primary=plain["primary"], expanded=plain["expanded"],
                         rejected=plain["rejected"], runner_up=plain["runner_up"],
                         meta=plain["meta"])


def document_text(doc: StoredDocument, *, project: str, offset: int = 0,
                  max_chars: int = DOCUMENT_CHARS) -> str:
    """A document for a model: its fields, its metadata as JSON, then at most ``max_chars``
    characters of its text from ``offset``, with a marker that says what was left out."""
    if offset < 0:
        raise InputError("offset must be 0 or more")
    head = [f"Id: {doc.id}", f"Project: {project}", f"Title: {doc.title or 'Untitled'}",
            f"Source type: {doc.source_type}"]
    if doc.slug:
        head.append(f"Slug: {doc.slug}")
    if doc.is_canonical:
        head.append(f"Type: {doc.canonical_type or 'unknown'} · "
                    f"Status: {doc.canonical_status or 'unknown'}")
    head.append(f"Chunks: {len(doc.chunks)}")
    meta = json.dumps(dict(doc.metadata), ensure_ascii=False, default=str, sort_keys=True)
    if len(meta) > METADATA_CHARS:  # a page is bounded, its header too
        meta = f"{meta[:METADATA_CHARS]}… ({len(meta) - METADATA_CHARS} more characters of metadata)"
    head.append("Metadata: " + meta)
    total = len(doc.text)
    if offset and offset >= total:
        raise InputError(f"offset {offset} is past the end of the document ({total} characters)")
    end = min(total, offset + max_chars)
    body = doc.text[offset:end]
    if offset or end < total:
        head.append(f"Text: characters {offset}-{end} of {total}")
    parts = ["\n".join(head), body]
    if end < total:
        parts.append(f"[… truncated: {total - end} more characters; call get_document again "
                     f"with offset={end} for the next part]")
    return "\n\n".join(parts)
