"""Read replicas on a real streaming replica: searches and reads go to it, writes to the
primary, ``consistent`` reads see this process's writes, a replica that is down or lags is
skipped, and with the primary down the knowledge base still opens and searches."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

from kb_retriever import ConfigError, HashingEmbedder, KnowledgeBase, Settings, UnavailableError
from kb_retriever.store.embedded import start_embedded
from kb_retriever.store.replicas import Replicas

from ..db.test_close import returns_within
from .standby import Standby, stop_primary

pytestmark = [pytest.mark.db, pytest.mark.slow, pytest.mark.replica]

DOCS = [{"id": f"d{i}", "text": f"# Note {i}\n\nredis cache layer note {i}"} for i in range(6)]


class Pair:
    def __init__(self) -> None:
        self.home = Path(tempfile.mkdtemp(prefix="kb-primary-"))
        self.server_url = start_embedded(self.home)
        self.standby = Standby(self.home, self.server_url)

    def database(self) -> tuple[str, str]:
        """A new database on the primary, and its URL on the replica once it has arrived."""
        name = f"kbrep_{uuid.uuid4().hex[:10]}"
        with psycopg.connect(self.server_url, autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        for _ in range(100):
            try:
                self.standby.sql(name, "SELECT 1")
                break
            except psycopg.OperationalError:
                time.sleep(0.1)
        return make_conninfo(self.server_url, dbname=name), self.standby.url(name)

    def remove(self) -> None:
        """Stop both servers and remove their directories: each pair holds ~150 MB."""
        self.standby.remove()
        try:
            stop_primary(self.home)
        except RuntimeError:
            pass  # a test stopped it
        shutil.rmtree(self.home, ignore_errors=True)


@pytest.fixture(scope="module")
def pair() -> Iterator[Pair]:
    p = Pair()
    yield p
    p.remove()


def _kb(primary: str, replica: str, **settings: object) -> KnowledgeBase:
    return KnowledgeBase(Settings(**settings), embedder=HashingEmbedder(32),
                         database_url=primary, replica_urls=[replica])


def _wait_for(replica: str, doc_id: str) -> None:
    for _ in range(100):
        with psycopg.connect(replica, autocommit=True) as conn:
            if conn.execute("SELECT 1 FROM kb_documents WHERE source_path = %s",
                            [doc_id]).fetchone():
                return
        time.sleep(0.05)
    raise AssertionError(f"{doc_id} never reached the replica")


def test_searches_and_reads_go_to_the_replica_writes_to_the_primary(pair: Pair) -> None:
    primary, replica = pair.database()
    with _kb(primary, replica) as kb:
        kb.add_documents(DOCS)
        _wait_for(replica, "d5")
        kb.clear_caches()
        result = kb.search("redis cache layer")
        assert result.meta["server"] == "replica 1" and result.primary
        assert result.meta["replica_lag_s"] is not None
        assert asyncio.run(kb.asearch("redis cache layer")).meta["server"] == "replica 1"
        assert [d.id for d in kb.get_by_ids(["d1"])] == ["d1"]
        with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
            with psycopg.connect(replica, autocommit=True) as conn:
                conn.execute("DELETE FROM kb_documents")


def test_asyncio_run_of_a_search_on_the_replica_returns(pair: Pair) -> None:
    """A search, then ``asyncio.run(kb.asearch(...))``, forty times, each on a new knowledge
    base: every run returns and reads the replica. The replica's async pool used to open without waiting for
    its connections, so the loop ended with a connect under way, which psycopg_pool took for
    a failed one and retried: ``asyncio.run`` hung, within 20 runs here."""
    primary, replica = pair.database()
    with _kb(primary, replica) as kb:
        kb.add_documents(DOCS)
    _wait_for(replica, "d5")

    def runs() -> None:
        for _ in range(40):
            with _kb(primary, replica) as kb:
                assert kb.search("redis cache layer").meta["server"] == "replica 1"
                found = asyncio.run(kb.asearch("redis cache layer"))
                assert found.meta["server"] == "replica 1" and found.primary

    returns_within(120, runs)


def test_a_consistent_read_sees_this_processs_own_write(pair: Pair) -> None:
    primary, replica = pair.database()
    with _kb(primary, replica) as kb:
        kb.add_documents(DOCS[:2])
        pair.standby.sql("postgres", "SELECT pg_wal_replay_pause()")
        try:
            kb.add_documents([{"id": "fresh", "text": "# Fresh\n\nzebracorn deployment plan"}])
            kb.clear_caches()
            seen = kb.search("zebracorn deployment plan", consistent=True)
            assert seen.meta["server"] == "primary"
            assert seen.primary[0].document.source_path == "fresh"
            assert [d.id for d in kb.get_by_ids(["fresh"], consistent=True)] == ["fresh"]
            # another knowledge base of this process sees the write too (each kept its own mark)
            with _kb(primary, replica) as other:
                assert [d.id for d in other.get_by_ids(["fresh"], consistent=True)] == ["fresh"]
                assert other.search("zebracorn deployment plan",
                                    consistent=True).meta["server"] == "primary"
        finally:
            pair.standby.sql("postgres", "SELECT pg_wal_replay_resume()")
        _wait_for(replica, "fresh")
        kb.clear_caches()
        caught_up = kb.search("zebracorn deployment plan", consistent=True)
        assert caught_up.meta["server"] == "replica 1"


def test_an_mcp_server_that_writes_reads_its_own_writes(pair: Pair) -> None:
    """With replicas, the MCP server's reads went to a replica: right after ``add_document``,
    ``get_document`` answered "no document with id" and the search did not find it."""
    from kb_retriever.mcp import Scope, build_server

    from ..mcp.conftest import connect, text_of

    primary, replica = pair.database()

    async def add_then_read(server: object) -> tuple[str, str]:
        async with connect(server) as client:
            await client.call_tool("add_document", {"text": "# Fresh\n\nzebracorn rollout",
                                                    "id": "fresh"})
            doc = await client.call_tool("get_document", {"id": "fresh"})
            found = await client.call_tool("search_knowledge_base", {"query": "zebracorn"})
            return text_of(doc), text_of(found)

    with _kb(primary, replica) as kb:
        kb.add_documents(DOCS[:2])
        _wait_for(replica, "d1")
        pair.standby.sql("postgres", "SELECT pg_wal_replay_pause()")
        try:
            doc, found = asyncio.run(add_then_read(
                build_server(kb, Scope(projects=("default",), allow_writes=True))))
        finally:
            pair.standby.sql("postgres", "SELECT pg_wal_replay_resume()")
    assert "zebracorn rollout" in doc and "Path: fresh" in found


def test_a_consistent_search_uses_no_cached_read_of_a_lagging_replica(pair: Pair) -> None:
    """A write clears the process's read cache; a search that is not ``consistent`` then
    filled it again from a replica that had not replayed the write, and the process's
    ``consistent`` searches used those answers (here the synonyms) for the cache's TTL."""
    primary, replica = pair.database()
    with _kb(primary, replica) as kb:
        kb.add_documents([{"id": "pto", "text": "# Time off\n\nRequest PTO in the HR portal."}])
        _wait_for(replica, "pto")
        pair.standby.sql("postgres", "SELECT pg_wal_replay_pause()")
        try:
            kb.add_synonyms("vacation", ["pto"])
            stale = kb.search("vacation request")  # from the replica: no synonym yet
            assert stale.meta["server"] == "replica 1"
            assert stale.meta["search_strategy"]["synonym_phrases"] == []
            seen = kb.search("vacation request", consistent=True)
            assert seen.meta["server"] == "primary"
            assert seen.meta["search_strategy"]["synonym_phrases"] == ["pto"]
        finally:
            pair.standby.sql("postgres", "SELECT pg_wal_replay_resume()")


