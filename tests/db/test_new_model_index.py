"""A new embedding model registered on a table that holds other models' chunks: its index is
built while writes go on."""

from __future__ import annotations

import threading
import time

import psycopg
import pytest

from kb_retriever import HashingEmbedder, KnowledgeBase

pytestmark = pytest.mark.db


def test_a_new_models_index_is_built_without_holding_writes_back(new_database) -> None:
    """The index was built in the registration's transaction, with a plain CREATE INDEX: it
    queued for a lock that conflicts with every write (while a writer's transaction was open),
    and the writes that came after queued behind it, for as long as the build's scan of the
    whole table took (tens of seconds at a million chunks)."""
    url = new_database()
    with KnowledgeBase(embedder=HashingEmbedder(64), database_url=url) as kb:
        kb.add_documents([{"id": f"d{i}", "text": f"note {i}"} for i in range(50)])
    opened: list[BaseException | KnowledgeBase] = []
    with psycopg.connect(url) as writer, psycopg.connect(url, autocommit=True) as watch:
        writer.execute("LOCK TABLE kb_chunks IN ROW EXCLUSIVE MODE")  # a write under way

        def open_new_model() -> None:
            try:
                opened.append(KnowledgeBase(embedder=HashingEmbedder(32),
                                            database_url=url).open())
            except BaseException as exc:  # noqa: BLE001 - reported below
                opened.append(exc)

        thread = threading.Thread(target=open_new_model)
        thread.start()
        deadline = time.monotonic() + 60
        while not watch.execute(  # the build waits for the open write
                "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE query ILIKE "
                "'CREATE INDEX%%kb_chunks_hnsw_2%%' AND wait_event IS NOT NULL)").fetchone()[0]:
            assert time.monotonic() < deadline and thread.is_alive(), opened
            time.sleep(0.02)
        with psycopg.connect(url) as later:  # a write that starts meanwhile goes through
            later.execute("SET lock_timeout = '3s'")
            later.execute("LOCK TABLE kb_chunks IN ROW EXCLUSIVE MODE")
            later.rollback()
        writer.rollback()
        thread.join(60)
    assert len(opened) == 1 and isinstance(opened[0], KnowledgeBase), opened
    with opened[0] as kb:
        with psycopg.connect(url, autocommit=True) as conn:
            assert conn.execute("SELECT indisvalid FROM pg_index WHERE indexrelid = "
                                "'kb_chunks_hnsw_2'::regclass").fetchone() == (True,)
        kb.add_documents([{"id": "n1", "text": "a note of the new model"}], project="p2")
        assert kb.search("new model note", project="p2").primary
