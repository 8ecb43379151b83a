"""Faults: a dropped database, an ingest killed with SIGKILL, two ingests racing, and an
embedded server left behind by a killed process."""

from __future__ import annotations

import asyncio
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from kb_retriever import HashingEmbedder, KnowledgeBase, Settings
from kb_retriever.errors import (
    IngestInterruptedError,
    QueryTimeoutError,
    StoreError,
    UnavailableError,
)
from kb_retriever.ingest import parse_document

from ._util import HELPERS, PYTHON, canonical, doc_chunks
from ._util import ready as _ready
from ._util import server_process as _server

pytestmark = pytest.mark.db

GOOD = "# Cache\n\nRedis is the cache layer of the platform.\n"


def _terminate_backends(admin_url: str, dbname: str) -> int:
    with psycopg.connect(admin_url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = %s AND pid <> pg_backend_pid()", [dbname],
        ).fetchall()
    return len(rows)


# --- (a) the database goes away --------------------------------------------------------

def test_search_recovers_after_backends_are_terminated(
        make_kb: Callable[..., KnowledgeBase], pg_server_url: str, tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text(GOOD)
    kb = make_kb(settings=Settings(pool_min_size=2, pool_max_size=4))
    kb.ingest([tmp_path])
    dbname = conninfo_to_dict(kb.url)["dbname"]

    async def asearch_twice() -> list[int]:
        try:
            out = [len((await kb.asearch("redis cache")).primary)]
            assert _terminate_backends(pg_server_url, dbname) >= 1
            out.append(len((await kb.asearch("redis cache")).primary))
            return out
        finally:
            await kb.aclose()  # the async pool belongs to this event loop

    for _ in range(3):
        assert kb.search("redis cache").primary
        assert _terminate_backends(pg_server_url, dbname) >= 1
        assert kb.search("redis cache").primary  # the read is retried on a fresh connection
    assert asyncio.run(asearch_twice()) == [1, 1]


def test_writes_start_on_live_connections_after_backends_are_terminated(
        make_kb: Callable[..., KnowledgeBase], pg_server_url: str, tmp_path: Path) -> None:
    """The pools do not check a connection on checkout (searches retry instead); writes, which
    are not retried, start on a connection that answered their first statement."""
    (tmp_path / "a.md").write_text(GOOD)
    kb = make_kb(settings=Settings(pool_min_size=2, pool_max_size=4))
    kb.ingest([tmp_path])
    dbname = conninfo_to_dict(kb.url)["dbname"]
    assert _terminate_backends(pg_server_url, dbname) >= 1
    kb.add_synonyms("redis", ["valkey"])
    assert _terminate_backends(pg_server_url, dbname) >= 1
    (tmp_path / "b.md").write_text("# B\n\nvalkey replaced redis for sessions.\n")
    report = kb.ingest([tmp_path])
    assert not report.failed and len(report.added) == 1


def test_an_ingest_that_loses_its_connection_says_what_it_saved(
        make_kb: Callable[..., KnowledgeBase], pg_server_url: str, tmp_path: Path) -> None:
    """The connection dropped between two files: the error carries the report of the files
    committed before it, names the file it was writing and counts the ones not read; running
    the ingest again completes it."""
    for n in range(6):
        (tmp_path / f"f{n}.md").write_text(f"# File {n}\n\nRedis note number {n}.\n")
    kb = make_kb()
    dbname = conninfo_to_dict(kb.url)["dbname"]

    def cut_at_the_fourth(i: int, total: int, rel: str) -> None:
        if i == 3 and rel:
            assert _terminate_backends(pg_server_url, dbname) >= 1

    with pytest.raises(IngestInterruptedError) as caught:
        kb.ingest([tmp_path], progress=cut_at_the_fourth)
    err = caught.value
    assert isinstance(err, UnavailableError) and err.remaining == 2
    assert len(err.report.added) == 3 and err.interrupted not in err.report.added
    assert err.interrupted in str(err) and "3 added" in str(err)
    again = kb.ingest([tmp_path])
    assert sorted(again.unchanged) == sorted(err.report.added) and len(again.added) == 3
    assert not again.failed


def test_the_cli_ingest_json_says_what_an_interrupted_ingest_saved(
        make_kb: Callable[..., KnowledgeBase], pg_server_url: str, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """``ingest --json`` printed nothing when the connection dropped half-way: the files it
    had committed were in the error's report only, which the CLI dropped (stderr had a line).
    The exit code is 1, files not ingested, as when some failed; it was 2, which says "bad
    input or configuration", on the CLI's contract."""
    from kb_retriever import cli

    for n in range(6):
        (tmp_path / f"f{n}.md").write_text(f"# File {n}\n\nRedis note number {n}.\n")
    url = make_kb().url
    dbname = conninfo_to_dict(url)["dbname"]

    def cut_at_the_fourth(i: int, total: int, rel: str) -> None:
        if i == 3 and rel:
            assert _terminate_backends(pg_server_url, dbname) >= 1

    monkeypatch.setattr(cli, "_progress", lambda label="ingest": cut_at_the_fourth)
    monkeypatch.setenv("KB_EMBEDDER", "hashing")
    code = cli.main(["--database-url", url, "ingest", str(tmp_path), "--json"])
    out, err = capsys.readouterr()
    report = json.loads(out)
    assert code == 1 and len(report["added"]) == 3 and report["remaining"] == 2
    assert report["interrupted"] not in report["added"] and "3 added" in err


def test_a_statement_past_its_timeout_is_a_query_timeout_error(
        make_kb: Callable[..., KnowledgeBase], tmp_path: Path) -> None:
    """A search or write that waits past its statement timeout (here behind another session's
    lock on the chunks) raises QueryTimeoutError, a StoreError a caller can tell
    apart from a lost server; the write saved nothing, and both work once the lock is gone."""
    (tmp_path / "a.md").write_text(GOOD)
    kb = make_kb(settings=Settings(statement_timeout_ms=300, ingest_statement_timeout_ms=300))
    kb.ingest([tmp_path])
    doc = {"id": "later", "text": "Valkey replaced Redis for the sessions."}
    with psycopg.connect(kb.url) as blocker:
        blocker.execute("LOCK TABLE kb_chunks IN ACCESS EXCLUSIVE MODE")
        with pytest.raises(QueryTimeoutError, match="statement_timeout") as caught:
            kb.search("redis cache")
        assert isinstance(caught.value, StoreError) and not isinstance(caught.value,
                                                                       UnavailableError)
        with pytest.raises(QueryTimeoutError):
            asyncio.run(kb.asearch("redis cache"))
        with pytest.raises(QueryTimeoutError):
            kb.add_documents([doc])
    assert kb.search("redis cache").primary
    assert kb.get_by_ids(["later"]) == []
    kb.add_documents([doc])
    assert [d.id for d in kb.get_by_ids(["later"])] == ["later"]


class _Proxy:
    """A TCP front for the server's socket that can be cut, to make the server unreachable."""

    def __init__(self, target: dict[str, str]) -> None:
        host, port = target.get("host", "localhost"), int(target.get("port") or 5432)
        self.family = socket.AF_UNIX if host.startswith("/") else socket.AF_INET
        self.address = f"{host}/.s.PGSQL.{port}" if host.startswith("/") else (host, port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.sockets: list[socket.socket] = []
        self.alive = True
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while self.alive:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            if not self.alive:
                client.close()
                return
            upstream = socket.socket(self.family, socket.SOCK_STREAM)
            upstream.connect(self.address)
            self.sockets += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(a: socket.socket, b: socket.socket) -> None:
        try:
            while data := a.recv(65536):
                b.sendall(data)
        except OSError:
            pass
        finally:
            for s in (a, b):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def cut(self) -> None:
        self.alive = False
        try:  # wakes the accept() blocked in the thread; close() alone would not (Linux)
            self.listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.listener.close()
        for s in self.sockets:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()


def test_unreachable_server_gives_a_store_error(new_database: Callable[[], str],
                                                tmp_path: Path) -> None:
    url = new_database()
    proxy = _Proxy(conninfo_to_dict(url))
    via_proxy = make_conninfo(url, host="127.0.0.1", port=str(proxy.port))
    (tmp_path / "a.md").write_text(GOOD)
    # KB_POOL_TIMEOUT_S bounds how long a caller waits for a connection; 3 s keeps the test
    # quick and the error is the same.
    kb = KnowledgeBase(Settings(pool_min_size=1, pool_max_size=2, pool_timeout_s=3),
                       embedder=HashingEmbedder(64), database_url=via_proxy).open()
    try:
        kb.ingest([tmp_path])
        assert kb.search("redis cache").primary
        proxy.cut()
        with pytest.raises(StoreError) as err:
            kb.search("redis cache")
        assert "database" in str(err.value) or "connection" in str(err.value)
    finally:
        kb.close()


# --- (b) SIGKILL during ingest ----------------------------------------------------------

N_DOCS = 6


def _write_version(folder: Path, version: int) -> None:
    folder.mkdir(exist_ok=True)
    for i in range(N_DOCS):
        sections = "\n\n".join(
            f"## Section {s}\n\nVersion {version} of document {i}, section {s}: "
            + " ".join(f"w{version}x{i}x{s}x{k}" for k in range(30))
            for s in range(2 + version)
        )
        deps = f'["[[doc-{(i + version) % N_DOCS}]]"]'
        (folder / f"doc-{i}.md").write_text(canonical(
            f"doc-{i}", "decision", f"Document {i} v{version}", sections,
            extra={"depends_on": deps},
        ))


Version = tuple[list[str], list[str]]  # chunk texts, depends_on targets


def _expected(folder: Path) -> dict[str, Version]:
    out = {}
    for p in sorted(folder.glob("*.md")):
        draft = parse_document(p, root=folder, settings=Settings())
        deps = sorted(e.to_slug for e in draft.edges if e.edge_type == "depends_on")
        out[p.name] = ([c.text for c in draft.chunks], deps)
    return out


def _edges(url: str) -> dict[str, list[str]]:
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT d.source_path, e.to_slug FROM kb_edges e JOIN kb_documents d "
            "ON d.tenant_id = e.tenant_id AND d.id = e.source_document_id "
            "WHERE e.edge_type = 'depends_on' ORDER BY 1, 2"
        ).fetchall()
    out: dict[str, list[str]] = {}
    for path, to in rows:
        out.setdefault(path, []).append(to)
    return out


def _worker(url: str, folder: Path, mode: str = "none", n: int = 0) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [PYTHON, str(HELPERS / "ingest_worker.py"), url, str(folder), "t", "p", mode, str(n)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [
            os.environ.get("PYTHONPATH")]))},
    )


