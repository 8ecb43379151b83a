"""``close()`` closes both pools, whatever the async pool's event loop is doing."""

from __future__ import annotations

import asyncio
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
