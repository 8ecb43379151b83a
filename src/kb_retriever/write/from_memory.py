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
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

import numpy as np

from ..checks import check_text
from ..embedding import Embedder
from ..embedding.base import check_vector
from ..errors import EmbeddingError, IngestError, InputError, KbError, WriteError
from ..ingest.chunking import chunk_markdown
from ..ingest.frontmatter import frontmatter_from_mapping, parse_frontmatter, split_frontmatter
from ..ingest.loaders import MAX_FILE_BYTES, PARSER_VERSION, _markdown_draft
from ..models import (
    ChunkDraft,
    ChunkRecord,
    DocumentDraft,
    DocumentRecord,
    StoredChunk,
    StoredDocument,
)
from ..settings import Settings
from ..store import writer
from ..store.session import Session
from ..vocabulary import CHUNKS_SOURCE_TYPE
from .from_files import embed_chunks

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


def derived_id(text: str, metadata: Mapping[str, Any]) -> str:
    """The id of a record given without one (and without a canonical slug): a UUID of its text
    and metadata, so that adding the same record twice is a no-op.

    >>> derived_id("a", {}) == derived_id("a", {}) != derived_id("b", {})
    True
    """
    return str(uuid.uuid5(_ID_NAMESPACE, json.dumps([text, dict(metadata)], sort_keys=True,
                                                    default=str)))


def frontmatter_fields(text: str) -> dict[str, Any]:
    r"""The fields of the frontmatter block that opens ``text`` (``{}`` without one, or when the
    block is rejected): a framework document's canonical fields may come in its text.

    >>> frontmatter_fields("---\nslug: a\ntype: decision\n---\nBody")["slug"]
    'a'
    """
    raw, _ = split_frontmatter(text)
    return dict(parse_frontmatter(text).data) if raw is not None else {}


def canonical_slug(metadata: Mapping[str, Any], settings: Settings) -> str | None:
    """The canonical slug that ``metadata`` gives a document (its frontmatter fields are
    valid and canonical), else None: the vector stores keep the documents that share one as
    the chunks of that canonical document (:meth:`KnowledgeBase.upsert_chunks`)."""
    if not settings.canonical_enabled:
        return None
    fm = frontmatter_from_mapping(_json_safe(metadata, "metadata"), "")
    return fm.slug if fm.is_canonical else None


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
        or derived_id(text, metadata)
    version = (f"{PARSER_VERSION};record;cap={settings.chunk_hard_cap_tokens};"
               f"overlap={settings.chunk_overlap_tokens};canonical={settings.canonical_enabled}")
    size = len(text.encode("utf-8")) + sum(len(t.encode("utf-8")) for t, *_ in chunks_in or ())
    if size > MAX_FILE_BYTES:  # what a file may hold: a document is read back whole
        raise InputError(f"document {doc_id!r:.80} holds {size / 2 ** 20:.1f} MB of text, more "
                         f"than {MAX_FILE_BYTES // 2 ** 20} MB; split it into documents")
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
    if len(drafts) > settings.ingest_max_chunks:
        raise InputError(f"document {doc_id!r:.80} has {len(drafts)} chunks, more than "
                         f"KB_INGEST_MAX_CHUNKS={settings.ingest_max_chunks}; split it into "
                         "documents or raise the limit")
    draft = _markdown_draft(draft, fm, drafts, canonical_enabled=settings.canonical_enabled)
    return replace(draft, content=text, record_metadata=MappingProxyType(metadata))


def unique_drafts(drafts: Sequence[DocumentDraft]) -> list[DocumentDraft]:
    """The drafts of one call, each id once: the same record twice is written once, and two
    different records with one id (the same ``id``, or the same canonical ``slug`` without
    one) are an :class:`InputError`, never one silently dropping the other."""
    seen: dict[str, tuple[int, DocumentDraft]] = {}
    for i, draft in enumerate(drafts):
        first = seen.setdefault(draft.source_path, (i, draft))
        if first[1].content_hash != draft.content_hash:
            raise InputError(
                f"documents {first[0]} and {i} of this call both have the id "
                f"{draft.source_path!r} (their id, else their canonical slug) but differ: give "
                "each its own id, or add them as the chunks of one document (upsert_chunks)")
    return [d for _, d in seen.values()]




