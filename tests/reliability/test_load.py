"""Load: hundreds of concurrent async searches over a small pool, without errors or leaks."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict

from kb_retriever import KnowledgeBase, Settings
from kb_retriever.models import SearchResult

pytestmark = pytest.mark.db

CLIENTS = 300
POOL_MAX = 4
WORDS = "redis cache kafka queue session store oauth token rotation ledger incident".split()


def _backends(admin_url: str, dbname: str) -> int:
    with psycopg.connect(admin_url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
            [dbname],
        ).fetchone()
    return int(row[0]) if row else -1


@pytest.mark.slow
def test_concurrent_asearch_over_a_small_pool(make_kb: Callable[..., KnowledgeBase],
                                              pg_server_url: str, tmp_path: Path) -> None:
    rng = random.Random(6)
    for i in range(40):
        words = " ".join(rng.choice(WORDS) for _ in range(60))
        (tmp_path / f"doc-{i}.md").write_text(f"# Doc {i}\n\n{words}\n")
    kb = make_kb(settings=Settings(pool_min_size=1, pool_max_size=POOL_MAX))
    assert len(kb.ingest([tmp_path]).added) == 40
    dbname = conninfo_to_dict(kb.url)["dbname"]
    queries = [" ".join(rng.sample(WORDS, 3)) for _ in range(CLIENTS)]
    peak = 0

    async def watch(stop: asyncio.Event) -> None:
        nonlocal peak
        while not stop.is_set():
            peak = max(peak, await asyncio.to_thread(_backends, pg_server_url, dbname))
            await asyncio.sleep(0.05)

    async def run() -> tuple[list[SearchResult | BaseException], dict[str, int]]:
        stop = asyncio.Event()
        watcher = asyncio.create_task(watch(stop))
        try:
            results = await asyncio.gather(
                *(kb.asearch(q, limit=5, project="default") for q in queries),
                return_exceptions=True,
            )
            stats = (await kb._pools.asynchronous()).get_stats()
        finally:
            stop.set()
            await watcher
            await kb.aclose()
        return results, stats

    results, stats = asyncio.run(run())
    errors = [r for r in results if isinstance(r, BaseException)]
    assert not errors, errors[:3]
    assert all(isinstance(r, SearchResult) and r.primary for r in results)
    # Sync + async pools: never more than their two maxima on the server.
    assert peak <= 2 * POOL_MAX, peak
    assert stats["pool_size"] <= POOL_MAX and stats.get("requests_waiting", 0) == 0, stats
    assert stats.get("requests_errors", 0) == 0, stats
    # Nothing leaked after close. A backend exits a moment after its client hangs up, so
    # give the server a little while to notice before counting.
    for _ in range(50):
        left = _backends(pg_server_url, dbname)
        if left == 0:
            break
        time.sleep(0.1)
    assert left == 0
