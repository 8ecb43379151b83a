"""The LangChain examples run end to end against the test database (examples/kb is ingested
already, so their own ingest is a no-op)."""

from __future__ import annotations

import pytest

from kb_retriever import KnowledgeBase

from ..examples import load_example

pytestmark = pytest.mark.db

def test_langchain_chain_example(example_kb: KnowledgeBase, capsys: pytest.CaptureFixture[str],
                                 ) -> None:
    out = load_example("langchain_chain").main(database_url=example_kb.url)
    assert out["answer"].startswith("No. Memcached was rejected")
    assert "## Context" in out["context"] and "REJECTED APPROACHES" in out["context"]
    assert "sources:" in capsys.readouterr().out


def test_agent_tool_example(example_kb: KnowledgeBase) -> None:
    message = load_example("agent_tool").main(database_url=example_kb.url)
    assert message.tool_call_id == "call_1"
    assert "## Context" in message.content
    primary = [d for d in message.artifact if d.metadata["kb"]["origin"] == "primary"]
    assert len(primary) == 3
    assert {d.metadata["kb"]["document"]["canonical_type"] for d in primary} <= {
        "runbook", "standard"}


def test_langchain_vectorstore_example(new_database, capsys: pytest.CaptureFixture[str]) -> None:
    # A database of its own: the example adds 57 splits, which would move the shared
    # example_kb's lexeme statistics.
    out = load_example("langchain_vectorstore").main(database_url=new_database())
    assert out["answer"].startswith("Redis cluster")
    top = out["docs"][0].metadata["kb"]["document"]
    assert top["slug"] == "dec-cache-v2" and top["canonical_status"] == "accepted"
    assert out["top"][0].metadata["source"] == "dec-cache-v2.md"
    assert "splits stored" in capsys.readouterr().out
