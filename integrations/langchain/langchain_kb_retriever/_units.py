"""How the LangChain ``Document`` s of :class:`KBVectorStore` map onto the knowledge base.

Every ``Document`` added is kept exactly as given, under its id (the ``ids`` passed, else
``Document.id``, else one derived from its text and metadata), and is what the store returns:

- A ``Document`` whose metadata gives a canonical slug (``type``, ``status``, ``slug`` …) is a
  **part** of that canonical document: one chunk of it, added or replaced by its id
  (:meth:`~kb_retriever.KnowledgeBase.upsert_chunks`). The splits of one loaded file share its
  metadata, so they become the chunks of one document, with one trust gradient and one place
  in the graph; parts added in other calls are kept. The document's fields are what all its
  parts share (a key only some parts have stays theirs: a filter reads a part's metadata, then
  its document's fields).
- Any other ``Document`` is a document of its own, split along its headings.

An id names one of them: adding a ``Document`` under an id that the other kind holds replaces
that one (a part that becomes a document of its own, or the reverse), as an upsert by id does
in langchain-postgres. A delete by id removes the document or the part with that id, never a
chunk of a document of its own.

A search returns each part, or each document, once (decision 0007).
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_core.documents import Document

from kb_retriever import Hit, KnowledgeBase, StoredChunk, StoredDocument
from kb_retriever.vocabulary import CHUNKS_SOURCE_TYPE
from kb_retriever.write.calls import Group, awrite_groups, write_groups
from kb_retriever.write.from_memory import (
    by_document,
    canonical_slug,
    chunks_of,
    derived_id,
    shared_fields,
    with_frontmatter,
)

__all__ = ["WritePlan", "afetch", "awrite", "fetch", "plan_writes", "unit_id", "whole", "write"]


@dataclass
class WritePlan:
    """The documents of one ``add_documents`` call: ``ids`` (one per document, in order), the
    records of documents of their own, and the parts of each canonical slug."""

    ids: list[str] = field(default_factory=list)
    whole: list[dict[str, Any]] = field(default_factory=list)
    parts: dict[str, list[dict[str, Any]]] = field(default_factory=dict)


def _source(metadata: Any) -> Any:
    """The file a record was loaded from (a loader's ``source``), when its metadata says."""
    source = metadata.get("source") if isinstance(metadata, Mapping) else None
    return source if isinstance(source, str) and source else None


@dataclass(frozen=True)
class _Call:
    """What one call's records say of themselves: each one's slug from its metadata, how many
    records each ``source`` has, and of each source the slug that a frontmatter block opening
    its first record without a slug gives (``TextLoader`` keeps the block in the text)."""

    own: list[str | None]
    counts: Counter[str | None]
    opened: dict[str, str]


def _read(records: Sequence[dict[str, Any]], kb: KnowledgeBase) -> _Call:
    own = [canonical_slug(r["metadata"], kb.settings) if isinstance(r["metadata"], Mapping)
           else None for r in records]
    opened: dict[str, str] = {}
    for record, slug in zip(records, own, strict=True):
        source = _source(record["metadata"])
        if (slug is None and source is not None and source not in opened
                and record["text"].startswith("---")):
            if (found := canonical_slug(with_frontmatter(record["text"], record["metadata"]),
                                        kb.settings)) is not None:
                opened[source] = found
    return _Call(own, Counter(_source(r["metadata"]) for r in records), opened)


def _unsettled(records: Sequence[dict[str, Any]], call: _Call) -> list[str]:
    """The sources whose records without a slug of their own the call alone cannot place
    (:func:`_slugs`): no block opens them, or one record alone (a whole file, or a split)."""
    return sorted({s for r, own in zip(records, call.own, strict=True)
                   if own is None and (s := _source(r["metadata"])) is not None
                   and (s not in call.opened or call.counts[s] == 1)})


def _joined_filter(sources: Sequence[str]) -> dict[str, Any]:
    return {"$and": [{"source": {"$in": list(sources)}},
                     {"$or": [{"source_type": CHUNKS_SOURCE_TYPE}, {"is_canonical": True}]}]}


def _joinable(documents: Sequence[StoredDocument]) -> dict[str, StoredDocument]:
    """Of each source: the stored document that its splits without a slug join, the canonical
    document that holds its splits (the first by id when several do), else a canonical
    document of its own; either opened by a frontmatter block (the file's first split, stored
    alone when it ended a call: ``index()`` adds a hundred at a time). A document whose slug
    came from its records' metadata is no file's block: a record of its source without that
    slug stays a document of its own, as it was when both were first added together."""
    out: dict[str, StoredDocument] = {}
    for doc in sorted(documents, key=lambda d: (d.source_type != CHUNKS_SOURCE_TYPE, d.id)):
        source = _source(doc.metadata)
        if source is not None and doc.text.startswith("---") and doc.slug:
            out.setdefault(source, doc)
    return out


def _stored_sources(kb: KnowledgeBase, sources: Sequence[str],
                    scope: dict[str, Any]) -> dict[str, StoredDocument]:
    """The stored documents that the records of the ``sources`` (:func:`_unsettled`) join."""
    if not sources:
        return {}
    ids = {c.document_id for c in kb.get_chunks(filters=_joined_filter(sources),
                                                consistent=True, **scope)}
    return _joinable(kb.get_by_ids(sorted(ids), consistent=True, **scope)) if ids else {}


async def _astored_sources(kb: KnowledgeBase, sources: Sequence[str],
                           scope: dict[str, Any]) -> dict[str, StoredDocument]:
    if not sources:
        return {}
    ids = {c.document_id for c in await kb.aget_chunks(filters=_joined_filter(sources),
                                                       consistent=True, **scope)}
    return _joinable(await kb.aget_by_ids(sorted(ids), consistent=True, **scope)) if ids else {}


def _slugs(records: Sequence[dict[str, Any]], call: _Call,
           stored: Mapping[str, StoredDocument]) -> list[str | None]:
    """The canonical slug of each record: its metadata's; else, for the splits of one file
    (records of one ``source``), the one a frontmatter block that opens the first of them
    gives, when the call has more of them or the file's splits are stored (every split of
    that file is a part of it); else the slug of the ``stored`` document its file's splits
    are part of (a split added on its own: ``index()`` adds only what changed, in batches).
    A file added whole keeps its block in its text, a document of its own."""
    out: list[str | None] = []
    for record, slug in zip(records, call.own, strict=True):
        source = _source(record["metadata"])
        if slug is None and source is not None:
            held = stored.get(source)
            if source in call.opened:
                if call.counts[source] > 1 or (held and held.source_type == CHUNKS_SOURCE_TYPE):
                    slug = call.opened[source]
            elif held is not None:
                slug = held.slug
        out.append(slug)
    return out


def plan_writes(records: Sequence[dict[str, Any]], call: _Call,
                stored: Mapping[str, StoredDocument]) -> WritePlan:
    """Sort ``records`` (``text``, ``metadata``, ``id``; :func:`_read` as ``call``) into
    documents and parts, given the ``stored`` documents their files' splits join
    (:func:`_joinable`). A first split stored as a document of its own becomes the first part
    of its slug, in the same write."""
    plan = WritePlan()
    for record, slug in zip(records, _slugs(records, call, stored), strict=True):
        metadata = record["metadata"]
        if slug is None:
            plan.whole.append(record)
            plan.ids.append("")  # the knowledge base's id, once written
            continue
        doc_id = record["id"] if record["id"] is not None else derived_id(record["text"], metadata)
        plan.parts.setdefault(slug, []).append({**record, "id": doc_id})
        plan.ids.append(doc_id)
    for held in stored.values():
        if held.source_type != CHUNKS_SOURCE_TYPE and held.slug in plan.parts:
            plan.parts[held.slug].insert(0, {"text": held.text, "id": held.id,
                                             "metadata": dict(held.metadata)})
    return plan


def _with_ids(plan: WritePlan, whole_ids: list[str]) -> list[str]:
    given = iter(whole_ids)
    return [doc_id or next(given) for doc_id in plan.ids]


def _fields(plan: WritePlan, stored: Sequence[StoredChunk]) -> dict[str, dict[str, Any]]:
    """The fields of each canonical document the plan writes: what all the parts it will hold
    share, the stored ones the write keeps (those of other ids) and the plan's
    (``kb_retriever.write.from_memory.shared_fields``)."""
    kept = by_document(stored)
    out = {}
    for slug, parts in plan.parts.items():
        ids = {p["id"] for p in parts}
        out[slug] = _document_fields([c for c in kept.get(slug, ()) if c.id not in ids], parts)
    return out


def _document_fields(stays: Sequence[StoredChunk], parts: Sequence[dict[str, Any]]
                     ) -> dict[str, Any]:
    """The fields of a canonical document that will hold ``stays`` (its stored parts that
    stay) and ``parts``: what they all share, over the frontmatter block that opens its first
    part that opens with one (a loader's, kept in the text: an edited first split comes
    after the others, and its block is the one that stays)."""
    fields = shared_fields([*(c.metadata for c in stays), *(p["metadata"] for p in parts)])
    texts = [*(c.text for c in sorted(stays, key=lambda c: c.order)), *(p["text"] for p in parts)]
    return dict(with_frontmatter(next((t for t in texts if t.startswith("---")), texts[0]),
                                 fields))


#: The chunks that are parts (a document of its own's chunks are not deleted by their ids).
PARTS = {"source_types": [CHUNKS_SOURCE_TYPE]}


def holders(kb: KnowledgeBase, ids: Sequence[str], scope: dict[str, Any]) -> list[str]:
    """The canonical documents that hold parts among ``ids``."""
    return sorted({c.document_id for c in kb.get_chunks(list(ids), filters=PARTS, consistent=True,
                                                          **scope)})


async def aholders(kb: KnowledgeBase, ids: Sequence[str], scope: dict[str, Any]) -> list[str]:
    return sorted({c.document_id for c in await kb.aget_chunks(
        list(ids), filters=PARTS, consistent=True, **scope)})


def refresh(kb: KnowledgeBase, slugs: Sequence[str], scope: dict[str, Any]) -> None:
    """Give each of the canonical documents ``slugs`` the fields its parts share, after a
    delete of some (the fields of parts of two versions side by side lack what changed, as
    when ``index()`` adds an ADR's new splits before it deletes the old ones): its first part
    written again with them (unchanged, its row stays; the document takes the fields)."""
    stored = [c for f in chunks_of(list(slugs)) for c in kb.get_chunks(filters=f, consistent=True,
                                                                         **scope)]
    for slug, head, fields in _refreshed(stored):
        kb.upsert_chunks(slug, [head], metadata=fields, **scope)


async def arefresh(kb: KnowledgeBase, slugs: Sequence[str], scope: dict[str, Any]) -> None:
    """The async twin of :func:`refresh`."""
    stored = [c for f in chunks_of(list(slugs))
              for c in await kb.aget_chunks(filters=f, consistent=True, **scope)]
    for slug, head, fields in _refreshed(stored):
        await kb.aupsert_chunks(slug, [head], metadata=fields, **scope)


def _refreshed(stored: Sequence[StoredChunk]) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """For each document of the ``stored`` parts: its slug, its first part as written again,
    and the fields all its parts share."""
    out = []
    for slug, chunks in by_document(stored).items():
        head = min(chunks, key=lambda c: c.order)
        out.append((slug, {"text": head.text, "id": head.id, "metadata": dict(head.metadata)},
                    _document_fields(chunks, [])))
    return out


def write(kb: KnowledgeBase, records: Sequence[dict[str, Any]], scope: dict[str, Any]
          ) -> list[str]:
    """Write ``records`` as :func:`plan_writes` sorts them: the documents of their own, then
    the parts of each slug, each in a transaction of its own that also removes what the other
    kind held under the same ids (the knowledge base keeps one thing per id, under the ids'
    locks: of two writers of one id, the later one stays). When a part of the call fails
    after another was saved, the call raises ``WriteError`` with both
    (``kb_retriever.write.calls``)."""
    call = _read(records, kb)
    plan = plan_writes(records, call, _stored_sources(kb, _unsettled(records, call), scope))
    whole_ids: list[str] = []
    groups: list[Group] = []
    if plan.whole:
        groups.append(([r["id"] for r in plan.whole if r["id"]],
                       lambda: whole_ids.extend(kb.add_documents(plan.whole, **scope))))
    fields = _fields(plan, [c for f in chunks_of(list(plan.parts))
                            for c in kb.get_chunks(filters=f, consistent=True, **scope)])
    for slug, parts in plan.parts.items():
        groups.append(([p["id"] for p in parts], functools.partial(
            kb.upsert_chunks, slug, parts, metadata=fields[slug], **scope)))
    write_groups(groups)
    return _with_ids(plan, whole_ids)


async def awrite(kb: KnowledgeBase, records: Sequence[dict[str, Any]], scope: dict[str, Any]
                 ) -> list[str]:
    call = _read(records, kb)
    plan = plan_writes(records, call,
                       await _astored_sources(kb, _unsettled(records, call), scope))
    whole_ids: list[str] = []

    async def add_whole() -> None:
        whole_ids.extend(await kb.aadd_documents(plan.whole, **scope))

    groups: list[tuple[list[str], Callable[[], Awaitable[Any]]]] = []
    if plan.whole:
        groups.append(([r["id"] for r in plan.whole if r["id"]], add_whole))
    fields = _fields(plan, [c for f in chunks_of(list(plan.parts))
                            for c in await kb.aget_chunks(filters=f, consistent=True, **scope)])
    for slug, parts in plan.parts.items():
        groups.append(([p["id"] for p in parts], functools.partial(
            kb.aupsert_chunks, slug, parts, metadata=fields[slug], **scope)))
    await awrite_groups(groups)
    return _with_ids(plan, whole_ids)


def unit_id(hit: Hit) -> str:
    """The id of what the store returns for ``hit``: its part, or its whole document."""
    if hit.document.source_type == CHUNKS_SOURCE_TYPE and hit.chunk_uid:
        return hit.chunk_uid
    return hit.document.source_path


def _document(stored: StoredDocument) -> Document:
    return Document(id=stored.id, page_content=stored.text, metadata=dict(stored.metadata))


def _in_order(ids: Sequence[str], documents: list[StoredDocument],
              parts: list[Any]) -> list[Document]:
    found = {d.id: _document(d) for d in documents}
    for chunk in parts:
        found.setdefault(chunk.id, Document(id=chunk.id, page_content=chunk.text,
                                            metadata=dict(chunk.metadata)))
    return [found[i] for i in dict.fromkeys(ids) if i in found]


def whole(documents: Sequence[StoredDocument]) -> list[StoredDocument]:
    """The documents of their own among ``documents``: a document that holds parts is named by
    its slug, which is no id of the store's (a part may have it: the first split's id)."""
    return [d for d in documents if d.source_type != CHUNKS_SOURCE_TYPE]


def fetch(kb: KnowledgeBase, ids: Sequence[str], scope: dict[str, Any]) -> list[Document]:
    """The documents and parts with these ids, as added, in the order asked."""
    documents = whole(kb.get_by_ids(ids, **scope))
    rest = [i for i in ids if i not in {d.id for d in documents}]
    return _in_order(ids, documents, kb.get_chunks(rest, **scope) if rest else [])


async def afetch(kb: KnowledgeBase, ids: Sequence[str], scope: dict[str, Any]) -> list[Document]:
    documents = whole(await kb.aget_by_ids(ids, **scope))
    rest = [i for i in ids if i not in {d.id for d in documents}]
    return _in_order(ids, documents, await kb.aget_chunks(rest, **scope) if rest else [])
