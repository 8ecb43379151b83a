"""``KBVectorStore`` against LangChain's standard vector-store suite (sync and async) and the
behaviour the suite does not cover: the trust gradient, filters, ids, as_retriever."""

from __future__ import annotations

import asyncio
import threading
import warnings
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
from langchain_core.documents import Document
from langchain_core.embeddings import DeterministicFakeEmbedding
from langchain_kb_retriever import KBRetriever, KBVectorStore, LangChainEmbedder
from langchain_tests.integration_tests import VectorStoreIntegrationTests

from kb_retriever import HashingEmbedder, InputError, KnowledgeBase, Settings

pytestmark = pytest.mark.db


class TestKBVectorStoreStandard(VectorStoreIntegrationTests):
    @pytest.fixture()
    def vectorstore(self, new_database) -> Iterator[KBVectorStore]:  # type: ignore[override]
        # The suite's own embeddings; an empty store on a fresh database per test. The store
        # opens (and closes) its own knowledge base, as a user's from_documents would.
        store = KBVectorStore(self.get_embeddings(), database_url=new_database())
        try:
            yield store
        finally:
            store.close()


@pytest.fixture
def store(new_database) -> Iterator[KBVectorStore]:
    s = KBVectorStore(DeterministicFakeEmbedding(size=64), database_url=new_database())
    yield s
    s.close()


DECISIONS = [
    Document(id="dec-v1", page_content="Memcached is the shared cache layer.",
             metadata={"slug": "dec-cache-v1", "type": "decision", "status": "superseded",
                       "team": "platform"}),
    Document(id="dec-v2", page_content="Redis cluster is the shared cache layer.",
             metadata={"slug": "dec-cache-v2", "type": "decision", "status": "accepted",
                       "team": "platform", "supersedes": ["[[dec-cache-v1]]"]}),
    Document(id="note", page_content="Lunch is at noon; the cache of snacks is upstairs.",
             metadata={"team": "office"}),
]


def test_the_trust_gradient_ranks_the_accepted_decision_first(new_database):
    kb = KnowledgeBase(Settings(), embedder=HashingEmbedder(256), database_url=new_database())
    with kb:
        store = KBVectorStore.from_documents(DECISIONS, kb=kb)
        docs = store.similarity_search("which shared cache layer?", k=2)
        assert [d.id for d in docs] == ["dec-v2", "dec-v1"]
        assert docs[0] == DECISIONS[1]  # exactly as added: text, metadata, id
        pairs = store.similarity_search_with_score("which shared cache layer?", k=2)
        assert pairs[0][1] > pairs[1][1]
        # Metadata filter (langchain-postgres style) and the knowledge base's own filters.
        assert [d.id for d in store.similarity_search("cache", filter={"team": "office"})] == \
            ["note"]
        assert {d.id for d in store.similarity_search(
            "cache", filters={"canonical_types": ["decision"]})} == {"dec-v1", "dec-v2"}
        retriever = store.as_retriever(search_kwargs={"k": 1})
        assert isinstance(retriever, KBRetriever)
        (chunk,) = retriever.invoke("which shared cache layer?")
        # a Document with a canonical slug is a chunk of that canonical document, kept under
        # its own id (decision 0007)
        assert chunk.metadata["kb"]["document"]["source_path"] == "dec-cache-v2"
        assert chunk.id == chunk.metadata["kb"]["chunk_uid"] == "dec-v2"
    assert store.kb is kb  # a knowledge base passed in is never closed by the store


def test_long_documents_are_chunked_and_returned_once(store):
    body = "# Runbook\n\n" + "\n\n".join(f"## Step {i}\n\nRestart worker pool {i} and check "
                                         f"the queue depth." for i in range(12))
    (doc_id,) = store.add_documents([Document(page_content=body, metadata={"source": "rb.md"})])
    (stored,) = store.kb.get_by_ids([doc_id])
    assert len(stored.chunks) > 1 and stored.title == "Runbook"
    assert store.similarity_search("restart worker pool", k=3) == [
        Document(id=doc_id, page_content=body, metadata={"source": "rb.md"})]