def _assert_consistent(url: str, old: dict[str, Version],
                       new: dict[str, Version]) -> dict[str, str]:
    """Each stored document is exactly its old or its new version (chunks and edges)."""
    stored = {path: texts for (_, _, path), texts in doc_chunks(url).items()}
    edges = _edges(url)
    state = {}
    for path, texts in stored.items():
        version = "new" if texts == new[path][0] else "old"
        assert texts == (new if version == "new" else old)[path][0], f"{path} is partial"
        assert edges.get(path, []) == (new if version == "new" else old)[path][1], path
        state[path] = version
    return state


KILL_POINTS = [("embed", 1), ("embed", 4), ("copy", 1), ("copy", 7), ("copy", 15),
               ("slow", 0), ("slow", 0)]


@pytest.mark.slow
def test_sigkilled_ingest_leaves_old_or_new_versions(new_database: Callable[[], str],
                                                     tmp_path: Path) -> None:
    rng = random.Random(8)
    outcomes = []
    for round_no, (mode, n) in enumerate(KILL_POINTS):
        url = new_database()
        folder = tmp_path / f"r{round_no}"
        _write_version(folder, 2)
        old = _expected(folder)
        assert _worker(url, folder).wait(timeout=120) == 0
        _write_version(folder, 3)
        new = _expected(folder)
        proc = _worker(url, folder, mode, n)
        if mode == "slow":
            assert proc.stdout is not None and proc.stdout.readline().startswith("STARTED")
            time.sleep(rng.uniform(0.05, 0.4))
            proc.send_signal(signal.SIGKILL)
        code = proc.wait(timeout=120)
        state = _assert_consistent(url, old, new)
        outcomes.append((mode, n, code, sorted(state.values())))
        if code == -signal.SIGKILL and mode != "slow":
            assert "old" in state.values(), (mode, n, state)  # it really died part-way
        # Re-running completes the ingest.
        rerun = _worker(url, folder)
        out, err = rerun.communicate(timeout=120)
        assert rerun.returncode == 0, err
        assert set(_assert_consistent(url, old, new).values()) == {"new"}
    killed = [o for o in outcomes if o[2] == -signal.SIGKILL]
    assert len(killed) >= len(KILL_POINTS) - 2, outcomes


