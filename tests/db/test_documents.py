"""The core write API: documents from memory, stable ids, get / delete by id, own pools."""

from __future__ import annotations

import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from kb_retriever import DocumentRecord, HashingEmbedder, IngestError, InputError, KnowledgeBase
from kb_retriever.models import ChunkRecord

pytestmark = pytest.mark.db

CANONICAL = """---
slug: dec-queue
type: decision
status: accepted
retrieval_priority: 90
tags: [queue]
---
# Kafka as the event queue

We standardise on Kafka for the event queue.

## Retention

Topics keep seven days of events.
"""


def test_add_get_search_delete(make_kb):
    kb = make_kb()
    ids = kb.add_documents([
        {"text": CANONICAL, "metadata": {"team": "platform"}},
        DocumentRecord(text="Deploys freeze on Fridays.", metadata={"id": 1}, id="note-freeze"),
    ])
    assert ids == ["dec-queue", "note-freeze"]  # canonical: its slug; else the caller's id
    got = kb.get_by_ids(["note-freeze", "missing", "dec-queue"])
    assert [d.id for d in got] == ["note-freeze", "dec-queue"]
    assert got[0].text == "Deploys freeze on Fridays." and dict(got[0].metadata) == {"id": 1}
    assert got[1].is_canonical and got[1].canonical_type == "decision" and len(got[1].chunks) == 2

    hit = kb.search("which event queue do we use?", limit=1).primary[0]
    assert hit.document.source_path == "dec-queue" and hit.document.is_canonical
    assert hit.chunk_uid == got[1].chunks[0].id and hit.uid == hit.chunk_uid
    # Metadata filters see a document's metadata, as they see a file's frontmatter.
    only = kb.search("event queue", filters={"metadata": {"team": "platform"}})
    assert {h.document.source_path for h in only.primary} == {"dec-queue"}

    assert kb.delete(["dec-queue", "nope"]) == 1
    assert [d.id for d in kb.get_by_ids(["dec-queue", "note-freeze"])] == ["note-freeze"]


def test_chunk_ids_survive_a_changed_document(make_kb):
    kb = make_kb()
    kb.add_documents([{"text": CANONICAL, "id": "queue"}])
    before = {c.text: c.id for c in kb.get_by_ids(["queue"])[0].chunks}
    changed = CANONICAL.replace("seven days", "fourteen days")
    kb.add_documents([{"text": changed, "id": "queue"}])
    after = {c.text: c.id for c in kb.get_by_ids(["queue"])[0].chunks}
    kept = [t for t in after if t in before]
    assert kept and all(after[t] == before[t] for t in kept)
    assert any(t not in before for t in after)  # the changed chunk has a new id
    assert len(set(after.values())) == len(after)


def test_file_chunks_get_stable_ids_too(make_kb, tmp_path):
    kb = make_kb()
    f = tmp_path / "runbook.md"
    f.write_text("# Pager\n\nPage the on-call.\n\n## Escalation\n\nCall the lead after 15 min.\n")
    kb.ingest([tmp_path])
    first = {c.text: c.id for c in kb.get_by_ids(["runbook.md"])[0].chunks}
    f.write_text("# Pager\n\nPage the on-call.\n\n## Escalation\n\nCall the lead after 30 min.\n")
    kb.ingest([tmp_path])
    second = {c.text: c.id for c in kb.get_by_ids(["runbook.md"])[0].chunks}
    same = [t for t in second if t in first]
    assert same and all(first[t] == second[t] for t in same)


def test_adding_the_same_content_twice_is_a_no_op(make_kb):
    kb = make_kb()
    a = kb.add_documents([{"text": "Same text.", "metadata": {"k": 1}}])
    b = kb.add_documents([{"text": "Same text.", "metadata": {"k": 1}}])
    c = kb.add_documents([{"text": "Same text.", "metadata": {"k": 2}}])
    assert a == b and a != c
    assert len(kb.get_by_ids(a + c)) == 2


