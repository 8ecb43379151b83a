"""Subprocess helper: ingest a folder, optionally killing itself with SIGKILL part-way.

usage: ingest_worker.py URL FOLDER TENANT PROJECT MODE N

MODE none  - ingest normally
     embed - SIGKILL on the N-th embed_documents call (between documents)
     copy  - SIGKILL on the N-th chunk row written inside a document's transaction
     slow  - sleep 0.05 s per embedded batch (the parent kills at a random moment)

The hooks live here, in the test helper; the library has none.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Sequence

from kb_retriever import HashingEmbedder, KnowledgeBase, Settings
from kb_retriever.store import writer

url, folder, tenant, project, mode, n = sys.argv[1:7]
limit = int(n)
calls = {"embed": 0, "copy": 0}
in_write = False


def die() -> None:
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)


class Embedder(HashingEmbedder):
    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        calls["embed"] += 1
        if mode == "embed" and calls["embed"] >= limit:
            die()
        if mode == "slow":
            time.sleep(0.05)
        return super().embed_documents(texts)


_write, _hash = writer.write_document, writer.text_hash


def write_document(*args: object, **kwargs: object) -> str:
    global in_write
    in_write = True
    try:
        return _write(*args, **kwargs)  # type: ignore[arg-type]
    finally:
        in_write = False


def text_hash(text: str) -> str:
    # Inside write_document this runs once per chunk row of the COPY, mid-transaction.
    if in_write:
        calls["copy"] += 1
        if mode == "copy" and calls["copy"] >= limit:
            die()
    return _hash(text)


writer.write_document, writer.text_hash = write_document, text_hash  # type: ignore[assignment]
# ingestion.py calls writer.write_document through the module, so the wrapper is used.

with KnowledgeBase(Settings(), embedder=Embedder(64), database_url=url) as kb:
    print("STARTED", flush=True)
    report = kb.ingest([folder], tenant=tenant, project=project)
print(report.summary(), flush=True)
sys.exit(1 if report.failed else 0)
