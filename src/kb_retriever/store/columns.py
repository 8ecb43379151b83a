"""kb_documents' and kb_chunks' columns, named once: what a search reads (the SELECT lists of
``store/sql.py`` are built from it and ``store/rows.py`` reads by it) and what a write fills
(``store/writer.py`` and the bulk loader).

A document's columns are :class:`~kb_retriever.models.DocumentRef`'s fields (its id is read as
``doc_pk``), each with the conversion its value needs; a chunk's are the hit's chunk fields
(its id is read as ``chunk_id``). ``tests/unit/test_rows.py`` checks them against the models.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from datetime import date, time
from typing import Any

from psycopg import sql
from psycopg.types.json import Jsonb

from ..models import DocumentDraft

__all__ = ["CHUNK_COLUMNS", "CHUNK_FIELDS", "DOCUMENT_COLUMNS", "DOCUMENT_FIELDS", "DOC_COLUMNS",
           "as_json", "document_values", "json_default"]


def json_default(value: Any) -> Any:
    """What JSON stores for a metadata value it has no type for (``json.dumps``'s ``default``):
    a date or time as its ISO text (``str()`` put a space before the time, which sorts below the
    "T" of the ISO text a filter gives), a NumPy number or array as the number or list it holds
    (a page number ``np.int64(7)`` was stored as the string ``"7"``), anything else (a path)
    as its text.

    >>> import numpy as np, json
    >>> json.dumps({"page": np.int64(7), "box": np.array([1, 2])}, default=json_default)
    '{"page": 7, "box": [1, 2]}'
    """
    if isinstance(value, date | time):  # ISO text, as frontmatter's dates are stored
        return value.isoformat()
    tolist = getattr(value, "tolist", None)
    if callable(tolist) and type(value).__module__ == "numpy":
        return tolist()
    return str(value)


def as_json(value: Mapping[str, Any]) -> Any:
    """A mapping as its jsonb column holds it (a chunk's metadata, a document's frontmatter):
    NumPy numbers as numbers, dates and other objects as strings (:func:`json_default`). What a
    write stores, and what a write whose reply was lost compares the stored value with."""
    return json.loads(json.dumps(dict(value), default=json_default))


def _tags(value: Any) -> tuple[str, ...]:
    return tuple(value or ())


#: kb_documents columns in DocumentRef's field order, with their conversions (None: as read)
DOCUMENT_FIELDS: tuple[tuple[str, Callable[[Any], Any] | None], ...] = (
    ("tenant_id", None), ("project_key", None), ("doc_key", None), ("title", None),
    ("source_path", None), ("source_type", None), ("slug", None), ("doc_id", None),
    ("is_canonical", bool), ("canonical_type", None), ("canonical_status", None),
    ("retrieval_priority", int), ("generation_source", None), ("evidence_tier", None),
    ("tags", _tags), ("summary", None), ("language", None), ("doc_date", None),
)

#: kb_chunks columns of a hit besides its id
CHUNK_FIELDS: tuple[str, ...] = ("text", "heading_path", "chunk_order", "metadata", "chunk_uid")

#: The kb_documents columns a draft fills, with their COPY types: the one list that the
#: per-document INSERT / UPDATE (``store.writer.write_document``) and the bulk loader's COPY share.
DOCUMENT_COLUMNS: tuple[tuple[str, str], ...] = (
    ("doc_key", "text"), ("title", "text"), ("source_type", "text"), ("content_hash", "text"),
    ("doc_id", "text"), ("slug", "text"), ("is_canonical", "bool"), ("canonical_type", "text"),
    ("canonical_status", "text"), ("retrieval_priority", "int2"),
    ("generation_source", "text"), ("evidence_tier", "text"), ("tags", "text[]"),
    ("owners", "text[]"), ("summary", "text"), ("language", "text"),
    ("doc_date", "timestamptz"), ("frontmatter", "jsonb"), ("content", "text"),
    ("metadata", "jsonb"),
)


def document_values(draft: DocumentDraft) -> dict[str, Any]:
    """The draft's value for each of :data:`DOCUMENT_COLUMNS`, in that order."""
    values = {
        "doc_key": draft.doc_key, "title": draft.title, "source_type": draft.source_type,
        "content_hash": draft.content_hash, "doc_id": draft.doc_id, "slug": draft.slug,
        "is_canonical": draft.is_canonical, "canonical_type": draft.canonical_type,
        "canonical_status": draft.canonical_status,
        "retrieval_priority": draft.retrieval_priority,
        "generation_source": draft.generation_source, "evidence_tier": draft.evidence_tier,
        "tags": list(draft.tags), "owners": list(draft.owners), "summary": draft.summary,
        "language": draft.language, "doc_date": draft.doc_date,
        "frontmatter": Jsonb(as_json(draft.frontmatter)),
        "content": draft.content,
        "metadata": (None if draft.record_metadata is None
                     else Jsonb(as_json(draft.record_metadata))),
    }
    return values


# The document and chunk columns every search query returns (aliases ``d`` and ``c``).
DOC_COLUMNS = sql.SQL(", ").join(
    [sql.SQL("d.id AS doc_pk"), *(sql.SQL(f"d.{name}") for name, _ in DOCUMENT_FIELDS)])
# The metadata comes as text, which store.rows.candidate_from_row parses: psycopg's jsonb loader
# decodes bytes first, 3.5 % of a search's client instructions more (decision 0017).
CHUNK_COLUMNS = sql.SQL(", ").join(
    [sql.SQL("c.id AS chunk_id"),
     *(sql.SQL("c.metadata::text AS metadata" if name == "metadata" else f"c.{name}")
       for name in CHUNK_FIELDS)])