def test_pre_split_chunks_keep_their_ids_and_vectors(make_kb):
    kb = make_kb(embedder=HashingEmbedder(256))
    vec = [0.0] * 255 + [1.0]
    kb.add_documents([DocumentRecord(id="doc-1", metadata={"ref": "x"}, chunks=(
        ChunkRecord("first node", id="node-a", embedding=vec),
        ChunkRecord("second node", id="node-b", metadata={"page": 2}),
    ))])
    chunks = kb.get_chunks(["node-b", "node-a", "node-z"])
    assert [(c.id, c.document_id, c.text) for c in chunks] == [
        ("node-b", "doc-1", "second node"), ("node-a", "doc-1", "first node")]
    assert dict(chunks[0].metadata) == {"page": 2}
    hit = kb.search("anything", query_embedding=vec, limit=1).primary[0]
    assert hit.chunk_uid == "node-a"
    assert kb.delete_chunks(["node-a"]) == 1
    assert [c.id for c in kb.get_by_ids(["doc-1"])[0].chunks] == ["node-b"]
    assert kb.delete_chunks(["node-b"]) == 1
    assert kb.get_by_ids(["doc-1"]) == []  # no chunks left: the document went too


def test_bad_records_raise_before_anything_is_written(make_kb):
    kb = make_kb()
    for bad, why in [(object(), "DocumentRecord"), ({"text": 3}, "must be a string"),
                     ({"text": "a\x00b"}, "NUL"), ({"text": "x", "id": ""}, "non-empty"),
                     ({"txt": "x"}, "unknown document key")]:
        with pytest.raises(InputError, match=why):
            kb.add_documents([{"text": "fine", "id": "ok"}, bad])
    assert kb.get_by_ids(["ok"]) == []


def test_invalid_canonical_metadata_is_stored_as_non_canonical(make_kb):
    kb = make_kb()
    kb.add_documents([{"text": "Body.", "id": "d", "metadata": {"slug": "Bad Slug",
                                                                "type": "decision"}}])
    (doc,) = kb.get_by_ids(["d"])
    assert not doc.is_canonical and doc.metadata["slug"] == "Bad Slug"


def test_a_slug_owned_by_another_document_fails_that_document(make_kb):
    kb = make_kb()
    kb.add_documents([{"text": CANONICAL, "id": "one"}])
    with pytest.raises(IngestError, match="dec-queue"):
        kb.add_documents([{"text": CANONICAL, "id": "two"}])
    assert [d.id for d in kb.get_by_ids(["one", "two"])] == ["one"]


def test_tenants_and_projects_are_separate(make_kb):
    kb = make_kb()
    kb.add_documents([{"text": "alpha", "id": "x"}], project="p1")
    assert kb.get_by_ids(["x"]) == [] and kb.get_by_ids(["x"], tenant="other", project="p1") == []
    assert kb.delete(["x"]) == 0 and len(kb.get_by_ids(["x"], project="p1")) == 1
    assert kb.clear(project="p1") == 1


async def test_async_twins(make_kb):
    sync = make_kb()
    kb = KnowledgeBase(sync.settings, embedder=sync.embedder, database_url=sync.url)
    async with kb:
        ids = await kb.aadd_documents([{"text": "Async body.", "id": "a1"},
                                       {"text": "More text.", "id": "a2"}])
        assert [d.id for d in await kb.aget_by_ids(ids)] == ["a1", "a2"]
        (chunk,) = (await kb.aget_by_ids(["a1"]))[0].chunks
        assert [c.id for c in await kb.aget_chunks([chunk.id])] == [chunk.id]
        assert await kb.adelete(["a1"]) == 1
        assert await kb.aclear() == 1
        assert await kb.aget_by_ids(ids) == []


def test_a_borrowed_pool_is_used_and_never_closed(new_database):
    url = new_database()
    with ConnectionPool(url, min_size=1, max_size=2, open=True) as pool:
        with KnowledgeBase(embedder=HashingEmbedder(64), pool=pool) as kb:
            kb.add_documents([{"text": "Borrowed pool text.", "id": "b"}])
            assert kb.search("borrowed pool").primary[0].document.source_path == "b"
        assert not pool.closed
        with pool.connection() as conn:  # still usable; the data is there
            assert conn.execute("SELECT count(*) FROM kb_documents").fetchone()[0] == 1


