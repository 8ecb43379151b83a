"""A borrowed pool whose owner resets each connection it gets back (``RESET ALL``): the
knowledge base's searches keep their HNSW settings."""

from __future__ import annotations

import pytest
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from kb_retriever import HashingEmbedder, KnowledgeBase

pytestmark = pytest.mark.db

DOCS = [{"id": f"d{i}", "text": f"note {i} about topic{i % 97} and thing{i % 13}"}
        for i in range(3000)]
QUERY = "topic5 thing7"


def _reset(conn) -> None:
    conn.execute("RESET ALL")
    conn.commit()


async def _areset(conn) -> None:
    await conn.execute("RESET ALL")
    await conn.commit()


def test_a_pool_that_resets_its_connections_keeps_the_searches_settings(new_database) -> None:
    """The settings were set once per connection: after the owner's reset every search ran
    with pgvector's defaults (``ef_search`` 40, no iterative scan), and a search of 50 hits
    read 302 candidates instead of 410 here."""
    url = new_database()
    with KnowledgeBase(embedder=HashingEmbedder(64), database_url=url) as own:
        own.add_documents(DOCS)
        wanted = own.search(QUERY, limit=50).meta["retrieval_stats"]["candidates_pre_threshold"]
    with ConnectionPool(url, min_size=1, max_size=2, reset=_reset, open=True) as pool:
        with KnowledgeBase(embedder=HashingEmbedder(64), pool=pool) as kb:
            got = [kb.search(QUERY, limit=50).meta["retrieval_stats"]
                   ["candidates_pre_threshold"] for _ in range(3)]
    assert got == [wanted] * 3, (got, wanted)

    async def searches() -> list[int]:
        async with AsyncConnectionPool(url, min_size=1, max_size=2, reset=_areset,
                                       open=False) as apool:
            async with KnowledgeBase(embedder=HashingEmbedder(64), async_pool=apool) as akb:
                return [(await akb.asearch(QUERY, limit=50)).meta["retrieval_stats"]
                        ["candidates_pre_threshold"] for _ in range(3)]

    import asyncio

    assert asyncio.run(searches()) == [wanted] * 3
