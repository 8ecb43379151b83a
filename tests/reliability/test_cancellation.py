"""Async calls cancelled at any moment (a client that disconnects, ``asyncio.wait_for`` or
``asyncio.timeout`` around them), and a sync one stopped by a Ctrl-C: every connection goes
back to the pool in a state fit for the next call, or not at all (found by exploratory
reviews: each test fails on the code before its fix)."""

from __future__ import annotations

import asyncio
import contextlib
import random
import signal
import threading
import time
from collections.abc import Callable

import psycopg
import pytest

from kb_retriever import KnowledgeBase
from kb_retriever.store import pools

from ._util import pool_timeouts, sessions, sync_pool_timeouts

pytestmark = pytest.mark.db

MakeKb = Callable[..., KnowledgeBase]
TEXT = "Redis is the shared cache layer; the eviction policy is least recently used."


def _busy_backends(kb: KnowledgeBase) -> list[tuple[str, str]]:
    """The other sessions of the knowledge base's database that are not idle, once those
    cancelled have had a moment to stop."""
    deadline = time.monotonic() + 5
    with psycopg.connect(kb.url, autocommit=True) as conn:
        while True:
            rows = conn.execute("SELECT state, left(query, 60) FROM pg_stat_activity WHERE "
                                "datname = current_database() AND pid <> pg_backend_pid() "
                                "AND backend_type = 'client backend' AND state <> 'idle'"
                                ).fetchall()
            if not rows or time.monotonic() > deadline:
                return [(str(r[0]), str(r[1])) for r in rows]
            time.sleep(0.1)


async def _idle_in_pool(kb: KnowledgeBase) -> int:
    """How many connections the loop's pool holds idle, once returns under way have ended."""
    pool = await kb._pools.asynchronous()
    for _ in range(50):
        if (idle := pool.get_stats()["pool_available"]) == pool.max_size:
            break
        await asyncio.sleep(0.02)
    return int(idle)