def test_a_borrowed_pool_that_is_not_autocommit_keeps_the_search_settings(new_database):
    """psycopg's default connections are not autocommit: the session settings were set in a
    transaction the pool rolled back when the connection came back, so every later search
    ran with pgvector's defaults (ef_search 40, no iterative scan)."""
    url = new_database()
    with ConnectionPool(url, min_size=1, max_size=1, open=True) as pool:
        with KnowledgeBase(embedder=HashingEmbedder(64), pool=pool) as kb:
            kb.search("borrowed pool")  # the connection's first use: a read
            with pool.connection() as conn:
                row = conn.execute("SELECT current_setting('hnsw.ef_search'), "
                                   "current_setting('hnsw.iterative_scan')").fetchone()
            assert row == (str(kb.settings.hnsw_ef_search), "relaxed_order")


async def test_a_borrowed_async_pool_is_used_and_never_closed(new_database):
    url = new_database()
    async with AsyncConnectionPool(url, min_size=1, max_size=2, open=False) as apool:
        kb = KnowledgeBase(embedder=HashingEmbedder(64), async_pool=apool)
        async with kb:
            await kb.aadd_documents([{"text": "Async borrowed text.", "id": "ab"}])
            result = await kb.asearch("async borrowed")
            assert result.primary[0].document.source_path == "ab"
        assert not apool.closed
        async with apool.connection() as conn:
            cur = await conn.execute("SELECT count(*) FROM kb_documents")
            assert (await cur.fetchone())[0] == 1


def test_a_write_gives_back_a_borrowed_connections_own_statement_timeout(new_database):
    """A write set the ingest's timeout, then the search's (KB_STATEMENT_TIMEOUT_MS), over the
    owner's own: the README says a borrowed pool's statement_timeout stays yours."""
    def configure(conn):
        conn.execute("SET statement_timeout = '1234ms'")

    with ConnectionPool(new_database(), min_size=1, max_size=1, open=True, configure=configure,
                        kwargs={"autocommit": True}) as pool:
        with KnowledgeBase(embedder=HashingEmbedder(64), pool=pool) as kb:
            kb.add_documents([{"text": "Owner's timeout.", "id": "t"}])
            with pool.connection() as conn:
                assert conn.execute("SHOW statement_timeout").fetchone() == ("1234ms",)


async def test_a_borrowed_async_pool_with_autocommit_kwargs_opens(new_database):
    """Its kwargs are copied for the pools the knowledge base opens itself; the schema's
    connection added its own autocommit=True: "got multiple values for keyword argument"."""
    url = new_database()
    async with AsyncConnectionPool(url, min_size=1, max_size=2, open=False,
                                   kwargs={"autocommit": True}) as apool:
        kb = KnowledgeBase(embedder=HashingEmbedder(64), async_pool=apool)
        async with kb:
            await kb.aadd_documents([{"text": "Autocommit pool text.", "id": "ac"}])
            assert (await kb.asearch("autocommit pool")).primary
        assert not apool.closed


def test_a_borrowed_pool_with_a_row_factory_is_a_config_error(new_database):
    """It crashed with a raw KeyError in the schema's migration (our statements read tuples)."""
    from psycopg.rows import dict_row

    from kb_retriever import ConfigError

    with ConnectionPool(new_database(), min_size=1, max_size=1, open=True,
                        kwargs={"row_factory": dict_row}) as pool:
        with pytest.raises(ConfigError, match="row_factory"):
            KnowledgeBase(embedder=HashingEmbedder(8), pool=pool)


def test_a_pool_of_the_wrong_type_is_a_config_error():
    from kb_retriever import ConfigError

    with pytest.raises(ConfigError, match="ConnectionPool"):
        KnowledgeBase(embedder=HashingEmbedder(8), pool=psycopg)  # type: ignore[arg-type]


