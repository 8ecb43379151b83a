"""``search_sql()`` (``search --sql``) prints exactly the statements a search runs."""

from __future__ import annotations

import re

import psycopg
import pytest

from kb_retriever import HashingEmbedder, Settings

pytestmark = pytest.mark.db

DOCS = [
    {"id": "dec-cache", "text": "# Cache\n\nWe standardise on Redis for the shared cache.",
     "metadata": {"slug": "dec-cache", "type": "decision", "status": "accepted",
                  "related": ["[[run-redis]]"]}},
    {"id": "run-redis", "text": "# Redis runbook\n\nRestart the Redis cluster node by node.",
     "metadata": {"slug": "run-redis", "type": "runbook", "status": "accepted"}},
    {"id": "rej-memcached", "text": "# Memcached\n\nWe rejected Memcached for the cache.",
     "metadata": {"slug": "rej-memcached", "type": "rejected-approach", "status": "accepted"}},
]


def _executed(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The text of every statement the search's cursors execute from now on."""
    seen: list[str] = []
    original = psycopg.Cursor.execute

    def execute(self, query, params=None, **kw):  # type: ignore[no-untyped-def]
        text = query if isinstance(query, str) else query.as_string(self)
        if "kb_" in text and "set_config" not in text:
            seen.append(text)
        return original(self, query, params, **kw)

    monkeypatch.setattr(psycopg.Cursor, "execute", execute)
    return seen


def _printed(text: str) -> list[str]:
    return [s.strip().removesuffix(";") for s in re.split(r"^-- .*$\n", text, flags=re.M)
            if s.strip()]


def test_search_sql_prints_the_statements_that_run(make_kb, monkeypatch):
    kb = make_kb(embedder=HashingEmbedder(64), settings=Settings(parallel_legs=False))
    kb.add_documents(DOCS)
    kb.add_synonyms("cache", ["caching"])
    kb.clear_caches()
    executed = _executed(monkeypatch)
    text = kb.search_sql("which cache layer, redis or memcached?", filters={"tags": []})
    printed = [s.strip() for s in _printed(text)]
    assert printed == [s.strip() for s in executed]
    stages = re.findall(r"^-- (\w+)", text, flags=re.M)
    assert stages[:5] == ["synonyms", "lexeme_stats", "fts_configs", "scope_stats",
                          "hybrid_legs"] and "graph_hop_1" in stages  # both legs: one statement
    # a search with nothing cached runs the same statements
    executed.clear()
    kb.clear_caches()
    kb.search("which cache layer, redis or memcached?", filters={"tags": []})
    assert [s.strip() for s in executed] == printed