def test_ids_from_texts_and_the_default_no_op(store):
    ids = store.add_texts(["alpha text", "beta text"], [{"n": 1}, {"n": 2}], ids=["a", None])
    assert ids[0] == "a" and ids[1] and ids[1] != "a"
    assert store.add_texts(["beta text"], [{"n": 2}]) == [ids[1]]  # same content: same id
    assert len(store.get_by_ids(ids)) == 2
    store.delete()
    assert store.get_by_ids(ids) == []


async def test_async_from_texts(new_database):
    store = await KBVectorStore.afrom_texts(["async alpha", "async beta"],
                                            DeterministicFakeEmbedding(size=16),
                                            ids=["x", "y"], database_url=new_database())
    try:
        assert [d.id for d in await store.asimilarity_search("async beta", k=1)] == ["y"]
        assert isinstance(store.kb.embedder, LangChainEmbedder)
        assert store.embeddings is not None
    finally:
        await store.aclose()


def test_kb_and_embedding_together_is_a_config_error(example_kb):
    from kb_retriever import ConfigError

    with pytest.raises(ConfigError, match="LangChainEmbedder"):
        KBVectorStore(DeterministicFakeEmbedding(size=8), kb=example_kb)


def test_max_marginal_relevance_search_trades_relevance_for_diversity(new_database):
    """MMR picks among the pipeline's fetch_k best documents: lambda_mult 1 keeps the
    relevance order, a low lambda_mult swaps a near-duplicate for a different document."""
    import asyncio

    from kb_retriever import ConfigError

    kb = KnowledgeBase(Settings(), embedder=HashingEmbedder(256), database_url=new_database())
    with kb:
        store = KBVectorStore.from_documents([
            Document(id="a", page_content="Redis cluster is the shared cache layer for the API."),
            Document(id="a-copy", page_content="Redis cluster is the shared cache layer for "
                                                "the API gateway."),
            Document(id="other", page_content="Lunch is at noon near the shared kitchen."),
        ], kb=kb)
        query = "shared cache layer redis cluster"
        relevance = [d.id for d in store.similarity_search(query, k=3)]
        assert [d.id for d in store.max_marginal_relevance_search(
            query, k=2, fetch_k=3, lambda_mult=1.0)] == relevance[:2]
        diverse = [d.id for d in store.max_marginal_relevance_search(
            query, k=2, fetch_k=3, lambda_mult=0.1)]
        assert diverse[0] == relevance[0] and diverse[1] == "other"
        assert [d.id for d in asyncio.run(store.amax_marginal_relevance_search(
            query, k=2, fetch_k=3, lambda_mult=0.1))] == diverse
        with pytest.raises(ConfigError, match="lambda_mult"):
            store.max_marginal_relevance_search(query, lambda_mult=2)
        with pytest.raises(ConfigError, match="fetch_k"):
            store.max_marginal_relevance_search(query, fetch_k=0)


def test_wrong_arguments_are_typed_errors_and_write_nothing(store):
    """filter="str", add_texts(None), get_by_ids(None) raised raw TypeErrors; None ids were
    read and deleted as the id ""."""
    import asyncio

    from kb_retriever import FilterError, InputError

    from ...reliability._util import snapshot

    store.add_documents(DECISIONS)
    before = snapshot(store.kb.url)
    for call, error in (
        (lambda: store.similarity_search("cache", filter="str"), FilterError),
        (lambda: store.similarity_search("cache", filters=["tags"]), FilterError),
        (lambda: store.max_marginal_relevance_search("cache", filter=5), FilterError),
        (lambda: store.as_retriever(search_kwargs={"filter": "str"}), FilterError),
        (lambda: store.add_texts(None), InputError),
        (lambda: store.add_texts("one text"), InputError),  # not o, n, e, ...
        (lambda: store.add_texts(["a"], metadatas=5), InputError),
        (lambda: store.add_texts(["a"], metadatas=["not a mapping"]), InputError),
        (lambda: store.add_texts(["a"], ids="a"), InputError),
        (lambda: store.add_texts(["a"], metadatas=[{"k": "\ud800"}]), InputError),
        (lambda: store.add_documents(None), InputError),
        (lambda: store.add_documents(["not a Document"]), InputError),
        (lambda: store.get_by_ids(None), InputError),
        (lambda: store.get_by_ids("dec-v1"), InputError),
        (lambda: store.get_by_ids([None]), InputError),
        (lambda: store.delete([None]), InputError),
        (lambda: asyncio.run(store.aadd_texts(None)), InputError),
        (lambda: asyncio.run(store.aadd_documents(None)), InputError),
        (lambda: asyncio.run(store.aget_by_ids(None)), InputError),
        (lambda: asyncio.run(store.asimilarity_search("cache", filter="str")), FilterError),
    ):
        with pytest.raises(error):
            call()
    assert snapshot(store.kb.url) == before
    assert [d.id for d in store.get_by_ids(["dec-v1", "dec-v2", "note"])] == [
        "dec-v1", "dec-v2", "note"]


