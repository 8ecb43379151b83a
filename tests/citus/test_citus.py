"""kb-retriever on a real Citus 14 cluster (a coordinator and two workers): the schema
distributes itself, every one-tenant statement runs on one shard, and searches answer as on one
PostgreSQL server."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest

from kb_retriever import HashingEmbedder, KnowledgeBase, MiniLMEmbedder, SchemaError, Settings, StoreError
from kb_retriever.store import distribution
from kb_retriever.store.reader import ReadCache, SearchSession
from kb_retriever.store.reads import Fetch
from kb_retriever.write.bulk import bulk_load

from ..db.test_doctor import DIM, _items
from .cluster import Cluster, counters

pytestmark = [pytest.mark.db, pytest.mark.slow, pytest.mark.citus]

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE_KB = ROOT / "examples" / "kb"
QUERIES = ["what cache layer did we standardise on?", "can we use memcached for sessions?",
           "how do we roll back a deploy?", "payment timeouts incident", "kafka event bus"]


def _one_shard(url: str, work: Callable[[], object]) -> object:
    before = counters(url)
    out = work()
    after = counters(url)
    assert after[1] == before[1], f"{after[1] - before[1]} multi-shard queries"
    assert after[0] > before[0]
    return out


def test_the_schema_distributes_itself_with_its_indexes_on_every_shard(citus: Cluster) -> None:
    url = citus.new_database()
    with KnowledgeBase(Settings(), embedder=HashingEmbedder(32), database_url=url):
        pass
    with psycopg.connect(url, autocommit=True) as conn:
        described = distribution.describe(conn)
        assert described.citus and described.workers == 2 and described.colocated
        kinds = {t: m for t, m, _ in described.tables}
        assert kinds == {**dict.fromkeys(distribution.DISTRIBUTED, "hash by tenant_id"),
                         "kb_meta": "reference", "kb_models": "reference"}
        shards = conn.execute("SELECT count(*) FROM pg_dist_shard "
                              "WHERE logicalrelid = 'kb_chunks'::regclass").fetchone()[0]
        per_shard = _search_indexes_per_shard(conn)
    assert len(per_shard) == shards and set(per_shard) == {"gin,hnsw"}
    # opening it again changes nothing
    with KnowledgeBase(Settings(), embedder=HashingEmbedder(32), database_url=url):
        pass


def _search_indexes_per_shard(conn: psycopg.Connection) -> list[str]:
    """The access methods of each kb_chunks shard's search indexes ("gin,hnsw")."""
    return [r[0] for r in conn.execute(
        "SELECT result FROM run_command_on_shards('kb_chunks', $$SELECT string_agg(am.amname, "
        "',' ORDER BY am.amname) FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
        "JOIN pg_am am ON am.oid = c.relam WHERE i.indrelid = '%s'::regclass "
        "AND am.amname IN ('hnsw', 'gin')$$)")]


