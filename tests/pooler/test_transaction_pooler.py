"""kb-retriever behind PgBouncer in transaction mode (``KB_TRANSACTION_POOLER=true``): many
threads, tasks and a writer at once through a pooler that shares two server connections among
them, with the results of a direct connection; and no session setting that outlives a
transaction (a session's ``SET`` stays on whichever server connection ran it)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

from kb_retriever import HashingEmbedder, KnowledgeBase, Settings
from kb_retriever.store.reader import ReadCache, SearchSession
from kb_retriever.store.reads import Fetch
from kb_retriever.write.bulk import bulk_load

from ..db.test_close import returns_within
from ..db.test_doctor import DIM, _items
from .bouncer import Bouncer

pytestmark = [pytest.mark.db, pytest.mark.pooler]

TOPICS = ("redis cache", "kafka events", "postgres backups", "oauth tokens", "stripe payments")
DOCS = [{"id": f"n{i}.md", "text": (f"---\ntags: [{TOPICS[i % 5].split()[0]}]\n---\n"
                                    f"# Note {i}\n\n{TOPICS[i % 5]} note {i}, runbook step {i % 3}\n")}
        for i in range(40)]
SEARCHES: list[tuple[str, dict[str, object] | None]] = [
    *((t, None) for t in TOPICS), ("runbook step", {"tags": ["kafka"]}),
    ("note", {"$or": [{"tags": "redis"}, {"tags": "oauth"}]})]


def _ids(kb: KnowledgeBase, query: str, filters: dict[str, object] | None) -> list[str]:
    return [h.document.source_path for h in kb.search(query, limit=6, filters=filters).primary]


def test_threads_tasks_and_a_writer_at_once_through_the_pooler(
        bouncer: Bouncer, new_database: Callable[[], str]) -> None:
    """Without the setting every few searches failed: prepared statement "_pg3_9" does not
    exist / already exists, or "bind message supplies 5 parameters, but prepared statement
    "_pg3_13" requires 2" (another client's statement of that name)."""
    direct = new_database()
    pooled = bouncer.url(conninfo_to_dict(direct)["dbname"])
    with KnowledgeBase(embedder=HashingEmbedder(64), database_url=direct) as kb:
        kb.add_documents(DOCS)
        expected = {q: _ids(kb, q, f) for q, f in SEARCHES}
    errors: list[BaseException] = []
    with KnowledgeBase(Settings(transaction_pooler=True), embedder=HashingEmbedder(64),
                       database_url=pooled) as kb:

        def searcher(n: int) -> None:
            try:
                for j in range(20):
                    query, filters = SEARCHES[(n + j) % len(SEARCHES)]
                    assert _ids(kb, query, filters) == expected[query], (query, filters)
            except BaseException as exc:  # noqa: BLE001 - collected for the assertion below
                errors.append(exc)

        def writer() -> None:
            try:
                for j in range(15):
                    kb.add_documents([{"id": f"w{j}.md", "text": f"# W {j}\n\nwritten {j}\n"}],
                                     project="other")
                    assert kb.delete([f"w{j - 1}.md"], project="other") == (1 if j else 0)
            except BaseException as exc:  # noqa: BLE001
                errors.append(exc)

        async def tasks() -> list[list[str]]:
            results = await asyncio.gather(*(kb.asearch(q, limit=6, filters=f)
                                             for q, f in SEARCHES * 4))
            return [[h.document.source_path for h in r.primary] for r in results]

        got: list[list[list[str]]] = []

        def everything() -> None:
            threads = [threading.Thread(target=searcher, args=(n,)) for n in range(6)]
            threads.append(threading.Thread(target=writer))
            for t in threads:
                t.start()
            got.append(asyncio.run(tasks()))
            for t in threads:
                t.join()

        returns_within(180, everything)
        assert not errors, errors[:3]
        assert got == [[expected[q] for q, _ in SEARCHES * 4]]


def test_no_session_setting_outlives_a_transaction(bouncer: Bouncer,
                                                   new_database: Callable[[], str]) -> None:
    """Each read sets the HNSW settings and the statement timeout for its own transaction; the
    pool's sessions set none, so the pooler's other clients never run with them."""
    dbname = conninfo_to_dict(new_database())["dbname"]
    settings = Settings(transaction_pooler=True, hnsw_ef_search=77, statement_timeout_ms=4321)
    with KnowledgeBase(settings, embedder=HashingEmbedder(64),
                       database_url=bouncer.url(dbname)) as kb:
        kb.add_documents(DOCS[:5])
        assert kb.search("redis cache").primary
        probe = Fetch(sql.SQL("SELECT current_setting('hnsw.ef_search', true) AS ef, "
                              "current_setting('statement_timeout') AS timeout"), {}, "probe")
        session = SearchSession(kb._pools.sync(), ReadCache(), kb.settings, executor=lambda: None)
        try:
            assert session.fetch(probe) == [{"ef": "77", "timeout": "4321ms"}]
        finally:
            session.release()
        with bouncer.raw(dbname) as conn:
            for _ in range(8):  # whichever of the pooler's server connections answers
                ef, timeout = conn.execute("SELECT current_setting('hnsw.ef_search', true), "
                                           "current_setting('statement_timeout')").fetchone()
                assert ef != "77" and timeout != "4321ms"