def test_names_with_whitespace_are_errors(new_database):
    from kb_retriever import InputError

    store = KBVectorStore(DeterministicFakeEmbedding(size=16), database_url=new_database(),
                          tenant=" acme ")
    try:
        with pytest.raises(InputError, match="whitespace"):
            store.add_texts(["acme's roadmap"])
    finally:
        store.close()


TOPICS = ["cache", "queue", "deploy", "lunch", "backup", "billing", "search", "login"]


def _many(n: int) -> list[Document]:
    return [Document(id=f"doc-{i:02d}", page_content=f"Note {i} about the {TOPICS[i % 8]} "
                     f"service, owned by team {i % 3}.", metadata={"team": str(i % 3)})
            for i in range(n)]


def test_k_results_when_k_exist_with_a_kb_passed_in(new_database):
    """k=20 over a 24-document project gave 6 with kb=: the similarity floor applied. A
    vector store returns k when k exist; the floor is an explicit option, and stays on for the
    retriever."""
    import asyncio

    kb = KnowledgeBase(Settings(), embedder=HashingEmbedder(256), database_url=new_database())
    with kb:
        store = KBVectorStore.from_documents(_many(24), kb=kb)
        assert kb.settings.default_min_similarity > 0  # the knowledge base keeps its floor
        docs = store.similarity_search("cache layer", k=20)
        assert len(docs) == len({d.id for d in docs}) == 20
        assert len(store.similarity_search("cache layer", k=30)) == 24
        assert len(asyncio.run(store.asimilarity_search("cache layer", k=20))) == 20
        assert len(store.similarity_search("cache", k=20, filter={"team": "1"})) == 8
        vec = kb.embedder.embed_query("cache layer")
        assert len(store.similarity_search_by_vector(vec, k=20)) == 20
        assert len(store.max_marginal_relevance_search("cache", k=20, fetch_k=24)) == 20
        floored = KBVectorStore(kb=kb, min_similarity=0.3)
        assert len(floored.similarity_search("cache layer", k=20)) < 20
        assert len(store.as_retriever(search_kwargs={"k": 20}).invoke(
            "cache layer")) < 20


def test_k_results_when_one_long_document_holds_the_nearest_chunks(new_database):
    """A search asks for three chunks per document; a long document whose 40 chunks are the
    nearest filled them, and k=2 or k=4 over seven documents gave one."""
    long = "\n\n".join(f"## Part {i}\n\nThe Redis cache cluster setting number {i} controls "
                        "eviction and memory for the cache." for i in range(40))
    notes = [Document(id=f"n{j}", page_content=f"Note {j}: caching guidance for service {j}, "
                      "use a cache with TTL.") for j in range(6)]
    kb = KnowledgeBase(Settings(), embedder=HashingEmbedder(256), database_url=new_database())
    with kb:
        store = KBVectorStore.from_documents(
            [Document(id="long", page_content="# Redis cache handbook\n\n" + long), *notes],
            kb=kb)
        for k in (2, 4, 7):
            docs = store.similarity_search("Redis cache eviction memory setting", k=k)
            assert len(docs) == len({d.id for d in docs}) == k
            assert docs[0].id == "long"
        assert len(asyncio.run(store.asimilarity_search("Redis cache eviction", k=4))) == 4
        # maximal marginal relevance too (it searched once: one document for k=4)
        for found in (store.max_marginal_relevance_search("Redis cache eviction", k=4, fetch_k=4),
                      asyncio.run(store.amax_marginal_relevance_search(
                          "Redis cache eviction", k=4, fetch_k=4))):
            assert len({d.id for d in found}) == len(found) == 4


