"""Many writers at once: processes × threads writing, deleting and reading shared ids over a
project of more than 10,000 chunks. No operation fails, and afterwards every document is one
whole version, and the statistics equal a recount."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest

from kb_retriever import HashingEmbedder, KnowledgeBase, Settings

from .checks import assert_statistics_exact, assert_whole_versions
from .storm_corpus import DIM, SHARED_IDS, background, version_text

pytestmark = [pytest.mark.db, pytest.mark.slow]

HELPERS = Path(__file__).resolve().parent / "helpers"
PROJECT = "storm"
OPS = 40  # per thread


def test_storm_of_writers_and_readers(new_database: Callable[[], str]) -> None:
    url = new_database()
    with KnowledgeBase(Settings(), embedder=HashingEmbedder(DIM), database_url=url,
                       project=PROJECT) as kb:
        kb.add_documents(background(520, 20))
        with psycopg.connect(url) as conn:
            row = conn.execute("SELECT count(*) FROM kb_chunks").fetchone()
        assert row is not None and row[0] >= 10_000
    procs = [subprocess.Popen([sys.executable, str(HELPERS / "storm_worker.py"), url, PROJECT,
                               str(seed), "4", str(OPS)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for seed in (1, 2)]
    reports = []
    for proc in procs:
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err[-3000:]
        reports.append(json.loads(out.strip().splitlines()[-1]))
    print(reports)
    failures = [f for r in reports for f in r["failures"]]
    done = sum(n for r in reports for n in r["counts"].values())
    assert done == 2 * 4 * OPS
    assert not failures, f"{len(failures)} of {done} failed: {failures[:5]}"
    assert_whole_versions(url, PROJECT, SHARED_IDS)
    assert_statistics_exact(url)


def test_writers_of_different_documents(new_database: Callable[[], str]) -> None:
    """Four threads, each re-adding only its own document, over words they share."""
    import threading

    url = new_database()
    failures: list[str] = []
    with KnowledgeBase(Settings(pool_max_size=5), embedder=HashingEmbedder(DIM),
                       database_url=url, project=PROJECT) as kb:
        kb.add_documents(background(100, 10))

        def writer(doc_id: str) -> None:
            for i in range(25):
                try:
                    kb.add_documents([{"id": doc_id, "text": version_text(doc_id, i % 4)}])
                except Exception as exc:  # every failure counts
                    failures.append(f"{type(exc).__name__}: {exc}")

        threads = [threading.Thread(target=writer, args=(f"own-{i}",)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=300)
    assert not failures, f"{len(failures)} of 100 failed: {failures[:3]}"
    assert_statistics_exact(url)


def test_a_writer_killed_mid_storm_leaves_whole_documents(new_database: Callable[[], str]) -> None:
    """SIGKILL one of two storming processes: every document is one whole version, and the
    statistics equal a recount (a killed transaction leaves nothing, its log row included)."""
    url = new_database()
    with KnowledgeBase(Settings(), embedder=HashingEmbedder(DIM), database_url=url,
                       project=PROJECT) as kb:
        kb.add_documents(background(40, 10))
    procs = [subprocess.Popen([sys.executable, str(HELPERS / "storm_worker.py"), url, PROJECT,
                               str(seed), "4", str(ops)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for seed, ops in ((3, 1000), (4, 60))]
    time.sleep(4.0)  # both well into their storms
    procs[0].send_signal(signal.SIGKILL)
    out, err = procs[1].communicate(timeout=600)
    procs[0].wait(timeout=60)
    assert procs[1].returncode == 0, err[-3000:]
    assert procs[0].returncode == -signal.SIGKILL
    assert not json.loads(out.strip().splitlines()[-1])["failures"]
    assert_whole_versions(url, PROJECT, SHARED_IDS)
    assert_statistics_exact(url)
