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

from ..embedding import Embedder
from ..embedding.base import check_vector
from ..errors import IngestError, InputError, KbError, WriteError
from ..ingest.chunking import chunk_markdown
from ..ingest.frontmatter import frontmatter_from_mapping, parse_frontmatter, split_frontmatter
from ..ingest.language import with_language
from ..ingest.loaders import MAX_FILE_BYTES, PARSER_VERSION, _markdown_draft, chunking_version
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
from ..store.columns import as_json
from ..store.session import Session
from ..vocabulary import CHUNKS_SOURCE_TYPE
from .from_files import embed_chunks
from .validate import (
    as_chunk,
    as_chunks,
    as_record,
    as_records,
    json_metadata,
    valid_embedding,
    valid_id,
    valid_text,
)
from .validate import validate_ids as validate_ids

__all__ = ["ChunkRecord", "DocumentRecord", "StoredChunk", "StoredDocument", "as_record",
           "as_records", "record_draft", "validate_ids"]

logger = logging.getLogger(__name__)

Stored = Callable[[list[str]], tuple[Sequence[StoredChunk], bool]]  # see write_chunks

# Derived document ids: uuid5 in a namespace of our own, over the record's text and metadata.
_ID_NAMESPACE = uuid.UUID("6b622d72-6574-7269-6576-65722d646f63")  # "kb-retriever-doc"


# --- records -> drafts (pure) ---------------------------------------------------------------
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


def with_frontmatter(text: str, metadata: Mapping[str, Any]) -> Mapping[str, Any]:
    r"""``metadata`` over the fields of the frontmatter block that opens ``text``: what a
    framework's document says of itself when its loader left the block in the text (the
    metadata's own keys win).

    >>> dict(with_frontmatter("---\nstatus: superseded\n---\nBody", {"status": "x", "k": 1}))
    {'status': 'x', 'k': 1}
    >>> with_frontmatter("Body", {"k": 1})
    {'k': 1}
    """
    if not text.startswith("---"):
        return metadata
    return {**frontmatter_fields(text), **metadata}


#: Documents whose stored chunks one read asks for (a filter's ``$in`` takes at most 1000).
_DOCUMENTS_PER_READ = 500


def chunks_of(document_ids: Sequence[str]) -> list[dict[str, Any]]:
    """``get_chunks`` filters for the stored chunks of ``document_ids``, a slice of them each
    (what the adapters read before a write, for :func:`shared_fields`).

    >>> chunks_of(["a", "b"])
    [{'$and': [{'source_path': {'$in': ['a', 'b']}}]}]
    """
    ids = list(document_ids)
    return [{"$and": [{"source_path": {"$in": ids[i:i + _DOCUMENTS_PER_READ]}}]}
            for i in range(0, len(ids), _DOCUMENTS_PER_READ)]


def by_document(chunks: Iterable[StoredChunk]) -> dict[str, list[StoredChunk]]:
    """The stored ``chunks`` (read through :func:`chunks_of`) by their document's id."""
    out: dict[str, list[StoredChunk]] = {}
    for chunk in chunks:
        out.setdefault(chunk.document_id, []).append(chunk)
    return out


