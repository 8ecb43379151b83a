"""Documents added from memory: records in, stable ids, get and delete by id.

A :class:`DocumentRecord` (text, metadata, an optional id, optionally pre-split chunks) becomes
the same :class:`~kb_retriever.models.DocumentDraft` a Markdown file becomes: canonical fields
come from the metadata or from a frontmatter block at the top of the text and are validated by
the same code, the text is chunked by the same chunker, and the draft is written by
:func:`kb_retriever.store.writer.write_document` (one transaction per document).

Ids (decision 0007): a document's id is the caller's id, else its canonical ``slug``, else a
UUID derived from its text and metadata (so adding the same record twice is a no-op, as
re-ingesting an unchanged file is); it is stored as the document's ``source_path``, which is
also a file's id. A chunk's id is the caller's, else derived from the document id and the
chunk's text (:func:`~kb_retriever.store.writer.chunk_uids`).

Reads and deletes are SQL values (``(query, params)``), run by the knowledge base's sync or
async connection; rows are converted here.
"""

from __future__ import annotations

import hashlib
import json
import logging
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

import numpy as np
import psycopg

from .checks import check_text
from .embedding import Embedder
from .embedding.base import check_vector
from .errors import EmbeddingError, IngestError, InputError
from .ingest.chunking import chunk_markdown
from .ingest.frontmatter import frontmatter_from_mapping, parse_frontmatter, split_frontmatter
from .ingest.loaders import MAX_FILE_BYTES, PARSER_VERSION, _markdown_draft
from .ingestion import embed_chunks
from .models import ChunkDraft, DocumentDraft
from .settings import Settings
from .store import writer

__all__ = ["ChunkRecord", "DocumentRecord", "StoredChunk", "StoredDocument", "as_record",
           "as_records", "record_draft"]

logger = logging.getLogger(__name__)

# Ids are source_path values: long enough for URLs and paths, short enough for a B-tree key.
MAX_ID_CHARS = 1000
# Metadata is JSON: deeper nesting is a bug or an attack (json.dumps recursed 5,000 levels
# into a RecursionError); frontmatter and filters stop at depths of the same order.
MAX_METADATA_DEPTH = 100
# Derived document ids: uuid5 in a namespace of our own, over the record's text and metadata.
_ID_NAMESPACE = uuid.UUID("6b622d72-6574-7269-6576-65722d646f63")  # "kb-retriever-doc"


def _empty() -> Mapping[str, Any]:
    return MappingProxyType({})


@dataclass(frozen=True)
class ChunkRecord:
    """A chunk the caller split (and maybe embedded) already; kept exactly as given."""

    text: str
    id: str | None = None
    metadata: Mapping[str, Any] = field(default_factory=_empty)
    embedding: Sequence[float] | None = None


@dataclass(frozen=True)
class DocumentRecord:
    """An in-memory document for :meth:`KnowledgeBase.add_documents`.

    ``metadata`` may carry the canonical fields (``slug``, ``type``, ``status``,
    ``retrieval_priority``, ``tags``, ``supersedes``, edge lists …), as may a frontmatter block
    at the top of ``text`` (the metadata wins where both give a field). With ``chunks`` the
    text is not split again: the chunks are stored as given.
    """

    text: str = ""
    metadata: Mapping[str, Any] = field(default_factory=_empty)
    id: str | None = None
    chunks: tuple[ChunkRecord, ...] | None = None


@dataclass(frozen=True)
class StoredChunk:
    """A chunk as stored: its stable id, its document's id, text and metadata."""

    id: str
    document_id: str
    text: str
    order: int
    heading_path: str = ""
    metadata: Mapping[str, Any] = field(default_factory=_empty)
    embedding: tuple[float, ...] | None = None  # only when asked for (with_embeddings=True)


@dataclass(frozen=True)
class StoredDocument:
    """A document as stored. ``text``/``metadata`` are exactly what was added for a document
    added from memory; for a file, its chunks' text and its frontmatter."""

    id: str
    text: str
    metadata: Mapping[str, Any]
    chunks: tuple[StoredChunk, ...]
    title: str
    source_type: str
    is_canonical: bool = False
    canonical_type: str | None = None
    canonical_status: str | None = None
    slug: str | None = None