def test_searches_cancelled_at_random_moments_give_every_connection_back(
        make_kb: MakeKb) -> None:
    """psycopg_pool's ``putconn``, cancelled while it waits for the pool's lock, drops the
    connection: 800 searches, 16 at a time, each under a ``wait_for`` bound shorter than a
    search, left the pool of 4 with 0 to 3 connections (with none, every later search waited
    ``KB_POOL_TIMEOUT_S`` and failed)."""
    kb = make_kb()
    kb.add_documents([{"text": f"{TEXT} ({i})", "id": f"d{i}"} for i in range(40)])
    rng = random.Random(11)

    async def bounded(query: str, bound: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(kb.asearch(query), timeout=bound)

    async def storm() -> tuple[int, int, int]:
        await kb.asearch("cache layer")
        began = time.perf_counter()
        await kb.asearch("eviction policy")
        one = time.perf_counter() - began
        for start in range(0, 800, 16):
            await asyncio.gather(*(bounded(f"cache layer {i}", rng.uniform(0, 1.5 * one))
                                   for i in range(start, start + 16)))
        size = (await kb._pools.asynchronous()).max_size
        idle = await _idle_in_pool(kb)
        found = await asyncio.wait_for(asyncio.gather(*(kb.asearch("eviction policy")
                                                        for _ in range(8))), timeout=30)
        await kb.aclose()
        return idle, size, sum(1 for r in found if r.primary)

    idle, size, answered = asyncio.run(asyncio.wait_for(storm(), timeout=120))
    assert (idle, answered) == (size, 8)
    assert _busy_backends(kb) == []


def test_reads_and_writes_cancelled_at_random_moments_give_every_connection_back(
        make_kb: MakeKb) -> None:
    """The documents API's async reads and writes took their connection with psycopg_pool's
    ``connection()``, whose return the cancellation dropped in the same way: 1,600 calls of
    ``adelete``, ``adelete_named`` and ``aget_by_ids``, 16 at a time, each under a bound
    shorter than a call, lost a connection within the first few hundred. Every connection
    back has the search's statement timeout, and what was not deleted reads back whole."""
    kb = make_kb()
    docs = [{"text": f"{TEXT} ({i})\n\n" * 30, "id": f"d{i}"} for i in range(200)]
    kb.add_documents(docs)
    rng = random.Random(5)

    async def bounded(i: int) -> None:
        ids = [f"d{rng.randrange(200)}" for _ in range(3)]
        call = (kb.adelete, kb.adelete_named, kb.aget_by_ids)[i % 3]
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(call(ids), timeout=rng.uniform(0, 0.01))

    async def storm() -> tuple[int, list[str], int]:
        await kb.aget_by_ids(["d0"])
        for start in range(0, 1600, 16):
            await asyncio.gather(*(bounded(i) for i in range(start, start + 16)))
        idle = await _idle_in_pool(kb)
        after = await asyncio.wait_for(pool_timeouts(kb), timeout=30)
        left = await kb.aget_by_ids([d["id"] for d in docs])
        whole = sum(1 for d in left if d.text == docs[int(d.id[1:])]["text"])
        await kb.aclose()
        return idle, after, len(left) - whole

    idle, after, broken = asyncio.run(asyncio.wait_for(storm(), timeout=120))
    assert (idle, set(after), broken) == (4, {"10s"}, 0)
    assert _busy_backends(kb) == []


def test_first_uses_of_a_borrowed_async_pool_cancelled_give_its_connections_back(
        new_database: Callable[[], str]) -> None:
    """A borrowed connection is prepared on its first use (pgvector's types, the HNSW
    settings: three round trips); a search cancelled then kept the owner's connection: 60
    knowledge bases on one borrowed pool of 2, each with a first search under a short bound,
    left it with none (the owner's next ``connection()`` waited its whole timeout)."""
    from psycopg_pool import AsyncConnectionPool

    from kb_retriever import HashingEmbedder, Settings

    url = new_database()
    with KnowledgeBase(Settings(), embedder=HashingEmbedder(64), database_url=url) as kb:
        kb.add_documents([{"text": TEXT, "id": "d1"}])
    rng = random.Random(3)

    async def bases() -> int:
        async with AsyncConnectionPool(url, min_size=2, max_size=2, timeout=5,
                                       kwargs={"autocommit": True}) as apool:
            for _ in range(60):
                kb = KnowledgeBase(Settings(), embedder=HashingEmbedder(64), database_url=url,
                                   async_pool=apool)
                await asyncio.to_thread(kb.open)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(kb.asearch("cache layer"),
                                           timeout=rng.uniform(0, 0.01))
                await kb.aclose()
            await asyncio.sleep(0.1)
            idle = int(apool.get_stats()["pool_available"])
            async with apool.connection(timeout=5) as conn:  # the owner's pool still serves
                await conn.execute("SELECT 1")
            return idle

    assert asyncio.run(asyncio.wait_for(bases(), timeout=120)) == 2


def test_an_async_with_cancelled_while_it_opens_leaves_nothing_open(
        new_database: Callable[[], str]) -> None:
    """``async with KnowledgeBase(...)`` under a timeout that fires while it opens: Python runs
    no ``__aexit__`` for an ``__aenter__`` that raised, and the base stayed open with its pools
    (5 of 20 such bases, 14 server sessions, until the process exited). Closing waits for
    the open that runs in its thread, then closes what it opened."""
    from kb_retriever import HashingEmbedder, Settings

    url = new_database()
    KnowledgeBase(Settings(), embedder=HashingEmbedder(64), database_url=url).open().close()
    bases: list[KnowledgeBase] = []
    rng = random.Random(2)

    async def bounded(bound: float) -> bool:
        kb = KnowledgeBase(Settings(), embedder=HashingEmbedder(64), database_url=url)
        bases.append(kb)
        try:
            async with asyncio.timeout(bound), kb:
                await kb.asearch("cache layer")
        except TimeoutError:
            return False
        return True

    began = time.perf_counter()
    assert asyncio.run(bounded(30))
    entered = time.perf_counter() - began
    finished = [asyncio.run(bounded(rng.uniform(0, entered))) for _ in range(20)]
    assert finished.count(False) >= 10  # most bounds fell while the base opened
    assert [kb.is_open for kb in bases] == [False] * 21
    assert sessions(url) == 0


def test_an_aclose_cancelled_half_way_still_closes(new_database: Callable[[], str]) -> None:
    """``aclose()`` (and ``async with``'s exit) cancelled while it closed, as a timeout around
    the whole block does when it falls there: the base stayed open with its pools."""
    from kb_retriever import HashingEmbedder, Settings

    url = new_database()

    async def cancelled_close(delay: float) -> bool:
        kb = KnowledgeBase(Settings(), embedder=HashingEmbedder(64), database_url=url)
        async with kb:
            await kb.asearch("cache layer")
        await kb.__aenter__()  # open again, then close under a cancellation
        closing = asyncio.ensure_future(kb.aclose())
        await asyncio.sleep(delay)
        closing.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await closing
        return kb.is_open

    delays = [0, 0, 0.001, 0.002, 0.005, 0.01]
    assert [asyncio.run(cancelled_close(d)) for d in delays] == [False] * len(delays)
    assert sessions(url) == 0


def test_a_write_cancelled_while_its_timeout_is_put_back_leaves_the_searchs(
        make_kb: MakeKb, monkeypatch: pytest.MonkeyPatch) -> None:
    """A write raises its connection's statement timeout to the ingest's and puts the search's
    back at the end. A cancellation that came while that reset ran cancelled it on the server,
    and the connection went back to the pool idle with the ingest's 10 minutes (one storm of
    the test above in about fifty). Here the reset is slowed so that the cancellation lands
    in it."""
    kb = make_kb()
    monkeypatch.setattr(pools, "_TIMEOUT", "SELECT set_config('statement_timeout', %s, false), "
                        "pg_sleep(0.3)")

    async def cancelled_in_the_reset() -> list[str]:
        async def write() -> None:
            async with kb._pools.awriting():
                pass

        task = asyncio.ensure_future(write())
        await asyncio.sleep(0.15)  # the body is done: the reset sleeps on the server
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        timeouts = await asyncio.wait_for(pool_timeouts(kb), timeout=30)
        await kb.aclose()
        return timeouts

    assert set(asyncio.run(cancelled_in_the_reset())) == {"10s"}


def test_a_write_stopped_by_ctrl_c_while_its_timeout_is_put_back_leaves_the_searchs(
        make_kb: MakeKb, monkeypatch: pytest.MonkeyPatch) -> None:
    """The sync twin of the test above: a Ctrl-C (SIGINT) while the reset runs. psycopg
    cancels the statement on the server and raises KeyboardInterrupt; the connection went back
    to the pool idle, with the ingest's 10 minutes for every search that took it next."""
    kb = make_kb()
    monkeypatch.setattr(pools, "_TIMEOUT", "SELECT set_config('statement_timeout', %s, false), "
                        "pg_sleep(0.3)")
    ctrl_c = threading.Timer(0.15, signal.pthread_kill,  # the body is done: the reset sleeps
                             (threading.main_thread().ident, signal.SIGINT))
    ctrl_c.start()
    with pytest.raises(KeyboardInterrupt):
        with kb._pools.writing():
            pass
        time.sleep(5)  # not reached: the signal comes in the reset
    ctrl_c.join()
    assert sync_pool_timeouts(kb) == {"10s"}


def test_a_write_stopped_by_ctrl_c_in_its_first_statement_leaves_the_searchs_timeout(
        make_kb: MakeKb, monkeypatch: pytest.MonkeyPatch) -> None:
    """A Ctrl-C while the write's first statement (the one that raises the timeout) runs: no
    connection goes back idle with the ingest's 10 minutes (the statement is cancelled, and a
    connection whose first statement was stopped after it ran is closed)."""
    kb = make_kb()
    monkeypatch.setattr(pools, "_WRITE_TIMEOUT", pools._WRITE_TIMEOUT + ", pg_sleep(0.3)")
    ctrl_c = threading.Timer(0.15, signal.pthread_kill,
                             (threading.main_thread().ident, signal.SIGINT))
    ctrl_c.start()
    with pytest.raises(KeyboardInterrupt):
        with kb._pools.writing():
            time.sleep(5)  # not reached: the signal comes in the first statement
    ctrl_c.join()
    assert sync_pool_timeouts(kb) == {"10s"}