def test_migration_0003_gives_old_chunks_the_ids_the_writer_computes(new_database):
    from kb_retriever.models import ChunkDraft, DocumentDraft
    from kb_retriever.store import schema
    from kb_retriever.store.writer import chunk_uids

    url = new_database()
    texts = ["Intro text.", "Repeated.", "Repeated.", "Ünïcode tail."]
    with psycopg.connect(url, autocommit=True) as conn:
        with conn.transaction():  # a database at schema v2, written by the old writer
            for version, _, body in schema.migration_files():
                if version <= 2:
                    conn.execute(body)
            conn.execute("INSERT INTO kb_meta VALUES ('schema_version', '2')")
        doc = conn.execute(
            "INSERT INTO kb_documents (tenant_id, project_key, source_path, doc_key, title, "
            "source_type, content_hash) VALUES ('t', 'p', 'dir/a.md', 'a', 'A', 'markdown', 'h') "
            "RETURNING id").fetchone()[0]
        for order, text in enumerate(texts):
            conn.execute(
                "INSERT INTO kb_chunks (tenant_id, document_id, project_key, chunk_order, text, "
                "text_hash, embedding) VALUES ('t', %s, 'p', %s, %s, 'x', '[1,0]')",
                [doc, order, text])
        assert schema.migrate(conn) >= 3
        got = [r[0] for r in conn.execute(
            "SELECT chunk_uid FROM kb_chunks ORDER BY chunk_order").fetchall()]
    draft = DocumentDraft("dir/a.md", "a", "A", "markdown", "h",
                          tuple(ChunkDraft(i, t) for i, t in enumerate(texts)))
    assert got == chunk_uids(draft) and len(set(got)) == 4


def test_metadata_groups_or_and_not(make_kb):
    kb = make_kb()
    kb.add_documents([{"text": f"shared cache note {i}", "id": f"d{i}",
                       "metadata": {"team": team, "level": level}}
                      for i, (team, level) in enumerate([("sre", 1), ("sre", 3), ("web", 2)])])

    def ids(meta):
        return {h.document.source_path for h in kb.search("shared cache note", limit=10,
                                                         filters={"metadata": meta}).primary}

    assert ids({"$or": [{"team": "web"}, {"level": {"$gte": 3}}]}) == {"d1", "d2"}
    assert ids({"team": "sre", "$not": {"level": 1}}) == {"d1"}
    assert ids({"$and": [{"team": "sre"}, {"$or": [{"level": 1}, {"level": 2}]}]}) == {"d0"}
    assert ids({"$not": {"missing_key": 1}}) == {"d0", "d1", "d2"}
    from kb_retriever import FilterError

    with pytest.raises(FilterError, match=r"\$or takes a non-empty list"):
        ids({"$or": []})


def test_chunks_by_filters(make_kb):
    kb = make_kb()
    kb.add_documents([{"text": f"note {i}", "id": f"n{i}", "metadata": {"team": team}}
                      for i, team in enumerate(["sre", "web", "sre"])])
    sre = kb.get_chunks(filters={"metadata": {"team": "sre"}})
    assert [c.document_id for c in sre] == ["n0", "n2"]
    both = kb.get_chunks([sre[0].id], filters={"metadata": {"team": "sre"}})
    assert [c.id for c in both] == [sre[0].id]
    assert kb.delete_chunks(filters={"metadata": {"$or": [{"team": "web"}, {"team": "x"}]}}) == 1
    assert [d.id for d in kb.get_by_ids(["n0", "n1", "n2"])] == ["n0", "n2"]
    with pytest.raises(InputError, match="clear"):
        kb.delete_chunks()
    with pytest.raises(InputError, match="clear"):
        kb.get_chunks(filters={})


def test_bulk_loaded_records_keep_their_text_and_metadata(make_kb) -> None:
    """The bulk loader writes the same document columns as the per-document writer (one spec):
    a record loaded in bulk reads back exactly as added."""
    from kb_retriever.write import from_memory as docs
    from kb_retriever.write.bulk import bulk_load

    kb = make_kb()
    record = docs.as_record({"text": "Page the on-call via Opsgenie.", "id": "rb-pager",
                             "metadata": {"team": "sre"}})
    draft = docs.record_draft(record, kb.settings)
    vectors = kb.embedder.embed_documents([c.text for c in draft.chunks])
    report = bulk_load(kb.url, [("default", draft, vectors)], tenant="default")
    assert report.documents == 1
    (stored,) = kb.get_by_ids(["rb-pager"])
    assert stored.text == "Page the on-call via Opsgenie." and stored.metadata == {"team": "sre"}
    import psycopg

    with psycopg.connect(kb.url) as conn:  # the columns themselves, not a reader's fallback
        row = conn.execute("SELECT content, metadata FROM kb_documents WHERE source_path = "
                           "'rb-pager'").fetchone()
    assert row == ("Page the on-call via Opsgenie.", {"team": "sre"})