# --- records -> drafts (pure) ---------------------------------------------------------------
def _id(value: Any, what: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip() or len(value) > MAX_ID_CHARS:
        raise InputError(f"{what} must be a non-empty string of at most {MAX_ID_CHARS} "
                         f"characters, got {value!r:.80}")
    return check_text(value, what)


def _text(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise InputError(f"{what} must be a string, got {type(value).__name__}")
    check_text(value, what)
    if len(value.encode("utf-8")) > MAX_FILE_BYTES:
        raise InputError(f"{what} is larger than {MAX_FILE_BYTES // (1024 * 1024)} MB")
    return value


def _json_safe(value: Mapping[str, Any], what: str) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise InputError(f"{what} must be a mapping, got {type(value).__name__}")
    _scan_json(value, what, strings=False)  # the depth, before json.dumps recurses
    try:  # jsonb: str keys; dates and other objects as strings (as frontmatter values are)
        out = json.loads(json.dumps(dict(value), default=str, allow_nan=False))
    except (TypeError, ValueError) as exc:
        raise InputError(f"{what} is not JSON-serialisable: {exc}") from None
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


def _chunk(value: Any, i: int) -> ChunkRecord:
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
            chunks=_chunks(value.get("chunks")))
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


def _chunks(value: Any) -> tuple[ChunkRecord, ...] | None:
    """A record's ``chunks``: None (the text is chunked) or a list of chunks."""
    if value is None:
        return None
    if isinstance(value, str | bytes | Mapping | ChunkRecord) or not isinstance(value, Iterable):
        raise InputError(f"chunks must be a list of ChunkRecords or mappings, got "
                         f"{type(value).__name__}")
    return tuple(_chunk(c, i) for i, c in enumerate(value))


def _embedding(value: Any, what: str) -> list[float] | None:
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


def _fallback_title(metadata: Mapping[str, Any], doc_id: str) -> str:
    """The title when neither a ``title`` field nor a first H1 gives one: the loader's source
    (LangChain ``source``, LlamaIndex ``file_name``), else the id."""
    for key in ("source", "file_name", "file_path"):
        value = metadata.get(key)
        if isinstance(value, str) and value.strip():
            return value.strip()[:300]
    return doc_id[:300]


def record_draft(record: DocumentRecord, settings: Settings) -> DocumentDraft:
    """The draft of one record: validated, chunked (unless pre-split), canonical fields parsed.

    Raises :class:`InputError` for a record that cannot be stored (wrong types, NUL, too big);
    invalid canonical fields never raise: the document is stored as non-canonical and
    ``canonical_warnings`` says why, as for files.
    """
    if not isinstance(record, DocumentRecord):
        raise InputError(f"record_draft takes a DocumentRecord, got {type(record).__name__}")
    text = _text(record.text, "document text")
    metadata = _json_safe(record.metadata, "document metadata")
    chunks = _chunks(record.chunks)
    chunks_in = None if chunks is None else [
        (_text(c.text, f"chunk {i} text"), _id(c.id, f"chunk {i} id"),
         _json_safe(c.metadata, f"chunk {i} metadata"),
         _embedding(c.embedding, f"chunk {i} embedding"))
        for i, c in enumerate(chunks)]
    # Canonical fields: the frontmatter block's, overridden key by key by the metadata's.
    raw, body = split_frontmatter(text)
    block = parse_frontmatter(text) if raw is not None else None
    data = {**(block.data if block is not None else {}), **metadata}
    fm = frontmatter_from_mapping(data, body)
    if block is not None and block.warnings and not block.data:  # the block itself was rejected
        fm = replace(fm, warnings=block.warnings + fm.warnings)
    doc_id = _id(record.id, "document id") or (fm.slug if fm.is_canonical else None) \
        or str(uuid.uuid5(_ID_NAMESPACE, json.dumps([text, metadata], sort_keys=True)))
    version = (f"{PARSER_VERSION};record;cap={settings.chunk_hard_cap_tokens};"
               f"overlap={settings.chunk_overlap_tokens};canonical={settings.canonical_enabled}")
    content = json.dumps([version, text, metadata, chunks_in], sort_keys=True)
    if chunks_in is None:
        drafts = chunk_markdown(text, hard_cap_tokens=settings.chunk_hard_cap_tokens,
                                overlap_tokens=settings.chunk_overlap_tokens, filename=doc_id)
    else:
        drafts = tuple(ChunkDraft(order=i, text=t, metadata=MappingProxyType(m), uid=cid,
                                  embedding=e) for i, (t, cid, m, e) in enumerate(chunks_in))
    draft = DocumentDraft(
        source_path=doc_id, doc_key=doc_id, title=_fallback_title(metadata, doc_id),
        source_type="markdown",
        content_hash=hashlib.sha256(content.encode("utf-8")).hexdigest(), chunks=(),
    )
    draft = _markdown_draft(draft, fm, drafts, canonical_enabled=settings.canonical_enabled)
    return replace(draft, content=text, record_metadata=MappingProxyType(metadata))


# --- writing (sync: the embedder and COPY run in the caller's thread) -------------------------
def _vectors(conn: psycopg.Connection, embedder: Embedder, tenant: str,
             draft: DocumentDraft) -> list[np.ndarray]:
    """The chunks' vectors: the caller's where given (checked), else the embedder's through the
    embedding cache."""
    given = [(i, c.embedding) for i, c in enumerate(draft.chunks) if c.embedding is not None]
    out: list[np.ndarray | None] = [None] * len(draft.chunks)
    for i, raw in given:
        out[i] = check_vector(raw, dimension=embedder.dimension, model_id=embedder.model_id,
                              item=i).astype(np.float32)
    todo = [i for i, v in enumerate(out) if v is None]
    if todo:
        vectors, _ = embed_chunks(conn, embedder, tenant, [draft.chunks[i].text for i in todo])
        for i, arr in zip(todo, vectors, strict=True):
            out[i] = arr
    return [v for v in out if v is not None]


def write_records(conn: psycopg.Connection, embedder: Embedder, *, tenant: str, project: str,
                  drafts: Iterable[DocumentDraft]) -> int:
    """Write each draft in its own transaction; returns how many chunks the drafts that were
    added or changed have.

    A draft whose stored version has the same content hash is skipped. A failure raises
    (:class:`IngestError` for a slug or chunk id another document owns); the documents before
    it stay written, the failing one keeps its previous version.
    """
    written = chunks = 0
    for draft in drafts:
        if writer.existing_hash(conn, tenant, project, draft.source_path) == draft.content_hash:
            continue
        for w in draft.canonical_warnings:
            logger.warning("%s: %s", draft.source_path, w)
        vectors = _vectors(conn, embedder, tenant, draft)
        try:
            status = writer.write_document(conn, tenant=tenant, project=project, draft=draft,
                                           embeddings=vectors)
        except psycopg.errors.UniqueViolation:
            raise IngestError(f"{draft.source_path}: a chunk id is already used by another "
                              "document of the project") from None
        if status != "unchanged":
            if not written:
                writer.refresh_document_stats(conn)
            written += 1
            chunks += len(draft.chunks)
    if written:
        conn.execute("ANALYZE kb_chunks")  # the BM25 idf statistics, as after a file ingest
    return chunks


def validate_ids(ids: Any, what: str = "ids") -> list[str]:
    if isinstance(ids, str) or not isinstance(ids, Iterable):
        raise InputError(f"{what} must be a list of strings, got {type(ids).__name__}")
    out: list[str] = []
    for i in ids:
        checked = _id(i, "an id")
        if checked is None:  # None is "no id" in a record, never an id to look up
            raise InputError(f"{what} must be strings, not None")
        out.append(checked)
    return list(dict.fromkeys(out))