# --- (c) two ingests at once -------------------------------------------------------------

@pytest.mark.slow
def test_concurrent_ingests_of_one_folder(new_database: Callable[[], str],
                                          tmp_path: Path) -> None:
    url = new_database()  # empty: the two processes also race the migrations
    folder = tmp_path / "kb"
    _write_version(folder, 2)
    old = _expected(folder)
    for version in (2, 3):
        if version == 3:
            _write_version(folder, 3)
        new = _expected(folder)
        procs = [_worker(url, folder) for _ in range(3)]
        for p in procs:
            out, err = p.communicate(timeout=180)
            assert p.returncode == 0, err
        state = _assert_consistent(url, old, new)
        assert set(state.values()) == {"new"} and len(state) == N_DOCS
        with psycopg.connect(url, autocommit=True) as conn:
            dup_docs = conn.execute(
                "SELECT count(*) FROM (SELECT 1 FROM kb_documents "
                "GROUP BY tenant_id, project_key, source_path HAVING count(*) > 1) x"
            ).fetchone()
            dup_chunks = conn.execute(
                "SELECT count(*) FROM (SELECT 1 FROM kb_chunks "
                "GROUP BY tenant_id, document_id, text_hash, chunk_order HAVING count(*) > 1) x"
            ).fetchone()
            n_edges = conn.execute("SELECT count(*) FROM kb_edges").fetchone()
        assert dup_docs == (0,) and dup_chunks == (0,) and n_edges == (N_DOCS,)