def shared_fields(metadatas: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """The fields that every one of ``metadatas`` (the chunks of one document) has, with one
    value: what the framework vector stores give the document. A filter reads a chunk's
    metadata, then its document's fields, so a document field stands for every chunk that
    lacks the key; a key only some chunks have stays theirs.

    >>> shared_fields([{"type": "decision", "section": "intro"}, {"type": "decision"}])
    {'type': 'decision'}
    >>> shared_fields([])
    {}
    """
    chunks = iter(metadatas)
    out = dict(next(chunks, {}))
    for metadata in chunks:
        out = {k: v for k, v in out.items() if k in metadata and metadata[k] == v}
    return out


def canonical_slug(metadata: Mapping[str, Any], settings: Settings) -> str | None:
    """The canonical slug that ``metadata`` gives a document (its frontmatter fields are
    valid and canonical), else None: the vector stores keep the documents that share one as
    the chunks of that canonical document (:meth:`KnowledgeBase.upsert_chunks`)."""
    if not settings.canonical_enabled:
        return None
    fm = frontmatter_from_mapping(json_metadata(metadata, "metadata"), "")
    return fm.slug if fm.is_canonical else None


def record_draft(record: DocumentRecord, settings: Settings, *, detect: bool = True
                 ) -> DocumentDraft:
    """The draft of one record: validated, chunked (unless pre-split), canonical fields parsed,
    its language its metadata's, else (``detect``) the one its words show.

    Raises :class:`InputError` for a record that cannot be stored (wrong types, NUL, too big);
    invalid canonical fields never raise: the document is stored as non-canonical and
    ``canonical_warnings`` says why, as for files.
    """
    if not isinstance(record, DocumentRecord):
        raise InputError(f"record_draft takes a DocumentRecord, got {type(record).__name__}")
    text = valid_text(record.text, "document text")
    metadata = json_metadata(record.metadata, "document metadata")
    chunks = as_chunks(record.chunks)
    chunks_in = None if chunks is None else [
        (valid_text(c.text, f"chunk {i} text"), valid_id(c.id, f"chunk {i} id"),
         json_metadata(c.metadata, f"chunk {i} metadata"),
         valid_embedding(c.embedding, f"chunk {i} embedding"))
        for i, c in enumerate(chunks)]
    # Canonical fields: the frontmatter block's, overridden key by key by the metadata's.
    raw, body = split_frontmatter(text)
    block = parse_frontmatter(text) if raw is not None else None
    data = {**(block.data if block is not None else {}), **metadata}
    fm = frontmatter_from_mapping(data, body)
    if block is not None and block.warnings and not block.data:  # the block itself was rejected
        fm = replace(fm, warnings=block.warnings + fm.warnings)
    doc_id = valid_id(record.id, "document id") or (fm.slug if fm.is_canonical else None) \
        or derived_id(text, metadata)
    version = f"{PARSER_VERSION};record;{chunking_version(settings)}"
    size = len(text.encode("utf-8")) + sum(len(t.encode("utf-8")) for t, *_ in chunks_in or ())
    if size > MAX_FILE_BYTES:  # what a file may hold: a document is read back whole
        raise InputError(f"document {doc_id!r:.80} holds {size / 2 ** 20:.1f} MB of text, more "
                         f"than {MAX_FILE_BYTES // 2 ** 20} MB; split it into documents")
    content = json.dumps([version, text, metadata, chunks_in], sort_keys=True)
    def chunk_limit(count: int) -> None:  # checked while the text is chunked, too
        if count > settings.ingest_max_chunks:
            raise InputError(f"document {doc_id!r:.80} has more than KB_INGEST_MAX_CHUNKS="
                             f"{settings.ingest_max_chunks} chunks; split it or raise the limit")

    if chunks_in is None:
        drafts = chunk_markdown(text, hard_cap_tokens=settings.chunk_hard_cap_tokens,
                                overlap_tokens=settings.chunk_overlap_tokens, filename=doc_id,
                                check=chunk_limit)
    else:
        drafts = tuple(ChunkDraft(order=i, text=t, metadata=MappingProxyType(m), uid=cid,
                                  embedding=e) for i, (t, cid, m, e) in enumerate(chunks_in))
        chunk_limit(len(drafts))
    draft = DocumentDraft(source_path=doc_id, doc_key=doc_id, source_type="markdown",
                          title=_fallback_title(metadata, doc_id), chunks=(),
                          content_hash=hashlib.sha256(content.encode("utf-8")).hexdigest())
    draft = _markdown_draft(draft, fm, drafts, canonical_enabled=settings.canonical_enabled)
    if detect:
        draft = with_language(draft)
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
    given = tuple(as_chunk(c, i) for i, c in enumerate(chunks))
    if not given:
        raise InputError("upsert_chunks needs at least one chunk")
    doc_id = valid_id(document_id, "document id")
    # a call may carry a few of the document's chunks: its language is the metadata's only
    draft = record_draft(DocumentRecord(text="", metadata=metadata or {}, id=doc_id,
                                        chunks=given), settings, detect=False)
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
    if pending:
        session.check_project(tenant, project)  # another model's project: before embedding
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
                 draft: DocumentDraft, stored: Stored | None = None,
                 piece_key: writer.PieceKey = writer.whole_metadata) -> list[str]:
    """Add or replace the draft's chunks in its document (:func:`chunks_draft`,
    :func:`~kb_retriever.store.writer.merge_chunks`); the ids of the chunks written. When the
    connection is lost during the write, ``stored`` (the chunks of the given ids and whether
    the document holds the draft's fields, read on another connection) tells whether its
    commit went through: a write found saved is reported saved, as :func:`write_records`."""
    for w in draft.canonical_warnings:
        logger.warning("%s: %s", draft.source_path, w)
    session.check_project(tenant, project)
    vectors = _vectors(session, embedder, tenant, draft)
    session.prepare_writes()
    try:
        return session.merge_chunks(tenant, project, draft, vectors, piece_key)
    except KbError:
        if session.broken and stored is not None and _chunks_committed(draft, stored):
            return writer.chunk_uids(draft)
        raise


def _chunks_committed(draft: DocumentDraft, stored: Stored) -> bool:
    """Whether the store holds each of ``draft``'s chunks in its document, with its text and
    metadata, and the document its fields (asked after a write of them lost its connection)."""
    uids = writer.chunk_uids(draft)
    try:
        chunks, fields = stored(uids)
    except KbError:
        return False  # the server is still unreachable: the write stays reported as failed
    found = {c.id: c for c in chunks}
    return fields and all((s := found.get(uid)) is not None and s.document_id == draft.source_path
               and s.text == c.text and dict(s.metadata) == as_json(c.metadata)
               for uid, c in zip(uids, draft.chunks, strict=True))


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