def test_a_replica_that_lags_past_the_bound_is_skipped(pair: Pair) -> None:
    primary, replica = pair.database()
    with _kb(primary, replica, replica_max_lag_s=0.5) as kb:
        kb.add_documents(DOCS[:2])
        pair.standby.sql("postgres", "SELECT pg_wal_replay_pause()")
        try:
            kb.add_documents(DOCS[2:4])
            time.sleep(1.5)
            kb.clear_caches()
            assert kb.search("redis cache").meta["server"] == "primary"
        finally:
            pair.standby.sql("postgres", "SELECT pg_wal_replay_resume()")


def test_a_replica_cut_off_from_the_primary_is_skipped(pair: Pair) -> None:
    """A replica that receives nothing has replayed all it received, which read as no lag: it
    answered searches while the primary moved on, with no bound. Cut off, it is as far behind
    as its last replayed transaction is old."""
    primary, replica = pair.database()
    conninfo = str(pair.standby.sql("postgres", "SHOW primary_conninfo")[0])  # type: ignore[index]
    with _kb(primary, replica, replica_max_lag_s=1.0) as kb:
        kb.add_documents(DOCS[:2])
        _wait_for(replica, "d1")
        _reconnect(pair, "host=/nonexistent")
        try:
            kb.add_documents(DOCS[2:4])
            time.sleep(2.0)
            kb.clear_caches()
            result = kb.search("redis cache")
            assert result.meta["server"] == "primary" and len(result.primary) == 4
        finally:
            _reconnect(pair, conninfo)
        _wait_for(replica, "d3")
        time.sleep(1.2)  # the lag is read again after a second
        kb.clear_caches()
        assert kb.search("redis cache").meta["server"] == "replica 1"


