"""Helpers shared by the reliability tests: table checksums, corpus writers, server sessions
and pool settings."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psycopg

from kb_retriever import KnowledgeBase

HELPERS = Path(__file__).resolve().parent / "helpers"
PYTHON = sys.executable


def server_process(home: Path, mode: str = "exit") -> subprocess.Popen[str]:
    """``helpers/server_worker.py``: start (or attach to) ``home``'s server in a process of
    its own; it prints READY and its URL, then holds (``hold``) or exits (``exit``)."""
    return subprocess.Popen([PYTHON, str(HELPERS / "server_worker.py"), str(home), mode],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def ready(proc: subprocess.Popen[str]) -> str:
    """The URL a :func:`server_process` printed, or AssertionError with its stderr."""
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith("READY"):
        proc.kill()
        err = proc.stderr.read() if proc.stderr else ""
        raise AssertionError(f"server did not start: {line!r} {err}")
    return line.split(" ", 1)[1].strip()

# Row counts and an order-independent digest of every table that holds tenant data.
_TABLES = ("kb_documents", "kb_chunks", "kb_edges", "kb_synonyms", "kb_embedding_cache")


def snapshot(url: str, tenant: str | None = None) -> dict[str, tuple[int, str]]:
    """(row count, md5 of all rows) per table, of one tenant or all: equal = unchanged."""
    out = {}
    with psycopg.connect(url, autocommit=True) as conn:
        for table in _TABLES:
            row = conn.execute(
                f"SELECT count(*), coalesce(md5(string_agg(t::text, '|' ORDER BY t::text)), '') "
                f"FROM {table} t WHERE %(t)s::text IS NULL OR t.tenant_id = %(t)s",
                {"t": tenant},  # table names come from the constant above
            ).fetchone()
            assert row is not None
            out[table] = (int(row[0]), str(row[1]))
    return out


def doc_chunks(url: str) -> dict[tuple[str, str, str], list[str]]:
    """(tenant, project, source_path) -> chunk texts in order."""
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT d.tenant_id, d.project_key, d.source_path, c.text FROM kb_documents d "
            "LEFT JOIN kb_chunks c ON c.tenant_id = d.tenant_id AND c.document_id = d.id "
            "ORDER BY d.tenant_id, d.project_key, d.source_path, c.chunk_order"
        ).fetchall()
    out: dict[tuple[str, str, str], list[str]] = {}
    for tenant, project, path, text in rows:
        texts = out.setdefault((tenant, project, path), [])
        if text is not None:
            texts.append(text)
    return out


def canonical(slug: str, kind: str, title: str, body: str, *, status: str = "accepted",
              summary: str = "", extra: dict[str, Any] | None = None) -> str:
    """A markdown file with canonical frontmatter."""
    lines = ["---", f"slug: {slug}", f"type: {kind}", f"status: {status}"]
    if summary:
        lines.append(f'summary: "{summary}"')
    for key, value in (extra or {}).items():
        lines.append(f"{key}: {value}")
    lines += ["---", f"# {title}", "", body, ""]
    return "\n".join(lines)


def sessions(url: str) -> int:
    """The server sessions open on the database at ``url``, this one's excepted, once those
    closing have ended (a backend exits a moment after its client's goodbye)."""
    deadline = time.monotonic() + 5
    with psycopg.connect(url, autocommit=True) as conn:
        while True:
            row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = "
                               "current_database() AND pid <> pg_backend_pid()").fetchone()
            count = int(row[0]) if row else 0
            if count == 0 or time.monotonic() > deadline:
                return count
            time.sleep(0.1)


async def pool_timeouts(kb: KnowledgeBase) -> list[str]:
    """The ``statement_timeout`` of every connection of the loop's async pool."""
    pool = await kb._pools.asynchronous()
    conns = [await pool.getconn(timeout=5) for _ in range(pool.max_size)]
    try:
        return [(await (await c.execute("SHOW statement_timeout")).fetchone())[0] for c in conns]
    finally:
        for c in conns:
            await pool.putconn(c)


def sync_pool_timeouts(kb: KnowledgeBase) -> set[str]:
    """The ``statement_timeout`` of every connection of the sync pool (the twin of
    :func:`pool_timeouts`)."""
    pool = kb._pools.sync()
    conns = [pool.getconn(timeout=5) for _ in range(pool.max_size)]
    try:
        return {str(c.execute("SHOW statement_timeout").fetchone()[0]) for c in conns}
    finally:
        for c in conns:
            pool.putconn(c)
