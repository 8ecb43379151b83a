"""The ordinary LangChain path, loader -> RecursiveCharacterTextSplitter -> from_documents,
keeps every split: splits that share a canonical slug are the chunks of that one document."""

from __future__ import annotations

import pytest
from langchain_core.documents import Document
from langchain_kb_retriever import KBVectorStore
from langchain_text_splitters import RecursiveCharacterTextSplitter

from kb_retriever import HashingEmbedder, KnowledgeBase, Settings
from kb_retriever.vocabulary import CHUNKS_SOURCE_TYPE

pytestmark = pytest.mark.db

ADR = {"slug": "dec-cache-v2", "type": "decision", "status": "accepted", "source": "adr.md"}
OLD = {"slug": "dec-cache-v1", "type": "decision", "status": "superseded", "source": "old.md"}


def _text(topic: str, n: int) -> str:
    return "\n\n".join(f"Paragraph {i} on {topic}: the shared cache layer keeps sessions "
                       f"warm and the eviction policy is least recently used ({i})."
                       for i in range(n))


def _splits() -> list[Document]:
    loaded = [Document(page_content=_text("redis", 30), metadata=ADR),
              Document(page_content=_text("memcached", 12), metadata=OLD),
              Document(page_content=_text("lunch", 6), metadata={"source": "note.md"})]
    return RecursiveCharacterTextSplitter(chunk_size=400, chunk_overlap=0).split_documents(loaded)


def test_every_split_is_kept_and_returned_by_its_id(make_kb):
    kb: KnowledgeBase = make_kb(embedder=HashingEmbedder(128))
    splits = _splits()
    assert sum(d.metadata.get("slug") == "dec-cache-v2" for d in splits) > 3
    store = KBVectorStore.from_documents(splits, kb=kb)
    ids = store.add_documents(splits)  # the same splits again: nothing new
    assert len(ids) == len(set(ids)) == len(splits)
    stored = store.get_by_ids(ids)
    assert [(d.page_content, d.metadata) for d in stored] == \
        [(d.page_content, d.metadata) for d in splits]
    # one canonical document per slug, holding all its splits; the note's splits are their own
    adr = kb.get_by_ids(["dec-cache-v2"])[0]
    assert len(adr.chunks) == sum(d.metadata.get("slug") == "dec-cache-v2" for d in splits)
    assert adr.canonical_status == "accepted"
    found = store.similarity_search("redis shared cache layer eviction", k=4)
    assert len({d.id for d in found}) == len(found) == 4
    assert all(d.id in ids for d in found)


def test_splits_added_in_two_calls_are_all_kept_and_deleted_by_id(make_kb):
    kb: KnowledgeBase = make_kb(embedder=HashingEmbedder(128))
    store = KBVectorStore(kb=kb)
    splits = [d for d in _splits() if d.metadata.get("slug") == "dec-cache-v2"]
    first = store.add_documents(splits[:2])
    rest = store.add_documents(splits[2:])
    assert len(kb.get_by_ids(["dec-cache-v2"])[0].chunks) == len(splits)
    store.delete(first)
    assert [d.id for d in store.get_by_ids(first + rest)] == rest
    store.delete(rest)
    assert kb.get_by_ids(["dec-cache-v2"]) == []  # its last split gone, the document goes


def test_a_changed_split_replaces_its_own_version(make_kb):
    kb: KnowledgeBase = make_kb(embedder=HashingEmbedder(128))
    store = KBVectorStore(kb=kb)
    (doc_id,) = store.add_documents([Document(id="s1", page_content="Redis v1.", metadata=ADR)])
    store.add_documents([Document(id="s1", page_content="Redis v2.", metadata=ADR)])
    assert [d.page_content for d in store.get_by_ids([doc_id])] == ["Redis v2."]
    assert len(kb.get_by_ids(["dec-cache-v2"])[0].chunks) == 1


def test_two_different_records_with_one_id_are_an_error_not_a_loss(make_kb):
    from kb_retriever import InputError

    kb: KnowledgeBase = make_kb(embedder=HashingEmbedder(128), settings=Settings())
    with pytest.raises(InputError, match="both have the id"):
        kb.add_documents([{"text": "A", "id": "x"}, {"text": "B", "id": "x"}])
    assert kb.get_by_ids(["x"]) == []
    kb.add_documents([{"text": "A", "id": "x"}, {"text": "A", "id": "x"}])  # the same twice
    assert [d.text for d in kb.get_by_ids(["x"])] == ["A"]


def _contents(store: KBVectorStore) -> list[str]:
    return sorted(d.page_content for d in store.similarity_search("cache layer", k=100))