def test_a_bulk_load_with_deferred_indexes_gives_every_shard_its_indexes_back(
        citus: Cluster) -> None:
    url = citus.new_database()
    with KnowledgeBase(Settings(), embedder=HashingEmbedder(DIM), database_url=url):
        pass
    report = bulk_load(url, _items(120), tenant="default", batch_docs=25, defer_indexes=True)
    assert (report.documents, report.chunks) == (120, 600)
    assert {"kb_chunks_tsv_ix", "kb_chunks_hnsw_1"} <= set(report.index_build_s)
    with psycopg.connect(url, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM kb_chunks").fetchone() == (600,)
        assert set(_search_indexes_per_shard(conn)) == {"gin,hnsw"}
    with KnowledgeBase(Settings(), embedder=HashingEmbedder(DIM), database_url=url) as kb:
        assert kb.search("word1 word2").primary


def test_a_coordinator_without_workers_is_a_clear_error(citus: Cluster) -> None:
    url = citus.new_database(workers=False)
    with pytest.raises(SchemaError, match="citus_add_node"):
        KnowledgeBase(Settings(), embedder=HashingEmbedder(32), database_url=url).open()


def test_searches_answer_as_on_one_server(citus: Cluster, new_database: Callable[[], str],
                                          minilm: MiniLMEmbedder) -> None:
    """The worked example's knowledge base on Citus and on one PostgreSQL: the same results,
    trust gradient, graph and rejected channel included."""
    results = {}
    for name, url in (("citus", citus.new_database()), ("single", new_database())):
        with KnowledgeBase(Settings(), embedder=minilm, database_url=url, tenant="acme",
                           project="platform") as kb:
            report = kb.ingest([EXAMPLE_KB])
            assert not report.failed and report.added
            results[name] = [kb.search(q).to_dict() for q in QUERIES]
    for ours, theirs in zip(results["citus"], results["single"], strict=True):
        for part in ("primary", "expanded", "rejected"):
            assert [(h["document"]["slug"], round(h["score"], 6)) for h in ours[part]] == \
                [(h["document"]["slug"], round(h["score"], 6)) for h in theirs[part]]
    top = results["citus"][0]["primary"][0]["document"]
    assert top["slug"] == "dec-cache-v2" and top["canonical_status"] == "accepted"
    assert results["citus"][1]["rejected"]  # the rejected channel warns about memcached


def test_every_one_tenant_statement_runs_on_one_shard(citus: Cluster, tmp_path: Path) -> None:
    url = citus.new_database()
    (tmp_path / "a.md").write_text("---\nslug: dec-a\ntype: decision\nstatus: accepted\n"
                                   # a typed edge: expansion needs no evidence (decision 0014)
                                   "depends_on: ['[[dec-b]]']\n---\n# Redis\n\nRedis is the "
                                   "cache.\n")
    (tmp_path / "b.md").write_text("---\nslug: dec-b\ntype: decision\nstatus: accepted\n---\n"
                                   "# Kafka\n\nKafka carries the events.\n")
    kb = KnowledgeBase(Settings(), embedder=HashingEmbedder(32), database_url=url,
                       tenant="acme", project="p").open()
    try:
        _one_shard(url, lambda: kb.ingest([tmp_path]))
        _one_shard(url, lambda: kb.add_documents([{"id": "n", "text": "# Note\n\nredis tips"}]))
        _one_shard(url, lambda: kb.upsert_chunks("dec-c", [{"text": "redis split", "id": "s1"}],
                                                 metadata={"slug": "dec-c", "type": "decision",
                                                           "status": "accepted"}))
        kb.clear_caches()
        result = _one_shard(url, lambda: kb.search("which cache, redis?"))
        assert result.primary and result.expanded  # type: ignore[attr-defined]
        kb.add_documents([{"id": f"r{i}", "text": f"# Redis {i}\n\nredis note {i}"}
                          for i in range(10)])
        with KnowledgeBase(Settings(parallel_legs=False, fts_match_cap=10), database_url=url,
                           embedder=HashingEmbedder(32), tenant="acme", project="p") as one:
            # the one statement, whose full-text leg is at its cap by the scope's lexeme counts
            # (decision 0017): those tables are on the tenant's shard too
            assert _one_shard(url, lambda: one.search("redis")).primary  # type: ignore[attr-defined]
        _one_shard(url, lambda: asyncio.run(kb.asearch("kafka events")))
        _one_shard(url, lambda: kb.search_sql("redis"))
        _one_shard(url, lambda: kb.get_by_ids(["a.md", "n"]))
        _one_shard(url, lambda: kb.get_chunks(filters={"canonical_types": ["decision"]}))
        _one_shard(url, lambda: kb.delete_chunks(["s1"]))
        _one_shard(url, lambda: kb.delete(["n"]))
        _one_shard(url, lambda: kb.add_synonyms("cache", ["caching"]))
        _one_shard(url, lambda: kb.clear())
    finally:
        kb.close()


def test_tenants_stay_apart_on_their_shards(citus: Cluster) -> None:
    url = citus.new_database()
    for tenant in ("acme", "globex"):
        with KnowledgeBase(Settings(), embedder=HashingEmbedder(32), database_url=url,
                           tenant=tenant) as kb:
            kb.add_documents([{"id": f"{tenant}-doc", "text": f"# {tenant}\n\nsecret {tenant} "
                               "plan for the shared cache layer"}])
    with KnowledgeBase(Settings(), embedder=HashingEmbedder(32), database_url=url,
                       tenant="acme") as kb:
        found = {h.document.source_path for h in kb.search("secret plan shared cache").primary}
        assert found == {"acme-doc"}
        assert kb.get_by_ids(["globex-doc"]) == []


def test_the_hnsw_settings_reach_the_worker(citus: Cluster) -> None:
    url = citus.new_database()
    settings = Settings(hnsw_ef_search=123)
    with KnowledgeBase(settings, embedder=HashingEmbedder(32), database_url=url,
                       tenant="acme") as kb:
        kb.add_documents([{"id": "d", "text": "# D\n\nsome text"}])
        probe = Fetch(psycopg.sql.SQL(
            "SELECT current_setting('hnsw.ef_search') AS ef, "
            "current_setting('hnsw.iterative_scan') AS scan FROM kb_chunks "
            "WHERE tenant_id = %(tenant)s LIMIT 1"), {"tenant": "acme"}, "probe", ann=True)
        session = SearchSession(kb._pools.sync(), ReadCache(), settings, kb._pools.executor,
                                distributed=True)
        try:
            assert session.fetch(probe) == [{"ef": "123", "scan": "relaxed_order"}]
        finally:
            session.release()


def test_a_worker_down_is_a_store_error_not_a_wrong_result(citus: Cluster) -> None:
    url = citus.new_database()
    with KnowledgeBase(Settings(pool_timeout_s=5), embedder=HashingEmbedder(32),
                       database_url=url, tenant="acme") as kb:
        kb.add_documents([{"id": f"d{i}", "text": f"# D{i}\n\nredis cache {i}"} for i in range(5)])
        tenants_worker = citus.ports[1:]
        citus.pg_ctl(tenants_worker[0], "stop")
        citus.pg_ctl(tenants_worker[1], "stop")
        try:
            kb.clear_caches()
            with pytest.raises(StoreError):
                kb.search("redis cache")
        finally:
            for port in tenants_worker:
                citus.pg_ctl(port, "start")
        kb.clear_caches()
        assert kb.search("redis cache").primary


def test_a_tenant_opens_and_writes_while_another_tenants_worker_is_down(citus: Cluster) -> None:
    """Each open ran ``CREATE EXTENSION IF NOT EXISTS vector``, which Citus sends to every
    worker: with one down, no knowledge base of any tenant opened ("the database has no
    pgvector extension"), though the tenant's shard was on the other worker; and the
    statistics of every tenant's writes stayed unfolded."""
    url = citus.new_database()
    KnowledgeBase(Settings(), embedder=HashingEmbedder(32), database_url=url).open().close()
    on: dict[int, str] = {}
    with psycopg.connect(url, autocommit=True) as conn:
        for i in range(20):
            row = conn.execute(
                "SELECT nodeport FROM pg_dist_shard_placement WHERE shardid = "
                "get_shard_id_for_distribution_column('kb_documents', %s::text)",
                [f"t{i}"]).fetchone()
            assert row is not None
            on.setdefault(int(row[0]), f"t{i}")
    up, down = citus.ports[1], citus.ports[2]
    citus.pg_ctl(down, "stop")
    try:
        with KnowledgeBase(Settings(pool_timeout_s=5), embedder=HashingEmbedder(32),
                           database_url=url, tenant=on[up]) as kb:
            kb.add_documents([{"id": "d1", "text": "# D1\n\nnumbat survey data"}])
            assert kb.search("numbat survey").primary
        # the write's statistics were folded on the tenant's worker alone (the fold's deleted
        # log rows went to every worker as an intermediate result, and failed with one down)
        with psycopg.connect(url, autocommit=True) as conn:
            left = conn.execute("SELECT count(*) FROM kb_lexeme_log WHERE tenant_id = %s",
                                [on[up]]).fetchone()
            assert left is not None and left[0] == 0
    finally:
        citus.pg_ctl(down, "start")


def test_both_adapters_stores_on_one_shard(citus: Cluster) -> None:
    from langchain_core.documents import Document
    from langchain_kb_retriever import KBVectorStore as LangChainStore
    from llama_index.core.schema import TextNode
    from llama_index.core.vector_stores.types import VectorStoreQuery
    from llama_index.vector_stores.kb import KBVectorStore as LlamaStore

    url = citus.new_database()
    with KnowledgeBase(Settings(), embedder=HashingEmbedder(32), database_url=url,
                       tenant="acme") as kb:
        lc = LangChainStore(kb=kb)
        splits = [Document(f"Redis cluster is the shared cache, part {i}.", metadata={
            "slug": "dec-cache", "type": "decision", "status": "accepted"}) for i in range(3)]
        ids = _one_shard(url, lambda: lc.add_documents(splits))
        found = _one_shard(url, lambda: lc.similarity_search("shared cache", k=3))
        assert {d.id for d in found} == set(ids)  # type: ignore[union-attr, arg-type]
        li = LlamaStore(kb, project="llama")
        nodes = [TextNode(id_=f"n{i}", text=f"Kafka carries event {i}.",
                          embedding=kb.embedder.embed_query(f"Kafka carries event {i}."))
                 for i in range(3)]
        _one_shard(url, lambda: li.add(nodes))
        answer = _one_shard(url, lambda: li.query(VectorStoreQuery(
            query_str="kafka event", query_embedding=kb.embedder.embed_query("kafka event"),
            similarity_top_k=2)))
        assert len(answer.nodes) == 2  # type: ignore[attr-defined]


def test_two_models_and_a_reembed_on_citus(citus: Cluster, tmp_path: Path) -> None:
    """Each model's partial index on every shard; a project's search stays on one shard, the
    other model's project is refused by name, and a re-embed moves it."""
    url = citus.new_database()
    (tmp_path / "q.md").write_text("# Queues\n\nA durable queue for billing.", encoding="utf-8")
    (tmp_path / "c.md").write_text("# Cache\n\nRedis with a short TTL.", encoding="utf-8")
    with KnowledgeBase(Settings(), embedder=HashingEmbedder(32), database_url=url,
                       tenant="acme") as old, \
            KnowledgeBase(Settings(), embedder=HashingEmbedder(48), database_url=url,
                          tenant="acme") as new:
        old.ingest([tmp_path], project="a")
        new.ingest([tmp_path], project="b")
        hit = _one_shard(url, lambda: new.search("redis cache", project="b"))
        assert hit.primary[0].document.title == "Cache"  # type: ignore[attr-defined]
        with pytest.raises(SchemaError, match="hashing-md5-32"):
            new.search("redis cache", project="a")
        assert new.reembed("a").chunks == 2
        assert new.search("durable queue", project="a").primary[0].document.title == "Queues"
        with pytest.raises(SchemaError, match="hashing-md5-48"):
            old.search("durable queue", project="a")
    with psycopg.connect(url, autocommit=True) as conn:
        per_shard = conn.execute(
            "SELECT result FROM run_command_on_shards('kb_chunks', $$SELECT count(*) FROM "
            "pg_index i JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_am am ON am.oid = c.relam "
            "WHERE i.indrelid = '%s'::regclass AND am.amname = 'hnsw'$$)").fetchall()
    assert {r[0] for r in per_shard} == {"2"}


def _shards_storage(conn: psycopg.Connection, column: str) -> set[str]:
    """The storage of ``column`` of kb_chunks on each shard."""
    return {r for (r,) in conn.execute(
        "SELECT result FROM run_command_on_shards('kb_chunks', $$SELECT attstorage FROM "
        f"pg_attribute WHERE attrelid = '%s'::regclass AND attname = '{column}' "
        "AND NOT attisdropped$$)")}


def test_a_database_built_before_gets_its_languages_on_citus(citus: Cluster, tmp_path: Path) -> None:
    """The tsv column of a database an older kb-retriever built is built again on a distributed
    kb_chunks too: its shards keep the column in the row (SET STORAGE, which Citus does not
    propagate, is run on each), and a Romanian document is stemmed in Romanian."""
    from tests.db.test_languages import RO_METERS, _first_by_text
    from tests.db.test_text_configs import _as_built_before

    url = citus.new_database()
    (tmp_path / "ro.md").write_text(RO_METERS, encoding="utf-8")
    with KnowledgeBase(Settings(), embedder=HashingEmbedder(256), database_url=url) as kb:
        kb.ingest([tmp_path])
    _as_built_before(url)
    with KnowledgeBase(Settings(), embedder=HashingEmbedder(256), database_url=url) as kb:
        assert _first_by_text(kb, "contorul jurnalului") == ["ro"]
    with psycopg.connect(url, autocommit=True) as conn:
        assert conn.execute("SELECT fts_lang FROM kb_chunks").fetchall() == [("ro",)]
        assert _shards_storage(conn, "tsv") == {"m"}
        counted = dict(conn.execute("SELECT lexeme, chunks FROM kb_lexemes").fetchall())
        truth = dict(conn.execute("SELECT u.lexeme, count(*) FROM kb_chunks c, unnest(c.tsv) u "
                                  "GROUP BY u.lexeme").fetchall())
        assert counted == truth


def test_the_shards_keep_a_chunks_embedding_in_its_row_new_and_migrated(citus: Cluster) -> None:
    """Migration 0010 keeps a chunk's embedding in its heap row (it was read from TOAST for
    each hit's distance). A new distributed database's shards copy the storage; a database
    distributed before gets it on each shard, as Citus propagates no SET STORAGE."""
    url = citus.new_database()
    with KnowledgeBase(Settings(), embedder=HashingEmbedder(32), database_url=url):
        pass
    with psycopg.connect(url, autocommit=True) as conn:
        assert _shards_storage(conn, "embedding") == {"m"}
        conn.execute("SELECT run_command_on_shards('kb_chunks', "
                     "$$ALTER TABLE %s ALTER COLUMN embedding SET STORAGE EXTERNAL$$)")
        assert _shards_storage(conn, "embedding") == {"e"}
        conn.execute("UPDATE kb_meta SET value = '9' WHERE key = 'schema_version'")
    with KnowledgeBase(Settings(), embedder=HashingEmbedder(32), database_url=url):
        pass
    with psycopg.connect(url, autocommit=True) as conn:
        assert _shards_storage(conn, "embedding") == {"m"}