def test_k_above_what_one_search_returns_is_an_input_error(new_database):
    """One search returns at most ``KB_MAX_LIMIT`` hits; k above it came back silently cut to
    that many (and the runner-ups), never k."""
    settings = Settings(max_limit=5, default_limit=5)
    with KnowledgeBase(settings, embedder=HashingEmbedder(256), database_url=new_database()) as kb:
        store = KBVectorStore.from_documents(_many(12), kb=kb)
        assert len(store.similarity_search("cache layer", k=5)) == 5
        for call in (lambda: store.similarity_search("cache layer", k=6),
                     lambda: store.similarity_search_with_score("cache layer", k=6),
                     lambda: store.max_marginal_relevance_search("cache", k=6, fetch_k=6)):
            with pytest.raises(InputError, match=r"k is 6.* 5 .*KB_MAX_LIMIT"):
                call()


def test_searches_by_vector(new_database):
    """similarity_search_by_vector raised NotImplementedError; with score, MMR and the async
    twins, a query vector alone (no text) runs the vector leg and the trust gradient."""
    import asyncio

    from kb_retriever import EmbeddingError

    kb = KnowledgeBase(Settings(), embedder=HashingEmbedder(256), database_url=new_database())
    with kb:
        store = KBVectorStore.from_documents(DECISIONS, kb=kb)
        vec = kb.embedder.embed_query("shared cache layer")
        docs = store.similarity_search_by_vector(vec, k=3)
        # the accepted decision outranks the superseded one by vector alone, too
        ids = [d.id for d in docs]
        assert ids[0] == "dec-v2" and docs[0] == DECISIONS[1] and len(set(ids)) == 3
        assert ids.index("dec-v1") > ids.index("dec-v2")
        pairs = store.similarity_search_with_score_by_vector(vec, k=3)
        assert [d.id for d, _ in pairs] == ids and pairs[0][1] > pairs[1][1] >= pairs[2][1]
        assert [d.id for d in store.similarity_search_by_vector(
            vec, k=3, filter={"team": "office"})] == ["note"]
        assert {d.id for d in store.similarity_search_by_vector(
            vec, k=3, filters={"canonical_types": ["decision"]})} == {"dec-v1", "dec-v2"}
        assert [d.id for d in asyncio.run(store.asimilarity_search_by_vector(vec, k=3))] == ids
        apairs = asyncio.run(store.asimilarity_search_with_score_by_vector(vec, k=3))
        assert [(d.id, round(s, 9)) for d, s in apairs] == [(d.id, round(s, 9))
                                                            for d, s in pairs]
        mmr = store.max_marginal_relevance_search_by_vector(vec, k=2, fetch_k=3,
                                                            lambda_mult=1.0)
        assert [d.id for d in mmr] == ids[:2]
        assert [d.id for d in asyncio.run(store.amax_marginal_relevance_search_by_vector(
            vec, k=2, fetch_k=3, lambda_mult=1.0))] == ids[:2]
        # relevance scores: the final scores clipped to [0, 1], LangChain's range, without
        # its warning (the superseded decision's penalty takes its final score below 0)
        scored = store.similarity_search_with_score("lunch at noon", k=3)
        assert min(s for _, s in scored) < 0
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            rel = store.similarity_search_with_relevance_scores("lunch at noon", k=3)
        assert [(d.id, s) for d, s in rel] == [(d.id, min(1.0, max(0.0, s))) for d, s in scored]
        with pytest.raises(EmbeddingError):
            store.similarity_search_by_vector([0.1] * 3, k=2)  # not the model's dimension


CANONICAL = {"type": "decision", "status": "accepted", "slug": "dec-zebra"}