def chunks_draft(document_id: str, chunks: Iterable[Any], metadata: Mapping[str, Any] | None,
                 settings: Settings, version: str | None = None
                 ) -> tuple[DocumentDraft, list[str]]:
    """The draft of :meth:`KnowledgeBase.upsert_chunks` (the chunks as given, each id once,
    the document's fields from ``metadata`` as for a record), and the id of each chunk given,
    in order (derived where missing)."""
    if isinstance(chunks, str | bytes | Mapping) or not isinstance(chunks, Iterable):
        raise InputError(f"chunks must be a list of chunks, got {type(chunks).__name__}")
    given = tuple(_chunk(c, i) for i, c in enumerate(chunks))
    if not given:
        raise InputError("upsert_chunks needs at least one chunk")
    doc_id = _id(document_id, "document id")
    draft = record_draft(DocumentRecord(text="", metadata=metadata or {}, id=doc_id,
                                        chunks=given), settings)
    kept: dict[str, ChunkDraft] = {}
    uids = writer.chunk_uids(draft)
    for uid, chunk in zip(uids, draft.chunks, strict=True):
        first = kept.setdefault(uid, chunk)
        if (first.text, dict(first.metadata)) != (chunk.text, dict(chunk.metadata)):
            raise InputError(f"two chunks of this call have the id {uid!r} but differ")
    chunks_kept = tuple(replace(c, order=i, uid=uid) for i, (uid, c) in enumerate(kept.items()))
    if version is not None and (not isinstance(version, str) or not version):
        raise InputError(f"version must be a non-empty string, got {version!r:.60}")
    return replace(draft, source_type=CHUNKS_SOURCE_TYPE, content=None,
                   content_hash=version or "", chunks=chunks_kept), uids


# --- writing (sync: the embedder and COPY run in the caller's thread) -------------------------
def _vectors(session: Session, embedder: Embedder, tenant: str,
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
        vectors, _ = embed_chunks(session, embedder, tenant, [draft.chunks[i].text for i in todo])
        for i, arr in zip(todo, vectors, strict=True):
            out[i] = arr
    return [v for v in out if v is not None]


@dataclass
class Written:
    """What :func:`write_records` did: the chunks of the documents it added or changed, the ids
    now stored as given (added, updated or unchanged), and the ids it could not write, with
    the reason."""

    chunks: int = 0
    saved: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)


def write_records(session: Session, embedder: Embedder, *, tenant: str, project: str,
                  drafts: Iterable[DocumentDraft],
                  stored_hash: Callable[[DocumentDraft], str | None] | None = None) -> Written:
    """Write each draft in its own transaction (unchanged content is a no-op).

    A draft that cannot be stored (its slug or a chunk id belongs to another document) is
    listed in ``failed`` and keeps its previous version; the others are written. A fault that
    stops every later write (the embedder, the connection) raises: a :class:`WriteError` that
    says which drafts were saved when some were, else the fault itself. When the connection
    is lost during a write, whether its commit went through is unknown: ``stored_hash`` (the
    content hash stored for a draft's id, read on another connection) tells, and a draft
    found saved is reported saved.
    """
    out = Written()
    pending = list(drafts)
    for i, draft in enumerate(pending):
        try:
            out.chunks += _write_record(session, embedder, tenant, project, draft)
        except IngestError as exc:
            prefix = f"{draft.source_path}: "
            msg = str(exc)
            out.failed[draft.source_path] = msg[len(prefix):] if msg.startswith(prefix) else msg
            continue
        except KbError as exc:
            if session.broken and stored_hash is not None and _committed(draft, stored_hash):
                out.saved.append(draft.source_path)
                i += 1
            if i == len(pending):
                return out
            if not out.saved:
                raise
            failed = {**out.failed, **{d.source_path: f"not written: {type(exc).__name__}"
                                       for d in pending[i:]}}
            raise WriteError(out.saved, failed) from exc
        out.saved.append(draft.source_path)
    return out


def _committed(draft: DocumentDraft, stored_hash: Callable[[DocumentDraft], str | None]) -> bool:
    """Whether the store holds ``draft``'s content (asked after a write lost its connection)."""
    try:
        return stored_hash(draft) == draft.content_hash
    except KbError:
        return False  # the server is still unreachable: the write stays reported as failed


def write_chunks(session: Session, embedder: Embedder, *, tenant: str, project: str,
                 draft: DocumentDraft) -> list[str]:
    """Add or replace the draft's chunks in its document (:func:`chunks_draft`); the ids of
    the chunks written."""
    for w in draft.canonical_warnings:
        logger.warning("%s: %s", draft.source_path, w)
    vectors = _vectors(session, embedder, tenant, draft)
    session.prepare_writes()
    return session.merge_chunks(tenant, project, draft, vectors)


def _write_record(session: Session, embedder: Embedder, tenant: str, project: str,
                  draft: DocumentDraft) -> int:
    """Write one draft; the chunks it wrote (0 when its content was unchanged)."""
    if session.stored_version(tenant, project, draft.source_path)[0] == draft.content_hash:
        return 0
    for w in draft.canonical_warnings:
        logger.warning("%s: %s", draft.source_path, w)
    vectors = _vectors(session, embedder, tenant, draft)
    session.prepare_writes()
    if session.write_document(tenant, project, draft, vectors) == "unchanged":
        return 0
    return len(draft.chunks)


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

