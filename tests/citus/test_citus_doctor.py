"""``kb-retriever doctor`` on a real Citus cluster: the indexes it reports are the shards'."""

from __future__ import annotations

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict

from kb_retriever import HashingEmbedder, KnowledgeBase, Settings
from kb_retriever.doctor import diagnose
from kb_retriever.write.bulk import bulk_load

from ..db.test_doctor import DIM, _items
from .cluster import Cluster

pytestmark = [pytest.mark.db, pytest.mark.slow, pytest.mark.citus]


def test_the_doctor_reads_the_indexes_of_the_shards(citus: Cluster) -> None:
    """The doctor read the coordinator's shell indexes: 0 MB each, and valid whatever the
    shards held, so a shard whose HNSW index was gone (every search of its tenants an exact
    scan) went unreported."""
    url = citus.new_database()
    with KnowledgeBase(Settings(), embedder=HashingEmbedder(DIM), database_url=url):
        pass
    bulk_load(url, _items(60), tenant="default")
    hnsw = next(i for i in diagnose(database_url=url, samples=3).indexes if i["method"] == "hnsw")
    with psycopg.connect(url) as conn:
        on_shards = sum(int(r[0]) for r in conn.execute(
            "SELECT result FROM run_command_on_shards('kb_chunks', $$SELECT "
            "pg_relation_size(indexrelid) FROM pg_index i JOIN pg_class c ON c.oid = indexrelid "
            "JOIN pg_am am ON am.oid = c.relam WHERE indrelid = '%s'::regclass "
            "AND amname = 'hnsw'$$)"))
    assert hnsw["valid"] and hnsw["size_mb"] == round(on_shards / 2**20, 2) > 0.1, hnsw
    with psycopg.connect(url) as conn:
        shard, port = conn.execute(
            "SELECT shardid, nodeport FROM citus_shards WHERE table_name = 'kb_chunks'::regclass "
            "ORDER BY shardid LIMIT 1").fetchone()
    with psycopg.connect(citus.url(port, conninfo_to_dict(url)["dbname"]),
                         autocommit=True) as worker:
        worker.execute(f"DROP INDEX {hnsw['name']}_{shard}")
    report = diagnose(database_url=url, samples=3)
    gone = next(i for i in report.indexes if i["name"] == hnsw["name"])
    assert not gone["valid"], gone
    assert any(hnsw["name"] in h and "1 of" in h and "shards" in h for h in report.hints), \
        report.hints
    # the hint's mend
    mended = diagnose(database_url=url, samples=3, reindex=True)
    assert all(i["valid"] and not i["shards_without"] for i in mended.indexes), mended.indexes
    assert not any("shards" in h for h in mended.hints), mended.hints