def test_an_id_names_one_thing_whichever_kind_added_it_last(store):
    """A part of a canonical document and a document of its own added under one id: the one
    added last replaces the other (before, both stayed, and the old one was what get_by_ids
    returned and what a search found)."""
    store.add_documents([Document("zebra migration notes", metadata=CANONICAL)], ids=["x"])
    store.add_documents([Document("tomatoes need full sun")], ids=["x"])
    assert [d.page_content for d in store.get_by_ids(["x"])] == ["tomatoes need full sun"]
    assert store.kb.get_chunks(["x"]) == []  # the part went
    assert [d.page_content for d in store.similarity_search("zebra migration", k=5)] == \
        ["tomatoes need full sun"]
    store.add_documents([Document("penguins huddle", metadata={**CANONICAL, "slug": "dec-p"})],
                        ids=["x"])
    assert [d.page_content for d in store.get_by_ids(["x"])] == ["penguins huddle"]
    assert [d.page_content for d in store.similarity_search("tomatoes", k=5)] == \
        ["penguins huddle"]
    store.delete(["x"])
    assert store.get_by_ids(["x"]) == [] and store.similarity_search("penguins", k=5) == []


async def test_async_adds_keep_one_thing_per_id(store):
    await store.aadd_documents([Document("zebra migration notes", metadata=CANONICAL)],
                               ids=["y"])
    await store.aadd_documents([Document("tomatoes need full sun")], ids=["y"])
    assert [d.page_content for d in await store.aget_by_ids(["y"])] == \
        ["tomatoes need full sun"]
    assert await store.kb.aget_chunks(["y"]) == []


def test_two_kinds_written_at_once_under_one_id_leave_one(store):
    """A part and a document of its own added at once under one id, from two threads: each
    call's clean-up of the other kind ran after its own commit, so each deleted what the other
    had just written, and the id was empty though both calls returned it (30 of 30 rounds).
    The knowledge base now removes the other kind in the write's own transaction, under the
    id's lock: one of the two stays, whole, and the other is gone from search too."""
    for round_ in range(12):
        doc_id = f"race-{round_}"
        texts = {"part": f"zebra migration notes {round_}", "whole": f"tomatoes in sun {round_}"}
        barrier = threading.Barrier(2)

        def add(kind: str, doc_id: str = doc_id, texts: dict = texts,
                barrier: threading.Barrier = barrier) -> list:
            barrier.wait(timeout=30)
            meta = {**CANONICAL, "slug": f"dec-{doc_id}"} if kind == "part" else {}
            return store.add_documents([Document(texts[kind], metadata=meta)], ids=[doc_id])

        with ThreadPoolExecutor(2) as pool:
            returned = [f.result(timeout=120) for f in [pool.submit(add, k) for k in texts]]
        assert returned == [[doc_id], [doc_id]]
        kept = [d.page_content for d in store.get_by_ids([doc_id])]
        assert len(kept) == 1 and kept[0] in texts.values(), (round_, kept)
        found = {d.page_content for d in store.similarity_search("notes sun", k=100)}
        assert found & set(texts.values()) == set(kept), (round_, kept)


def test_a_split_whose_id_is_its_slug_names_that_split_only(store):
    """The first split's id is often the document's slug; the document that holds the splits
    is named by that slug too. get_by_ids returned every split's text for it, and delete
    removed both splits."""
    meta = {**CANONICAL, "slug": "dec-split"}
    store.add_documents([Document("We chose Redis cluster.", metadata=meta),
                         Document("Memcached was rejected.", metadata=meta)],
                        ids=["dec-split", "dec-split-2"])
    assert [d.page_content for d in store.get_by_ids(["dec-split"])] == \
        ["We chose Redis cluster."]
    store.delete(["dec-split"])
    assert [d.id for d in store.get_by_ids(["dec-split", "dec-split-2"])] == ["dec-split-2"]
    asyncio.run(store.adelete(["dec-split-2"]))
    assert store.get_by_ids(["dec-split-2"]) == [] and store.kb.get_by_ids(["dec-split"]) == []


def test_a_call_that_fails_after_a_part_was_saved_says_both(store):
    """Each slug's parts are written in a transaction of their own: when one slug failed (a
    part cannot move to another slug) after another was saved, the caller got an IngestError
    naming only the failure. It is a WriteError that names both now."""
    from kb_retriever import WriteError

    store.add_documents([Document("first home", metadata={**CANONICAL, "slug": "dec-home"})],
                        ids=["p-moving"])
    docs = [Document("a new slug", metadata={**CANONICAL, "slug": "dec-elsewhere"}),
            Document("kept", metadata={**CANONICAL, "slug": "dec-other"})]
    with pytest.raises(WriteError) as raised:
        store.add_documents(docs, ids=["p-moving", "p-kept"])
    assert raised.value.saved == ["p-kept"] and list(raised.value.failed) == ["p-moving"]
    assert {d.id: d.page_content for d in store.get_by_ids(["p-moving", "p-kept"])} == \
        {"p-moving": "first home", "p-kept": "kept"}


