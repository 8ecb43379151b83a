"""Every example runs after every other, twice, on one database (issue 23: the LlamaIndex
examples collided on slugs when run one after the other)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from kb_retriever import MiniLMEmbedder

from .examples import load_example

pytestmark = [pytest.mark.db, pytest.mark.slow]


def _runs(url: str, minilm: MiniLMEmbedder) -> dict[str, Callable[[], Any]]:
    return {
        "demo": lambda: load_example("demo").main(),
        "agent_tool": lambda: load_example("agent_tool").main(database_url=url),
        "langchain_chain": lambda: load_example("langchain_chain").main(database_url=url),
        "langchain_vectorstore": lambda: load_example("langchain_vectorstore").main(
            database_url=url),
        "llamaindex_query_engine": lambda: load_example("llamaindex_query_engine").main(
            url, embedder=minilm),
        "llamaindex_vector_store": lambda: load_example("llamaindex_vector_store").main(
            database_url=url, embedder=minilm),
    }


def test_every_example_after_every_other_twice(new_database: Callable[[], str],
                                               minilm: MiniLMEmbedder,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    url = new_database()
    monkeypatch.setenv("KB_DATABASE_URL", url)  # the demo reads its database from the env
    runs = _runs(url, minilm)
    order = list(runs) + list(reversed(runs))  # each after each other, each twice
    results = {}
    for name in order:
        results[name] = runs[name]()
    assert results["demo"] == 0 and results["llamaindex_query_engine"] == 0
    assert results["langchain_vectorstore"]["answer"].startswith("Redis cluster")
    top = results["llamaindex_vector_store"].source_nodes[0].node.metadata["kb"]["document"]
    assert top["slug"] == "dec-cache-v2"