def test_a_bulk_load_with_the_embedder_calibrates_each_project(make_kb) -> None:
    """Without an embedder a bulk load leaves its projects uncalibrated (absolute thresholds);
    with the knowledge base's embedder each project loaded is calibrated, as after an ingest."""
    from kb_retriever.write import from_memory as docs
    from kb_retriever.write.bulk import bulk_load

    kb = make_kb()

    def item(project: str, i: int):
        draft = docs.record_draft(docs.as_record(
            {"text": f"Runbook {i}: restart the payment queue.", "id": f"rb-{i}"}), kb.settings)
        return project, draft, kb.embedder.embed_documents([c.text for c in draft.chunks])

    bulk_load(kb.url, [item("plain", 1)], tenant="default")
    bulk_load(kb.url, [item("a", 2), item("b", 3)], tenant="default", embedder=kb.embedder)
    calibrated = {p: kb.search("payment queue", project=p).meta["calibration"]["calibrated"]
                  for p in ("plain", "a", "b")}
    assert calibrated == {"plain": False, "a": True, "b": True}


class _FailsOn(HashingEmbedder):
    """Embeds as :class:`HashingEmbedder`, but fails on a text that holds ``word``."""

    def __init__(self, word: str) -> None:
        super().__init__(64)
        self.word = word

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        if any(self.word in t for t in texts):
            raise RuntimeError("the embedding service is rate limited")
        return super().embed_documents(texts)


def test_a_borrowed_pool_that_is_not_autocommit_keeps_what_a_failed_write_saved(new_database):
    """Each document of a write commits on its own. On a borrowed connection that is not
    autocommit (psycopg's default), the first statement opened a transaction that held the
    whole call: each document's transaction was a savepoint in it, and when the second
    document's embedding failed the pool rolled the first back, while the error said it
    was saved."""
    url = new_database()
    with ConnectionPool(url, min_size=1, max_size=2, open=True) as pool:
        with KnowledgeBase(embedder=_FailsOn("BOOM"), pool=pool) as kb:
            with pytest.raises(IngestError) as raised:
                kb.add_documents([{"text": "The first document is fine.", "id": "a"},
                                  {"text": "The second one says BOOM.", "id": "b"}])
            assert raised.value.saved == ["a"]
            assert [d.id for d in kb.get_by_ids(["a", "b"])] == ["a"]
        with pool.connection() as conn:  # given back in the owner's mode
            assert not conn.autocommit


async def test_a_borrowed_async_pool_that_is_not_autocommit_gets_its_mode_back(new_database):
    """The async twin: the connections run our statements in autocommit and go back to the
    owner's pool as they came."""
    url = new_database()
    async with AsyncConnectionPool(url, min_size=1, max_size=1, open=False) as apool:
        async with KnowledgeBase(embedder=HashingEmbedder(64), async_pool=apool) as kb:
            await kb.aadd_documents([{"text": "Async borrowed text.", "id": "a"}])
            assert (await kb.asearch("async borrowed")).primary
            assert await kb.adelete(["a"]) == 1
        async with apool.connection() as conn:
            assert not conn.autocommit
            cur = await conn.execute("SELECT count(*) FROM kb_documents")
            assert (await cur.fetchone()) == (0,)


def test_chunks_selected_by_doc_ids_are_those_documents_chunks_only(make_kb) -> None:
    """The chunk statements left ``doc_ids`` out of their filter (it is the search's mention
    list, which boosts): ``delete_chunks(filters={"doc_ids": [one]})`` deleted every chunk of
    the project, then every document, and ``get_chunks`` with it read them all."""
    kb = make_kb()
    kb.add_documents([{"id": "a", "text": "# A\n\nalpha note"},
                      {"id": "b", "text": "# B\n\nbeta note"}])
    a_id = next(h.document.id for h in kb.search("alpha note").primary
                if h.document.source_path == "a")
    assert {c.document_id for c in kb.get_chunks(filters={"doc_ids": [a_id]})} == {"a"}
    assert kb.delete_chunks(filters={"doc_ids": [a_id]}) == 1
    assert [d.id for d in kb.get_by_ids(["a", "b"])] == ["b"]
