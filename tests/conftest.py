"""Shared fixtures: a real PostgreSQL + pgvector (embedded unless KB_TEST_DATABASE_URL is set).

Every knowledge base a test opens gets a database of its own (the embedding dimension is
fixed per database), created on the session's server.
"""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

from kb_retriever import HashingEmbedder, KnowledgeBase, MiniLMEmbedder, Settings

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE_KB = ROOT / "examples" / "kb"

# Tests never read the developer's environment: only explicit settings.
for _key in [k for k in os.environ if k.startswith("KB_") and k != "KB_TEST_DATABASE_URL"]:
    del os.environ[_key]

_citus_build: subprocess.Popen[bytes] | None = None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The tests that need a Citus cluster run last, and its build starts now in the
    background at the lowest CPU priority (tests/citus/cluster.py): on a new machine (CI) it
    then fills the cores that the rest of the suite leaves idle."""
    global _citus_build
    citus = [item for item in items if item.get_closest_marker("citus")]
    if not citus:
        return
    items[:] = [item for item in items if not item.get_closest_marker("citus")] + citus
    from tests.citus.cluster import start_build

    _citus_build = start_build()


def pytest_sessionfinish(session: pytest.Session) -> None:
    if _citus_build is not None:
        from tests.citus.cluster import stop_build

        stop_build(_citus_build)


@pytest.fixture(scope="session")
def pg_server_url() -> Iterator[str]:
    url = os.environ.get("KB_TEST_DATABASE_URL")
    if url:
        yield url
        return
    from kb_retriever.store.embedded import start_embedded

    # Not under pytest's basetemp: concurrent pytest runs rotate (delete) old basetemps.
    home = Path(tempfile.mkdtemp(prefix="kb-test-home-"))
    # The server stops when this process exits (pgserver's atexit handler). Registered before
    # the server starts, this removal runs after that handler (atexit is last in, first out):
    # otherwise every run would leave a ~400 MB data directory behind.
    atexit.register(shutil.rmtree, home, ignore_errors=True)
    yield start_embedded(home)


@pytest.fixture(scope="session")
def new_database(pg_server_url: str) -> Iterator[Callable[[], str]]:
    """A factory of fresh, empty databases on the session's server; returns their URLs."""
    created: list[str] = []

    def make() -> str:
        name = f"kbtest_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(pg_server_url, autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        created.append(name)
        return make_conninfo(pg_server_url, dbname=name)

    yield make
    if not os.environ.get("KB_TEST_DATABASE_URL"):
        return  # the embedded server's data directory goes at exit: dropping hundreds took ~45 s
    with psycopg.connect(pg_server_url, autocommit=True) as conn:
        for name in created:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


@pytest.fixture(scope="session")
def minilm() -> MiniLMEmbedder:
    return MiniLMEmbedder()


@pytest.fixture
def make_kb(new_database: Callable[[], str]) -> Iterator[Callable[..., KnowledgeBase]]:
    """Open a KnowledgeBase on a fresh database (hashing embedder unless one is given)."""
    opened: list[KnowledgeBase] = []

    def make(embedder: Any = None, settings: Settings | None = None, **kw: Any) -> KnowledgeBase:
        kb = KnowledgeBase(settings or Settings(), embedder=embedder or HashingEmbedder(256),
                           database_url=new_database(), **kw)
        opened.append(kb.open())
        return kb

    yield make
    for kb in opened:
        kb.close()


@pytest.fixture(scope="session")
def example_kb(new_database: Callable[[], str], minilm: MiniLMEmbedder) -> Iterator[KnowledgeBase]:
    """examples/kb/ ingested with the default embedder, shared read-only by many tests."""
    kb = KnowledgeBase(Settings(), embedder=minilm, database_url=new_database()).open()
    report = kb.ingest([EXAMPLE_KB])
    assert not report.failed, report.failed
    yield kb
    kb.close()


def fk_lookups_by_path_index(url: str, *, documents: int) -> int:
    """Index entries read through kb_documents' (tenant, project, source_path) index, once the
    statistics of ``documents`` inserted documents have arrived (writers' statistics are flushed
    when their backends exit or go idle, so close them first)."""
    with psycopg.connect(url, autocommit=True) as conn:
        for _ in range(100):
            row = conn.execute(
                "SELECT s.idx_tup_read, t.n_tup_ins FROM pg_stat_user_indexes s "
                "JOIN pg_stat_user_tables t ON t.relid = s.relid "
                "WHERE s.indexrelname = 'kb_documents_tenant_id_project_key_source_path_key'"
            ).fetchone()
            if row and row[1] >= documents:
                return int(row[0])
            conn.execute("SELECT pg_stat_clear_snapshot()")
            time.sleep(0.1)
    raise AssertionError("the writers' statistics did not arrive")