@pytest.mark.parametrize("run", ["sync", "async"])
def test_the_indexing_api_keeps_the_store_in_step_with_the_sources(make_kb, run: str) -> None:
    """LangChain's record manager (``index``/``aindex``, incremental and full clean-up) adds,
    skips and deletes by the ids it chose: a changed split replaces its old version, a dropped
    one goes, a split whose source is gone goes with a full clean-up, and the splits that share
    a slug stay one canonical document."""
    import asyncio

    from langchain_core.indexing import InMemoryRecordManager, aindex, index

    def sync(docs: list[Document], cleanup: str) -> dict[str, int]:
        if run == "sync":
            return dict(index(docs, manager, store, cleanup=cleanup, source_id_key="source",
                              key_encoder="sha256"))
        return dict(asyncio.run(aindex(docs, manager, store, cleanup=cleanup,
                                       source_id_key="source", key_encoder="sha256")))

    kb: KnowledgeBase = make_kb(embedder=HashingEmbedder(128))
    store = KBVectorStore(kb=kb)
    manager = InMemoryRecordManager("kb")
    manager.create_schema()
    splits = _splits()
    assert sync(splits, "incremental")["num_added"] == len(splits)
    assert sync(splits, "incremental") == {"num_added": 0, "num_updated": 0,
                                           "num_skipped": len(splits), "num_deleted": 0}
    adr = [d for d in splits if d.metadata["source"] == "adr.md"]
    edited = [*adr[:-2], Document(page_content="The cache layer is Redis 7.", metadata=ADR)]
    rest = [d for d in splits if d.metadata["source"] != "adr.md"]
    report = sync(edited + rest, "incremental")
    assert (report["num_added"], report["num_deleted"]) == (1, 2)
    assert _contents(store) == sorted(d.page_content for d in edited + rest)
    assert len(kb.get_by_ids(["dec-cache-v2"])[0].chunks) == len(edited)
    sync([d for d in edited + rest if d.metadata["source"] != "old.md"], "full")
    assert _contents(store) == sorted(d.page_content for d in edited + rest
                                      if d.metadata["source"] != "old.md")
    assert kb.get_by_ids(["dec-cache-v1"]) == []


def test_the_splits_of_a_file_whose_text_opens_with_frontmatter_are_one_canonical_document(
        make_kb):
    """``TextLoader("adr.md")`` keeps the frontmatter block in the text: its first split became
    a canonical document, and every other split a plain note of its own, so a superseded
    decision's body was ranked without its penalty. A file added whole stays one document."""
    kb: KnowledgeBase = make_kb(embedder=HashingEmbedder(128))
    store = KBVectorStore(kb=kb)
    head = "---\nslug: dec-cache-v1\ntype: decision\nstatus: superseded\n---\n# Cache v1\n\n"
    loaded = Document(page_content=head + _text("memcached", 12), metadata={"source": "adr.md"})
    splits = RecursiveCharacterTextSplitter(chunk_size=400, chunk_overlap=0).split_documents(
        [loaded])
    assert len(splits) > 2 and not splits[1].page_content.startswith("---")
    ids = store.add_documents(splits)
    (adr,) = kb.get_by_ids(["dec-cache-v1"])
    assert (len(adr.chunks), adr.canonical_status) == (len(splits), "superseded")
    assert [d.page_content for d in store.get_by_ids(ids)] == [d.page_content for d in splits]
    hits = kb.search("memcached eviction policy", limit=5).primary
    assert hits and {h.document.slug for h in hits} == {"dec-cache-v1"}
    whole = Document(page_content=head.replace("v1", "v0") + "Memcached, first try.",
                     metadata={"source": "old.md"})
    store.add_documents([whole])
    (alone,) = kb.get_by_ids(["dec-cache-v0"])
    assert alone.source_type != adr.source_type == CHUNKS_SOURCE_TYPE  # chunked by its headings


@pytest.mark.parametrize("run", ["sync", "async"])
def test_a_status_changed_through_the_indexing_api_reaches_the_document(make_kb, run: str):
    """An ADR's status changed in its metadata gives each split a new id: ``index()`` adds the
    new splits beside the old ones (the fields they share then lack ``status``), then deletes
    the old ones, and nothing gave the document its fields again: it stayed non-canonical,
    without the superseded penalty."""
    import asyncio

    from langchain_core.indexing import InMemoryRecordManager, aindex, index

    kb: KnowledgeBase = make_kb(embedder=HashingEmbedder(128))
    store = KBVectorStore(kb=kb)
    manager = InMemoryRecordManager("kb")
    manager.create_schema()

    def sync(docs: list[Document]) -> None:
        if run == "sync":
            index(docs, manager, store, cleanup="incremental", source_id_key="source",
                  key_encoder="sha256")
        else:
            asyncio.run(aindex(docs, manager, store, cleanup="incremental",
                               source_id_key="source", key_encoder="sha256"))

    def splits(status: str) -> list[Document]:
        loaded = Document(page_content=_text("redis", 12), metadata={**ADR, "status": status})
        return RecursiveCharacterTextSplitter(chunk_size=400, chunk_overlap=0).split_documents(
            [loaded])

    sync(splits("accepted"))
    assert kb.get_by_ids(["dec-cache-v2"])[0].canonical_status == "accepted"
    sync(splits("superseded"))
    (adr,) = kb.get_by_ids(["dec-cache-v2"])
    assert (adr.is_canonical, adr.canonical_status) == (True, "superseded")
    assert len(adr.chunks) == len(splits("superseded"))


def test_adding_the_same_records_twice_keeps_what_the_first_add_made(make_kb):
    """A record with its slug in its metadata and another of its source without one: the first
    add stored two documents; the same add again made the second a part of the first, whose
    fields then were only what both share (``source``), so the decision lost its type and
    status, and the second record was stored twice."""
    kb: KnowledgeBase = make_kb(embedder=HashingEmbedder(128))
    store = KBVectorStore(kb=kb)
    records = [Document("Redis is the cache layer.", metadata={
                   "source": "f.md", "type": "decision", "status": "accepted", "slug": "x"}),
               Document("Eviction runs nightly.", metadata={"source": "f.md"})]
    first = store.add_documents(records)
    before = sorted((d.id, d.canonical_status, d.chunks) for d in kb.list_documents())
    assert len(before) == 2
    assert store.add_documents(records) == first
    assert sorted((d.id, d.canonical_status, d.chunks) for d in kb.list_documents()) == before
    (decision,) = kb.get_by_ids(["x"])
    assert (decision.canonical_type, decision.canonical_status) == ("decision", "accepted")
