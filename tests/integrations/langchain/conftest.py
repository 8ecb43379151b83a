"""Fixtures of the LangChain adapter tests.

Async tests run in the session's event loop (pyproject: asyncio_default_test_loop_scope).
``async_example_kb`` still opens a second handle on the same database with ``async with``, so
the async lifecycle (open, search, close) is exercised the way users write it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest_asyncio

from kb_retriever import KnowledgeBase


@pytest_asyncio.fixture(loop_scope="session")
async def async_example_kb(example_kb: KnowledgeBase) -> AsyncIterator[KnowledgeBase]:
    """examples/kb (already ingested by ``example_kb``), opened in the test's event loop."""
    kb = KnowledgeBase(example_kb.settings, embedder=example_kb.embedder,
                       database_url=example_kb.url, tenant=example_kb.tenant,
                       project=example_kb.project)
    async with kb:
        yield kb
