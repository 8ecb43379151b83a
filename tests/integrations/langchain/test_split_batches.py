"""The splits of a file whose text opens with frontmatter stay one canonical document when
they reach the store in several calls: ``index()``'s batches, a later edit of one split."""

from __future__ import annotations

import asyncio

import pytest
from langchain_core.documents import Document
from langchain_core.indexing import InMemoryRecordManager, aindex, index
from langchain_kb_retriever import KBVectorStore
from langchain_text_splitters import RecursiveCharacterTextSplitter

from kb_retriever import HashingEmbedder, KnowledgeBase
from kb_retriever.vocabulary import CHUNKS_SOURCE_TYPE

pytestmark = pytest.mark.db

HEAD = "---\nslug: {slug}\ntype: decision\nstatus: {status}\n---\n# {slug}\n\n"


def _file(slug: str, topic: str, status: str = "superseded", n: int = 8) -> Document:
    body = "\n\n".join(f"Paragraph {i} on {topic}: the shared cache layer keeps sessions warm "
                       f"and the eviction policy is least recently used ({i})." for i in range(n))
    return Document(page_content=HEAD.format(slug=slug, status=status) + body,
                    metadata={"source": f"{slug}.md"})


def _split(files: list[Document]) -> list[Document]:
    return RecursiveCharacterTextSplitter(chunk_size=300, chunk_overlap=0).split_documents(files)


def _plain_notes(kb: KnowledgeBase) -> list[str]:
    return [d.id for d in kb.list_documents() if d.source_type != CHUNKS_SOURCE_TYPE]


@pytest.mark.parametrize("run", ["sync", "async"])
def test_a_file_split_across_index_batches_is_one_document_and_an_edit_joins_it(
        make_kb, run: str):
    """``index()`` adds 3 splits at a time: the second file's first split ended one batch (a
    document of its own, its block read as its fields) and its other splits began the next
    (plain notes, no penalty); a later edit of one split was stored alone as a plain note."""
    kb: KnowledgeBase = make_kb(embedder=HashingEmbedder(128))
    store = KBVectorStore(kb=kb)
    manager = InMemoryRecordManager("kb")
    manager.create_schema()

    def sync(docs: list[Document]) -> dict[str, int]:
        if run == "sync":
            return dict(index(docs, manager, store, cleanup="incremental", batch_size=3,
                              source_id_key="source", key_encoder="sha256"))
        return dict(asyncio.run(aindex(docs, manager, store, cleanup="incremental",
                                       batch_size=3, source_id_key="source",
                                       key_encoder="sha256")))

    first, second = _split([_file("dec-a", "memcached", n=2)]), _split([_file("dec-b", "redis")])
    assert len(first) == 2 and len(second) > 3
    splits = first + second
    assert sync(splits)["num_added"] == len(splits)
    for slug, parts in (("dec-a", first), ("dec-b", second)):
        (doc,) = kb.get_by_ids([slug])
        assert (doc.source_type, doc.canonical_status) == (CHUNKS_SOURCE_TYPE, "superseded")
        assert sorted(c.text for c in doc.chunks) == sorted(d.page_content for d in parts)
    assert _plain_notes(kb) == []
    edited = [*second[:2], Document(page_content="Redis 7 replaced the cache layer.",
                                    metadata={"source": "dec-b.md"}), *second[3:]]
    # (incremental clean-up deletes a source's splits that a later batch brings again: the
    # edited split comes with dec-b's last ones, each a split without a block)
    assert sync(first + edited)["num_added"] == 3
    (doc,) = kb.get_by_ids(["dec-b"])
    assert sorted(c.text for c in doc.chunks) == sorted(d.page_content for d in edited)
    assert doc.canonical_status == "superseded" and _plain_notes(kb) == []
    # the first split edited (its status changed): the document takes the new fields
    changed = _split([_file("dec-b", "redis", status="accepted")])
    sync(first + changed[:1] + edited[1:])
    (doc,) = kb.get_by_ids(["dec-b"])
    assert (doc.canonical_status, _plain_notes(kb)) == ("accepted", [])


def test_a_split_added_alone_joins_its_files_document_and_other_files_stay_whole(make_kb):
    kb: KnowledgeBase = make_kb(embedder=HashingEmbedder(128))
    store = KBVectorStore(kb=kb)
    splits = _split([_file("dec-b", "redis")])
    store.add_documents(splits)
    (added,) = store.add_documents([Document(page_content="A paragraph added later.",
                                             metadata={"source": "dec-b.md"})])
    (doc,) = kb.get_by_ids(["dec-b"])
    assert len(doc.chunks) == len(splits) + 1 and added in {c.id for c in doc.chunks}
    # a note whose file has no stored splits, and a whole file with its block, stay whole
    store.add_documents([Document(page_content="Lunch is at noon.", metadata={"source": "n.md"}),
                         _file("dec-c", "valkey", n=2)])
    assert len(_plain_notes(kb)) == 2 and kb.get_by_ids(["dec-b"])[0].chunks == doc.chunks