def test_k_when_a_hit_goes_between_the_search_and_the_read(store, monkeypatch):
    """A search and the read of its documents are two reads: a document deleted in between
    was dropped, and similarity_search returned k - 1 while k existed (209 of 3,500 searches
    under a deleting writer). The next hits fill in. The writer is played here by a delete
    right before the first read."""
    from langchain_kb_retriever import _units

    store.add_documents([Document(f"penguin colony note {i}") for i in range(6)],
                        ids=[f"pen-{i}" for i in range(6)])
    real, calls = _units.fetch, []

    def fetch_after_a_delete(kb, ids, scope):
        if not calls:
            store.delete([ids[0]])  # the best hit goes
        calls.append(list(ids))
        return real(kb, ids, scope)

    monkeypatch.setattr(_units, "fetch", fetch_after_a_delete)
    found = store.similarity_search("penguin colony note", k=3)
    assert len(found) == 3 and calls[0][0] not in {d.id for d in found}
    assert len(calls) == 2  # the rest was read only because a hit had gone


def test_a_chunk_id_of_a_document_of_its_own_deletes_nothing(store):
    """The retriever's documents carry chunk ids; deleting by one removed that chunk from its
    document, which get_by_ids still returned whole. Now a delete removes documents and parts
    only."""
    text = "# Redis\nWe use redis for the cache.\n\n# Kafka\nKafka carries the event streams."
    store.add_documents([Document(text)], ids=["notes"])
    chunk_id = store.as_retriever(search_kwargs={"k": 1}).invoke("redis cache")[0].id
    assert chunk_id != "notes"
    store.delete([chunk_id])
    assert [d.page_content for d in store.get_by_ids(["notes"])] == [text]
    assert len(store.kb.get_by_ids(["notes"])[0].chunks) == 2