# --- (d) the embedded server after a killed process ------------------------------------

def _postmaster_pid(home: Path) -> int | None:
    pidfile = home / "pgdata" / "postmaster.pid"
    if not pidfile.exists():
        return None
    return int(pidfile.read_text().splitlines()[0])


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.fixture
def server_home() -> Iterator[Path]:
    # Not under tmp_path: run as root, the server's user must traverse the home's parents, and
    # pytest's are private (the server would then keep its data outside the home).
    base = Path(tempfile.mkdtemp(prefix="kb-faults-"))
    base.chmod(0o755)
    home = base / "home"
    yield home
    pid = _postmaster_pid(home)
    if pid and _alive(pid):  # the server these tests started
        os.kill(pid, signal.SIGTERM)
    shutil.rmtree(base, ignore_errors=True)


@pytest.mark.slow
def test_embedded_server_survives_killed_owners(server_home: Path) -> None:
    # 1. A process starts the server and is killed -9: the server is left running.
    first = _server(server_home, "hold")
    _ready(first)
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=30)
    # 2. The next process attaches to (or restarts) it.
    second = _server(server_home, "hold")
    _ready(second)
    second.send_signal(signal.SIGKILL)
    second.wait(timeout=30)
    # 3. The postmaster itself dies -9: postmaster.pid is left stale.
    pid = _postmaster_pid(server_home)
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    for _ in range(100):
        if not _alive(pid):
            break
        time.sleep(0.1)
    assert (server_home / "pgdata" / "postmaster.pid").exists()
    third = _server(server_home, "exit")
    _ready(third)
    assert third.wait(timeout=60) == 0
    # 4. A postmaster.pid naming some unrelated, dead process id.
    pidfile = server_home / "pgdata" / "postmaster.pid"
    if not pidfile.exists():
        lines = [str(2**22 - 7), str(server_home / "pgdata"), "0", "5432", "", "", "", ""]
        pidfile.write_text("\n".join(lines) + "\n")
    fourth = _server(server_home, "exit")
    _ready(fourth)
    assert fourth.wait(timeout=60) == 0


def test_reads_by_id_recover_after_backends_are_terminated(
        make_kb: Callable[..., KnowledgeBase], pg_server_url: str, tmp_path: Path) -> None:
    """A search reads again on a checked pool when the server dropped its connections; the
    reads by id did not: after a restart, each idle connection of the pool failed one call
    (``get_by_ids``, ``get_chunks``, ``list_documents``, and the vector stores' reads after
    their searches), sync and async."""
    (tmp_path / "a.md").write_text(GOOD)
    kb = make_kb(settings=Settings(pool_min_size=3, pool_max_size=4))
    kb.ingest([tmp_path])
    kb.search("redis cache")
    dbname = conninfo_to_dict(kb.url)["dbname"]
    for read in (lambda: kb.get_by_ids(["a.md"]), kb.list_documents,
                 lambda: kb.get_chunks(filters={"metadata": {"filename": "a.md"}})):
        assert _terminate_backends(pg_server_url, dbname) >= 1
        assert len(read()) == 1

    async def aread() -> int:
        try:
            await kb.aget_by_ids(["a.md"])
            assert _terminate_backends(pg_server_url, dbname) >= 1
            return len(await kb.aget_by_ids(["a.md"]))
        finally:
            await kb.aclose()

    assert asyncio.run(aread()) == 1
