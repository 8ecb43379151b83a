"""Fixtures for the LlamaIndex adapter: examples/kb/ in a real PostgreSQL, hashing embedder.

The package directory has an ``__init__.py`` on purpose: without it pytest would put this
folder on ``sys.path`` and ``llama_index`` would resolve to the tests instead of the library.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from pathlib import Path

import pytest

from kb_retriever import Embedder, HashingEmbedder, KnowledgeBase, Settings

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE_KB = ROOT / "examples" / "kb"


class CountingEmbedder:
    """A real embedder that counts its calls (to prove a precomputed embedding was used)."""

    def __init__(self, inner: Embedder) -> None:
        self.inner = inner
        self.query_calls = 0
        self.document_calls = 0

    @property
    def model_id(self) -> str:
        return self.inner.model_id

    @property
    def dimension(self) -> int:
        return self.inner.dimension

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        self.document_calls += 1
        return self.inner.embed_documents(texts)

    def embed_query(self, text: str) -> list[float]:
        self.query_calls += 1
        return self.inner.embed_query(text)


@pytest.fixture(scope="session")
def counting_embedder() -> CountingEmbedder:
    return CountingEmbedder(HashingEmbedder(256))


@pytest.fixture(scope="session")
def kb(new_database: Callable[[], str], counting_embedder: CountingEmbedder
       ) -> Iterator[KnowledgeBase]:
    """examples/kb/ ingested with a 256-d hashing embedder; read-only for the tests."""
    with KnowledgeBase(Settings(), embedder=counting_embedder,
                       database_url=new_database()) as base:
        report = base.ingest([EXAMPLE_KB])
        assert not report.failed, report.failed
        yield base


@pytest.fixture
async def akb(kb: KnowledgeBase) -> AsyncIterator[KnowledgeBase]:
    """The shared knowledge base for one async test.

    The async pool belongs to the event loop that opened it: tests using this fixture run in
    the session loop (``@pytest.mark.asyncio(loop_scope="session")``, like the fixtures), and
    the pool is closed after each of them so none outlives its loop.
    """
    yield kb
    await kb.aclose()
    kb.open()