def test_threads_that_use_a_new_store_at_once_open_it_once(new_database, pg_server_url,
                                                           monkeypatch):
    """The first calls of a store that opens its own knowledge base, from several threads at
    once: each opened a pool of its own (a pool that a reference kept stayed open after
    close())."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    import psycopg
    from psycopg.conninfo import conninfo_to_dict

    from kb_retriever.store.pools import Pools

    opened: list[object] = []
    real_open = Pools.open

    def counted(self: Pools, *args: object) -> None:
        real_open(self, *args)  # type: ignore[arg-type]
        opened.append(self.sync())

    monkeypatch.setattr(Pools, "open", counted)
    url = new_database()
    store = KBVectorStore(DeterministicFakeEmbedding(size=32), database_url=url)
    start = threading.Barrier(6)

    def add(i: int) -> str:
        start.wait(timeout=60)
        return store.add_texts([f"text {i}"], ids=[f"t{i}"])[0]

    with ThreadPoolExecutor(6) as pool:
        ids = list(pool.map(add, range(6), timeout=120))
    assert sorted(ids) == [f"t{i}" for i in range(6)]
    assert len(store.get_by_ids(ids)) == 6

    def connections() -> int:
        with psycopg.connect(pg_server_url, autocommit=True) as conn:
            row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = %s "
                               "AND backend_type = 'client backend'",  # not autovacuum
                               [conninfo_to_dict(url)["dbname"]]).fetchone()
        return int(row[0]) if row else -1

    assert len(opened) == 1 and 0 < connections() <= store.kb.settings.pool_max_size
    store.close()
    assert connections() == 0


def test_a_per_call_filter_on_the_stores_retriever_reads_metadata_as_the_store_does(store):
    """``store.as_retriever().invoke(q, filter=...)`` read the keys that name a document
    field as that field (``language`` as the detected language: nothing matched) and AND-ed
    the call's filter with ``search_kwargs``' instead of replacing it, as
    ``VectorStoreRetriever`` does."""
    store.add_documents([
        Document("def cache(): return redis", metadata={"language": "python", "team": "a"}),
        Document("fn cache() -> Redis { }", metadata={"language": "rust", "team": "b"})])
    retriever = store.as_retriever(search_kwargs={"k": 2, "filter": {"team": "a"}})
    assert [d.page_content for d in retriever.invoke("cache redis")] == [
        "def cache(): return redis"]
    found = retriever.invoke("cache redis", filter={"language": "rust"})
    assert [d.page_content for d in found] == ["fn cache() -> Redis { }"]
    assert [d.page_content for d in store.similarity_search(
        "cache redis", k=2, filter={"language": "rust"})] == ["fn cache() -> Redis { }"]


@pytest.mark.parametrize("run", ["sync", "async"])
def test_the_stores_retriever_returns_the_metadata_documents_were_added_with(store, run):
    """``store.as_retriever()`` returned each chunk with the knowledge base's fields alone: a
    loader's ``source`` was replaced by the store's id, the caller's keys (``page``,
    ``team``) were gone, so a chain citing ``doc.metadata["source"]`` broke (langchain-postgres'
    retriever returns them)."""
    import asyncio

    store.add_documents([
        Document("The shared cache layer is Redis cluster.",
                 metadata={"source": "notes/cache.md", "page": 3, "team": "platform"}),
        Document("Lunch is at noon on Fridays.", metadata={"source": "notes/lunch.md"})])
    retriever = store.as_retriever(search_kwargs={"k": 1})
    (doc,) = (retriever.invoke("shared cache layer") if run == "sync"
              else asyncio.run(retriever.ainvoke("shared cache layer")))
    assert (doc.metadata["source"], doc.metadata["page"], doc.metadata["team"]) == (
        "notes/cache.md", 3, "platform")
    assert doc.metadata["kb"]["origin"] == "primary" and doc.metadata["score"] > 0


def test_a_filter_and_the_filters_metadata_on_one_key_must_both_hold(store):
    """``filter=`` was merged into ``filters={"metadata": ...}`` key by key, so a key both
    named kept ``filter``'s condition alone (``team`` web, not sre): the two are AND-ed, on
    the store and on a retriever built with the knowledge base's own filters."""
    from langchain_kb_retriever import KBRetriever

    store.add_documents([Document("cache runbook for web", metadata={"team": "web", "tier": 1}),
                         Document("cache runbook for sre", metadata={"team": "sre", "tier": 1})])
    both = {"filter": {"team": "web"}, "filters": {"metadata": {"team": "sre"}}}
    assert store.similarity_search("cache runbook", k=2, **both) == []
    assert [d.page_content for d in store.similarity_search(
        "cache runbook", k=2, filter={"team": "web"}, filters={"metadata": {"tier": 1}})] == [
        "cache runbook for web"]
    retriever = KBRetriever(kb=store.kb, k=2, filters={"metadata": {"team": "sre"}},
                            filter_on_metadata=True)
    assert retriever.invoke("cache runbook", filter={"team": "web"}) == []
    assert [d.page_content for d in retriever.invoke("cache runbook", filter={"tier": 1})] == [
        "cache runbook for sre"]


@pytest.mark.parametrize("run", ["sync", "async"])
def test_a_store_filtered_to_rejected_records_returns_k_of_them(store, run):
    """The rejected channel takes a rejected record that the question does not bear on out of
    the ranking, and moves one it warns about to the ⚠ block: a store that promises k
    documents, filtered to rejected records, returned one or none of three."""
    import asyncio

    names = ("memcached", "hazelcast", "ehcache")
    store.add_documents([
        *(Document(f"We considered {n} for the shared cache and rejected it.",
                   metadata={"slug": f"rej-{n}", "type": "rejected-approach",
                             "status": "accepted"}) for n in names),
        Document("Redis is the shared cache.", metadata={
            "slug": "dec-redis", "type": "decision", "status": "accepted"})])
    only = {"type": "rejected-approach"}
    found = (store.similarity_search("which shared cache", k=3, filter=only) if run == "sync"
             else asyncio.run(store.asimilarity_search("which shared cache", k=3, filter=only)))
    assert sorted(d.metadata["slug"] for d in found) == [f"rej-{n}" for n in sorted(names)]