def test_a_replica_whose_link_stalls_silently_is_skipped(pair: Pair) -> None:
    """A link that stops carrying anything without closing (a network drop): the receiver
    still says "streaming" and has replayed all it received, which read as no lag until
    ``wal_receiver_timeout`` (60 s) ended it; meanwhile stale answers. Here the primary's
    WAL sender is stopped (SIGSTOP): its socket stays open and sends nothing."""
    primary, replica = pair.database()
    with _kb(primary, replica, replica_max_lag_s=1.0) as kb:
        kb.add_documents(DOCS[:2])
        _wait_for(replica, "d1")
        kb.clear_caches()
        assert kb.search("redis cache").meta["server"] == "replica 1"
        with psycopg.connect(pair.server_url, autocommit=True) as conn:
            senders = [int(r[0]) for r in conn.execute("SELECT pid FROM pg_stat_replication")]
        assert senders
        for pid in senders:
            os.kill(pid, signal.SIGSTOP)
        try:
            kb.add_documents(DOCS[2:4])
            deadline = time.monotonic() + 2.5
            while time.monotonic() < deadline:  # searches meanwhile: the lag is measured
                kb.clear_caches()
                result = kb.search("redis cache")
                time.sleep(0.2)
            status = pair.standby.sql("postgres", "SELECT status FROM pg_stat_wal_receiver")
            assert status == ("streaming",)  # the replica itself sees nothing wrong
            assert result.meta["server"] == "primary" and len(result.primary) == 4
        finally:
            for pid in senders:
                os.kill(pid, signal.SIGCONT)
        _wait_for(replica, "d3")
        time.sleep(1.2)  # the lag is read again after a second
        kb.clear_caches()
        assert kb.search("redis cache").meta["server"] == "replica 1"


def test_a_busy_replica_is_waited_for_not_marked_down(pair: Pair) -> None:
    """Every search took a connection of the replica's pool to check it, even when nothing was
    to be read: with each of them in use for longer than the check's wait (2 s), the replica
    was taken for unreachable and skipped for ``KB_REPLICA_RETRY_S``, all reads on the
    primary's pool."""
    primary, replica = pair.database()
    with _kb(primary, replica, pool_min_size=1, pool_max_size=1, replica_retry_s=60.0) as kb:
        kb.add_documents(DOCS[:2])
        _wait_for(replica, "d1")
        assert kb.search("redis cache").meta["server"] == "replica 1"
        r = kb._pools.replicas._replicas[0]
        taken, free = threading.Event(), threading.Event()

        def hold() -> None:
            with r.pool.connection():
                taken.set()
                free.wait(10)

        holder = threading.Thread(target=hold)
        holder.start()
        taken.wait(10)
        threading.Timer(3.0, free.set).start()
        kb.clear_caches()
        assert kb.search("redis cache").meta["server"] == "replica 1"  # waited 3 s for it
        holder.join(10)
        kb.clear_caches()
        assert kb.search("redis cache").meta["server"] == "replica 1"


