"""Subprocess helper: open the embedded knowledge base of HOME, fork a child
(``multiprocessing``, the fork start method) that searches with it, and return without
joining the child, as a script that starts workers and ends would. The child then watches the
server it used for a few seconds, while the parent's exit hooks run, and writes to OUT whether
it still runs (``kept``) or was stopped under it (``stopped``).

usage: fork_worker.py HOME OUT
"""

from __future__ import annotations

import multiprocessing
import sys
import time
from pathlib import Path
from typing import Any

from kb_retriever import HashingEmbedder, KnowledgeBase, Settings
from kb_retriever.store import lifecycle

home, out = Path(sys.argv[1]), Path(sys.argv[2])


def child(kb: KnowledgeBase, searched: Any, pgdata: Path) -> None:
    kb.search("redis cache")  # this process uses the server now
    postmaster = lifecycle.postmaster_pid(pgdata)
    searched.set()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and lifecycle.postmaster_pid(pgdata) == postmaster:
        time.sleep(0.1)
    out.write_text("kept" if lifecycle.postmaster_pid(pgdata) == postmaster else "stopped")


# The workers' machinery first, as an application sets it up: its exit hook (which joins the
# children) is registered before the knowledge base's, so it runs after it.
context = multiprocessing.get_context("fork")
searched = context.Event()
kb = KnowledgeBase(Settings(home=home), embedder=HashingEmbedder(64)).open()
kb.add_documents([{"id": "a", "text": "# Redis\n\nredis is the cache"}])
with kb._pools.session() as session:
    pgdata = Path(str(session.conn.execute("SHOW data_directory").fetchone()[0]))
context.Process(target=child, args=(kb, searched, pgdata)).start()
assert searched.wait(60)
print("FORKED", flush=True)  # and return: the exit hooks run, then multiprocessing joins
