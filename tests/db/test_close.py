"""``close()`` closes both pools, whatever the async pool's event loop is doing; and an event
loop that ends while the async pool is busy lets ``asyncio.run`` return."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

import psycopg
import pytest

from kb_retriever import HashingEmbedder, KnowledgeBase, Settings

pytestmark = pytest.mark.db


def _backends(url: str) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                           "AND pid <> pg_backend_pid()").fetchone()
    assert row is not None
    return int(row[0])


def _wait_for(url: str, n: int) -> int:
    for _ in range(50):
        if (have := _backends(url)) == n:
            return have
        import time

        time.sleep(0.1)
    return _backends(url)


def test_sync_close_after_asyncio_run_closes_the_async_pool(new_database: Callable[[], str]) -> None:
    url = new_database()
    kb = KnowledgeBase(Settings(), embedder=HashingEmbedder(32), database_url=url).open()
    asyncio.run(kb.asearch("anything"))  # opens the async pool on a loop that then ends
    assert _backends(url) >= 4  # sync and async pools, 2 each
    kb.close()
    assert _wait_for(url, 0) == 0


def test_sync_close_with_the_loop_alive(new_database: Callable[[], str]) -> None:
    url = new_database()
    kb = KnowledgeBase(Settings(), embedder=HashingEmbedder(32), database_url=url).open()
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(kb.asearch("anything"))
        kb.close()
        assert _wait_for(url, 0) == 0
    finally:
        loop.close()


def test_sync_close_inside_the_running_loop(new_database: Callable[[], str]) -> None:
    url = new_database()
    kb = KnowledgeBase(Settings(), embedder=HashingEmbedder(32), database_url=url).open()

    async def go() -> None:
        await kb.asearch("anything")
        kb.close()  # not aclose(): a sync close from async code

    asyncio.run(go())
    assert _wait_for(url, 0) == 0


def returns_within(seconds: float, work: Callable[[], None]) -> None:
    """Run ``work`` in a daemon thread: re-raise what it raised, fail if it is still running
    after ``seconds`` (a hang fails the test instead of stopping the suite)."""
    raised: list[BaseException] = []

    def run() -> None:
        try:
            work()
        except BaseException as exc:  # noqa: BLE001 - handed to the test's thread
            raised.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"still running after {seconds} s: asyncio.run did not return"
    if raised:
        raise raised[0]


def test_asyncio_run_of_searches_at_once_returns(new_database: Callable[[], str]) -> None:
    """Six searches at once in ``asyncio.run``, thirty times, each on a new knowledge base:
    every run returns. The async pool used to grow for them (2 connections to 4) and the loop
    could end with a connect under way, which psycopg_pool took for a failed one and retried:
    ``asyncio.run`` hung in its shutdown, within 20 runs here. Now the pool opens with all its
    connections and never grows."""
    url = new_database()
    docs = [{"id": f"d{i}", "text": f"# Note {i}\n\nredis cache layer note {i}"} for i in range(6)]
    with KnowledgeBase(Settings(), embedder=HashingEmbedder(32), database_url=url) as kb:
        kb.add_documents(docs)

    async def six(kb: KnowledgeBase) -> list[int]:
        found = await asyncio.gather(*(kb.asearch(f"redis cache layer {i}") for i in range(6)))
        return [len(r.primary) for r in found]

    def runs() -> None:
        for _ in range(30):
            with KnowledgeBase(Settings(), embedder=HashingEmbedder(32), database_url=url) as kb:
                assert all(asyncio.run(six(kb)))

    returns_within(120, runs)
