"""Records as callers give them, validated at the boundary: ids, texts PostgreSQL can store,
JSON metadata of bounded depth, chunks and vectors of the right shape. Every failure is an
:class:`~kb_retriever.errors.InputError` (or :class:`~kb_retriever.errors.EmbeddingError` for a
vector) that names the field, raised before anything is written.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from ..checks import check_text
from ..errors import EmbeddingError, InputError
from ..ingest.loaders import MAX_FILE_BYTES
from ..models import ChunkRecord, DocumentRecord
from ..store.columns import json_default

__all__ = ["MAX_ID_CHARS", "MAX_METADATA_DEPTH", "as_chunk", "as_chunks", "as_record",
           "as_records", "json_metadata", "valid_embedding", "valid_id", "valid_text",
           "validate_ids"]

# Ids are source_path values: long enough for URLs and paths, short enough for a B-tree key.
MAX_ID_CHARS = 1000
# Metadata is JSON: deeper nesting is a bug or an attack (json.dumps recursed 5,000 levels
# into a RecursionError); frontmatter and filters stop at depths of the same order.
MAX_METADATA_DEPTH = 100


def valid_id(value: Any, what: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip() or len(value) > MAX_ID_CHARS:
        raise InputError(f"{what} must be a non-empty string of at most {MAX_ID_CHARS} "
                         f"characters, got {value!r:.80}")
    return check_text(value, what)


def valid_text(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise InputError(f"{what} must be a string, got {type(value).__name__}")
    check_text(value, what)
    if len(value.encode("utf-8")) > MAX_FILE_BYTES:
        raise InputError(f"{what} is larger than {MAX_FILE_BYTES // (1024 * 1024)} MB")
    return value


def json_metadata(value: Mapping[str, Any], what: str) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise InputError(f"{what} must be a mapping, got {type(value).__name__}")
    _scan_json(value, what, strings=False)  # the depth, before json.dumps recurses
    try:  # jsonb: str keys; dates and other objects as strings (as frontmatter values are)
        text = json.dumps(dict(value), default=json_default, allow_nan=False)
        out = json.loads(text)
    except (TypeError, ValueError) as exc:
        raise InputError(f"{what} is not JSON-serialisable: {exc}") from None
    if len(text) > MAX_FILE_BYTES:  # (ASCII: json.dumps escapes the rest) as large as a file
        raise InputError(f"{what} is larger than {MAX_FILE_BYTES // (1024 * 1024)} MB as JSON")
    _scan_json(out, what, strings=True)
    return out


def _scan_json(value: Any, what: str, *, strings: bool) -> None:
    """Mappings and lists at most :data:`MAX_METADATA_DEPTH` deep (a cycle is infinitely
    deep); with ``strings``, every key and string storable (:func:`check_text`)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, Mapping | list | tuple):
            if depth > MAX_METADATA_DEPTH:
                raise InputError(f"{what} is nested more than {MAX_METADATA_DEPTH} levels deep")
            if isinstance(item, Mapping):
                if strings:
                    for key in item:
                        if isinstance(key, str):
                            check_text(key, f"a key of {what}")
                stack.extend((v, depth + 1) for v in item.values())
            else:
                stack.extend((v, depth + 1) for v in item)
        elif strings and isinstance(item, str):
            check_text(item, what)


def _known_keys(value: Mapping[str, Any], valid: tuple[str, ...], what: str) -> None:
    unknown = sorted(set(value) - set(valid))
    if unknown:
        raise InputError(f"{what} {unknown}; valid: {', '.join(valid)}")


def as_chunk(value: Any, i: int) -> ChunkRecord:
    if isinstance(value, ChunkRecord):
        return value
    if isinstance(value, Mapping):
        _known_keys(value, ("text", "id", "metadata", "embedding"), f"chunk {i}: unknown key(s)")
        return ChunkRecord(text=value.get("text", ""), id=value.get("id"),
                           metadata=value.get("metadata") or {}, embedding=value.get("embedding"))
    raise InputError(f"chunk {i} must be a ChunkRecord or a mapping, got {type(value).__name__}")


def as_record(value: Any) -> DocumentRecord:
    """A :class:`DocumentRecord` from itself or a mapping with ``text``, ``metadata``, ``id``
    and ``chunks``."""
    if isinstance(value, DocumentRecord):
        return value
    if isinstance(value, Mapping):
        _known_keys(value, ("text", "metadata", "id", "chunks"), "unknown document key(s)")
        return DocumentRecord(
            text=value.get("text", ""), metadata=value.get("metadata") or {}, id=value.get("id"),
            chunks=as_chunks(value.get("chunks")))
    raise InputError(
        f"a document must be a DocumentRecord or a mapping with 'text', 'metadata' and 'id', "
        f"got {type(value).__name__} (framework documents go through the adapters' "
        "vector stores)")


def as_records(values: Any) -> list[DocumentRecord]:
    """:func:`as_record` of each item of ``values``, a list of documents (not one document)."""
    if isinstance(values, str | bytes | Mapping | DocumentRecord) \
            or not isinstance(values, Iterable):
        raise InputError(f"documents must be a list of DocumentRecords or mappings, got "
                         f"{type(values).__name__}")
    return [as_record(v) for v in values]


def as_chunks(value: Any) -> tuple[ChunkRecord, ...] | None:
    """A record's ``chunks``: None (the text is chunked) or a list of chunks."""
    if value is None:
        return None
    if isinstance(value, str | bytes | Mapping | ChunkRecord) or not isinstance(value, Iterable):
        raise InputError(f"chunks must be a list of ChunkRecords or mappings, got "
                         f"{type(value).__name__}")
    return tuple(as_chunk(c, i) for i, c in enumerate(value))


def valid_embedding(value: Any, what: str) -> list[float] | None:
    """A caller's vector as floats (its dimension and values are checked when it is written,
    against the embedder's); :class:`EmbeddingError` for anything but a flat list of numbers."""
    if value is None:
        return None
    try:
        if isinstance(value, str | bytes):
            raise TypeError(type(value).__name__)
        array = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError, OverflowError):
        array = None
    if array is None or array.ndim != 1:
        raise EmbeddingError(f"{what} must be a list of numbers, got {value!r:.60}")
    return [float(x) for x in array]


def validate_ids(ids: Any, what: str = "ids") -> list[str]:
    if isinstance(ids, str) or not isinstance(ids, Iterable):
        raise InputError(f"{what} must be a list of strings, got {type(ids).__name__}")
    out: list[str] = []
    for i in ids:
        checked = valid_id(i, "an id")
        if checked is None:  # None is "no id" in a record, never an id to look up
            raise InputError(f"{what} must be strings, not None")
        out.append(checked)
    return list(dict.fromkeys(out))