def _reconnect(pair: Pair, conninfo: str) -> None:
    """Point the standby's WAL receiver at ``conninfo`` (it restarts on reload)."""
    with psycopg.connect(pair.standby.url("postgres"), autocommit=True) as conn:
        conn.execute(sql.SQL("ALTER SYSTEM SET primary_conninfo = {}").format(sql.Literal(conninfo)))
        conn.execute("SELECT pg_reload_conf()")


def test_an_async_pool_of_a_replica_belongs_to_one_running_event_loop(pair: Pair) -> None:
    """Two running loops on one knowledge base: the primary's async pool refuses the second,
    and so does now a replica's (each loop replaced the replica's pool, the last one's
    connections left open: 36 pools in 240 searches). A loop that has ended hands it over."""
    primary, replica = pair.database()
    with _kb(primary, replica) as kb:
        kb.add_documents(DOCS)
        _wait_for(replica, "d5")
        loop = asyncio.new_event_loop()
        runner = threading.Thread(target=loop.run_forever, daemon=True)
        runner.start()
        try:
            first = asyncio.run_coroutine_threadsafe(kb.asearch("redis cache"), loop).result(30)
            assert first.meta["server"] == "replica 1"
            with pytest.raises(ConfigError, match="event loop"):
                asyncio.run(kb.asearch("redis cache"))
        finally:
            asyncio.run_coroutine_threadsafe(kb._pools.replicas.aclose(), loop).result(30)
            loop.call_soon_threadsafe(loop.stop)
            runner.join(10)
            loop.close()
        for _ in range(3):  # loops one after the other: each ended loop hands the pool over
            assert asyncio.run(kb.asearch("redis cache")).meta["server"] == "replica 1"


def test_a_promoted_replica_is_skipped() -> None:
    """Promoted, a replica's data goes its own way and its WAL positions stand still (which read
    as no lag): it answered every search with the writes made since missing. Its own primary."""
    p = Pair()
    try:
        primary, replica = p.database()
        with _kb(primary, replica) as kb:
            kb.add_documents(DOCS[:2])
            _wait_for(replica, "d1")
            p.standby.sql("postgres", "SELECT pg_promote()")
            kb.add_documents(DOCS[2:4])
            time.sleep(1.2)  # the state is read again after a second
            kb.clear_caches()
            result = kb.search("redis cache")
            assert result.meta["server"] == "primary" and len(result.primary) == 4
    finally:
        p.remove()


def test_a_replica_that_is_down_is_skipped(pair: Pair) -> None:
    primary, replica = pair.database()
    with _kb(primary, replica, replica_connect_timeout_s=1.0) as kb:
        kb.add_documents(DOCS)
        _wait_for(replica, "d5")
        pair.standby.stop()
        try:
            kb.clear_caches()
            result = kb.search("redis cache layer")
            assert result.meta["server"] == "primary" and result.primary
        finally:
            pair.standby.start()


def test_an_async_pool_that_cannot_connect_marks_its_replica_down(pair: Pair) -> None:
    """The replica went down after it was picked: its async pool does not open within
    ``KB_REPLICA_CONNECT_TIMEOUT_S``, so there is none (the search reads the primary) and
    the replica is skipped for ``KB_REPLICA_RETRY_S``."""
    _, replica = pair.database()
    replicas = Replicas((replica,), Settings(replica_connect_timeout_s=1.0))
    pair.standby.stop()
    try:
        r = replicas._replicas[0]
        assert asyncio.run(replicas.apool(r, {})) is None
        assert r.apool is None and r.down_until > time.monotonic()
    finally:
        pair.standby.start()


def test_searches_go_on_from_the_replica_with_the_primary_down() -> None:
    """Last: it stops a primary of its own."""
    p = Pair()
    try:
        primary, replica = p.database()
        with _kb(primary, replica) as kb:
            kb.add_documents(DOCS)
        _wait_for(replica, "d5")
        stop_primary(p.home)
        with _kb(primary, replica, pool_timeout_s=2.0) as kb:  # opens with the primary down
            result = kb.search("redis cache layer")
            assert result.meta["server"] == "replica 1" and result.primary
            with pytest.raises(UnavailableError):
                kb.add_documents([{"id": "lost", "text": "# Lost\n\nnever written"}])
    finally:
        p.remove()