def test_a_search_through_the_pooler_gives_its_server_connection_back(
        bouncer: Bouncer, new_database: Callable[[], str]) -> None:
    """Each read of a search ends with its server connection free for the pooler's other
    clients. When a read pipelined its settings, statement and commit, PgBouncer 1.18 kept the
    server connection linked to the idle client after about one first search in four, and a
    client of another test waited for it until ``query_wait_timeout`` (120 s) failed it."""
    dbname = conninfo_to_dict(new_database())["dbname"]
    settings = Settings(transaction_pooler=True)
    with KnowledgeBase(settings, embedder=HashingEmbedder(64),
                       database_url=bouncer.url(dbname)) as kb:
        kb.add_documents(DOCS[:5])
    for query, filters in SEARCHES * 3:  # each a knowledge base's first: every read is made
        with KnowledgeBase(settings, embedder=HashingEmbedder(64),
                           database_url=bouncer.url(dbname)) as kb:
            kb.search(query, limit=6, filters=filters)
            deadline = time.monotonic() + 1.0  # the pooler's bookkeeping, not the client's
            while "active" in (states := bouncer.server_states(dbname)):
                assert time.monotonic() < deadline, (query, states)
                time.sleep(0.05)


@pytest.mark.parametrize("defer_indexes", [False, True])
def test_a_bulk_load_through_the_pooler_loads_everything_and_leaves_no_setting(
        bouncer: Bouncer, new_database: Callable[[], str], defer_indexes: bool) -> None:
    """Three connections of the load (two COPY streams) share the pooler's two server
    connections, whose sessions time statements out after a second. Before each step set what it
    needs for its own transaction and nothing was prepared, the load failed ("bind message
    supplies 3 parameters, but prepared statement "_pg3_0" requires 8", reported as an
    unreachable database), and its session's ``SET statement_timeout = 0`` stayed on one server
    connection, for the pooler's other clients."""
    direct = new_database()
    dbname = conninfo_to_dict(direct)["dbname"]
    with KnowledgeBase(embedder=HashingEmbedder(DIM), database_url=direct) as kb:
        kb.add_documents(DOCS[:2])
    with psycopg.connect(direct, autocommit=True) as conn:
        conn.execute(sql.SQL("ALTER DATABASE {} SET statement_timeout = '1s'").format(
            sql.Identifier(dbname)))
    report = None

    def load() -> None:
        nonlocal report
        report = bulk_load(bouncer.url(dbname), _items(400), tenant="default", batch_docs=10,
                           defer_indexes=defer_indexes)

    returns_within(180, load)
    assert report is not None and (report.documents, report.chunks) == (400, 2000)
    with bouncer.raw(dbname) as conn:
        assert conn.execute("SELECT count(*) FROM kb_documents").fetchone() == (402,)
        assert conn.execute("SELECT count(*) FROM kb_chunks").fetchone() == (2000 + 2,)
        indexes = {r[0] for r in conn.execute(
            "SELECT indexname FROM pg_indexes WHERE tablename = 'kb_chunks'")}
        assert {"kb_chunks_tsv_ix", "kb_chunks_hnsw_1"} <= indexes
        for _ in range(8):  # whichever of the pooler's server connections answers
            assert conn.execute("SELECT current_setting('statement_timeout')").fetchone() == (
                "1s",)


def test_doctor_through_the_pooler_while_searches_run(
        bouncer: Bouncer, new_database: Callable[[], str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The doctor ran its 20 samples' statements prepared after five runs, which the pooler's
    other server connection does not know ("prepared statement _pg3_2 does not exist"); and
    ``--reindex``, a session lock and ``CREATE INDEX CONCURRENTLY``, cannot work through a
    transaction pooler: it says to run it on a direct connection."""
    from kb_retriever import ConfigError
    from kb_retriever.doctor import diagnose

    direct = new_database()
    pooled = bouncer.url(conninfo_to_dict(direct)["dbname"])
    with KnowledgeBase(embedder=HashingEmbedder(64), database_url=direct) as kb:
        kb.add_documents(DOCS)
    monkeypatch.setenv("KB_TRANSACTION_POOLER", "true")
    stop = threading.Event()
    errors: list[BaseException] = []

    def searcher() -> None:
        with KnowledgeBase(Settings(transaction_pooler=True), embedder=HashingEmbedder(64),
                           database_url=pooled) as other:
            while not stop.is_set():
                try:
                    other.search("redis cache", limit=6)
                except BaseException as exc:  # noqa: BLE001 - reported below
                    errors.append(exc)
                    return

    threads = [threading.Thread(target=searcher) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        reports = []
        returns_within(120, lambda: reports.extend(
            diagnose(database_url=pooled, samples=20) for _ in range(3)))
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    assert not errors, errors[:2]
    assert all(r.samples == 20 and r.recall_at_k is not None for r in reports)
    with pytest.raises(ConfigError, match="direct connection"):
        diagnose(database_url=pooled, reindex=True)
