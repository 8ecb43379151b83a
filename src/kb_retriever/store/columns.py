"""The columns a search reads, named once: the SELECT lists (``store/sql.py``) are built from
them and the row readers (``store/rows.py``) read by them.

A document's columns are :class:`~kb_retriever.models.DocumentRef`'s fields (its id is read as
``doc_pk``), each with the conversion its value needs; a chunk's are the hit's chunk fields
(its id is read as ``chunk_id``). ``tests/unit/test_rows.py`` checks them against the models.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["CHUNK_FIELDS", "DOCUMENT_FIELDS"]


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
