"""Documents and nodes of other frameworks, as plain data, into rerank candidates.

A :class:`ForeignDocument` is what any framework's document or node comes down to: its text,
its metadata mapping, the score its retriever gave it and its ids. Canonical fields (the trust
gradient's inputs) are read from the metadata wherever our adapters or a user's loader put
them: the top level first, then ``metadata["kb"]["document"]`` (what our adapters write), then a
``metadata["kb_document"]`` mapping (the LlamaIndex vector store's earlier shape).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath
from types import MappingProxyType
from typing import Any

from ..models import Candidate, DocumentRef
from ..vocabulary import CANONICAL_STATUSES, CANONICAL_TYPES
from .coerce import as_date, as_flag, as_float, as_int, as_opt_str, as_tags

__all__ = ["DEFAULT_PROJECT", "DEFAULT_SOURCE_TYPE", "DEFAULT_TENANT", "ForeignDocument",
           "document_ref", "kb_record", "to_candidates"]

#: Scope and source type of a document known only through a framework's metadata: the CLI's
#: defaults for the scope, and plain text for the content (a framework hands us text).
DEFAULT_TENANT = "default"
DEFAULT_PROJECT = "default"
DEFAULT_SOURCE_TYPE = "text"

# Where a document's path may be, most specific first (LangChain loaders: "source";
# LlamaIndex readers: "file_path", "file_name").
_PATH_KEYS = ("source_path", "source", "file_path", "file_name")


@dataclass(frozen=True)
class ForeignDocument:
    """A document of another framework: ``text``, ``metadata``, the ``score`` its framework
    holds apart from the metadata (LlamaIndex's ``NodeWithScore.score``; None for LangChain,
    whose retrievers put it in the metadata), its own ``id`` and ``source_id``, the id of the
    document it is a chunk of (LlamaIndex's SOURCE relationship), when known."""

    text: str
    metadata: Mapping[str, Any]
    score: float | None = None
    id: str | None = None
    source_id: str | None = None

    @property
    def retrieval_score(self) -> float | None:
        """The score its retriever gave it: ``score``, else ``metadata["relevance_score"]``,
        else ``metadata["score"]`` (LangChain's conventions)."""
        if self.score is not None:
            return as_float(self.score)
        for key in ("relevance_score", "score"):
            value = as_float(self.metadata.get(key))
            if value is not None:
                return value
        return None

    @property
    def similarity(self) -> float | None:
        """Its cosine similarity to the query when known, else its retrieval score: the vector
        signal. ``metadata["similarity"]``, else the one our adapters keep in ``kb`` (a hit's
        final score is no cosine), else :attr:`retrieval_score`."""
        for value in (self.metadata.get("similarity"), kb_record(self.metadata).get("similarity")):
            found = as_float(value)
            if found is not None:
                return found
        return self.retrieval_score


def kb_record(metadata: Mapping[str, Any]) -> Mapping[str, Any]:
    """``metadata["kb"]`` when it is a mapping (what our adapters write), else empty."""
    kb = metadata.get("kb")
    return kb if isinstance(kb, Mapping) else {}


def _blank(value: Any) -> bool:
    """None or the empty string (``value in (None, "")`` asks a NumPy array's elements)."""
    return value is None or (isinstance(value, str) and not value)


class _Fields:
    """Look a field up in the top-level metadata, then in our nested document records."""

    def __init__(self, metadata: Mapping[str, Any]) -> None:
        nested = [kb_record(metadata).get("document"), metadata.get("kb_document")]
        self.layers = [metadata, *(n for n in nested if isinstance(n, Mapping))]

    def __call__(self, *names: str) -> Any:
        for layer in self.layers:
            for name in names:
                if not _blank(layer.get(name)):
                    return layer[name]
        return None

    def has(self, name: str) -> bool:
        return any(name in layer for layer in self.layers)


def _named(value: Any, vocabulary: Sequence[str]) -> str | None:
    """``value`` when it is one of the ``vocabulary``'s words (any case), else None: the
    frontmatter's ``type`` and ``status`` keys, which a loader's own metadata may also use for
    something else (``type: pdf``).

    >>> _named("Decision", ("decision",)), _named("pdf", ("decision",))
    ('decision', None)
    """
    word = value.strip().lower() if isinstance(value, str) else None
    return word if word in vocabulary else None


def document_ref(item: ForeignDocument, doc_id: int, *, position: int = 0) -> DocumentRef:
    """The :class:`DocumentRef` that ``item``'s metadata describes, numbered ``doc_id``.

    Unknown fields take one default each: tenant and project ``"default"``, source type
    ``"text"``, priority 50, ``generation_source`` ``"human"``. The canonical type and status
    are ``canonical_type`` / ``canonical_status``, else the frontmatter's ``type`` / ``status``
    when they name one (the keys of the vector stores' documents). A document with a canonical
    type or status but no ``is_canonical`` key is canonical. ``doc_key``: the metadata's, else the
    path's stem, else the slug, else ``item.source_id``, else ``item.id``, else ``position``;
    the title falls back to the file name, then to the ``doc_key``.

    >>> ref = document_ref(ForeignDocument("text", {"source": "adr/dec-cache.md",
    ...                    "kb": {"document": {"canonical_type": "decision"}}}), 1)
    >>> ref.doc_key, ref.title, ref.is_canonical, ref.canonical_type, ref.tenant_id
    ('dec-cache', 'dec-cache', True, 'decision', 'default')
    """
    field = _Fields(item.metadata)
    path = str(field(*_PATH_KEYS) or "")
    slug = as_opt_str(field("slug"))
    ctype = as_opt_str(field("canonical_type")) or _named(field("type"), CANONICAL_TYPES)
    status = as_opt_str(field("canonical_status")) or _named(field("status"), CANONICAL_STATUSES)
    canonical = as_flag(field("is_canonical")) if field.has("is_canonical") else bool(
        ctype or status)
    doc_key = str(field("doc_key") or (PurePosixPath(path).stem if path else "") or slug
                  or item.source_id or item.id or position)
    return DocumentRef(
        id=doc_id, tenant_id=DEFAULT_TENANT,
        project_key=str(field("project_key") or DEFAULT_PROJECT), doc_key=doc_key,
        title=str(field("title") or field("file_name") or doc_key), source_path=path,
        source_type=str(field("source_type") or DEFAULT_SOURCE_TYPE), slug=slug,
        is_canonical=canonical, canonical_type=ctype, canonical_status=status,
        retrieval_priority=_priority(field("retrieval_priority")),
        generation_source=str(field("generation_source") or "human"),
        evidence_tier=as_opt_str(field("evidence_tier")), tags=as_tags(field("tags")),
        summary=as_opt_str(field("summary")), doc_date=as_date(field("doc_date", "date")),
    )


def _priority(value: Any) -> int:
    """``retrieval_priority`` as the frontmatter takes it, 0 to 100; 50 otherwise (another
    scale's 100000 outranked every other document)."""
    priority = as_int(value, 50)
    return priority if 0 <= priority <= 100 else 50


def document_numbers(items: Sequence[ForeignDocument]) -> list[int]:
    """One number per document across ``items`` (the per-document cap groups by it): the
    ``source_id``, else the path, else the slug, within the item's project (two projects'
    ``README.md`` are two documents); an item with none stands alone."""
    seen: dict[tuple[str, str], int] = {}
    out = []
    for i, item in enumerate(items):
        field = _Fields(item.metadata)
        key = item.source_id or field(*_PATH_KEYS) or field("slug")
        project = str(field("project_key") or DEFAULT_PROJECT)
        out.append(seen.setdefault((project, str(key)) if key else ("", f"\x00{i}"),
                                   len(seen) + 1))
    return out


def heading_path(metadata: Mapping[str, Any]) -> str:
    for value in (metadata.get("heading_path"), kb_record(metadata).get("heading_path")):
        if isinstance(value, str) and value:
            return value
    return ""


def to_candidates(items: Sequence[ForeignDocument], *, rrf_k: int,
                  similarities: Mapping[int, float] | None = None) -> list[Candidate]:
    """Rerank candidates for ``items``; each one's ``chunk_id`` is its position, so the caller
    maps hits back. The vector signal is ``similarities[position]`` when given, else
    :attr:`ForeignDocument.similarity`, else 0. The fused score is RRF over the input rank
    (``1 / (rrf_k + rank)``), so with reranking off the retriever's order stands."""
    given = {i: as_float(v) for i, v in (similarities or {}).items()}
    numbers = document_numbers(items)
    out = []
    for i, item in enumerate(items):
        similarity = given.get(i)
        if similarity is None:
            similarity = item.similarity
        out.append(Candidate(
            chunk_id=i, text=item.text, heading_path=heading_path(item.metadata), chunk_order=i,
            document=document_ref(item, numbers[i], position=i),
            vector_similarity=similarity if similarity is not None else 0.0,
            fused_score=1.0 / (rrf_k + i + 1), metadata=MappingProxyType(dict(item.metadata)),
        ))
    return out
