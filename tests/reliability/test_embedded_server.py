"""The embedded server is ours to run safely (issue: reliability and security).

Each test starts servers in subprocesses on a home of its own, as a user's processes would.
"""

from __future__ import annotations

import os
import shutil
import signal
import stat
import subprocess
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict

from kb_retriever.store import lifecycle
from kb_retriever.store.embedded import _locate, shared_buffers_mb, start_embedded
from kb_retriever.store.server_access import SYSTEM_DIR as _SYSTEM_DIR

from ._util import HELPERS, PYTHON
from ._util import ready as _ready
from ._util import server_process as _worker

pytestmark = [pytest.mark.db, pytest.mark.slow]


def _pgdata(url: str) -> Path:
    """The data directory of the server behind ``url`` (it may not be under the home)."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT current_setting('data_directory')").fetchone()
    assert row is not None
    return Path(row[0])


def _wait_gone(pgdata: Path, seconds: float = 20) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if lifecycle.postmaster_pid(pgdata) is None:
            return True
        time.sleep(0.2)
    return False


def _stop(pgdata: Path) -> int:
    """Stop the server of ``pgdata`` (a fast shutdown, as an operator or a crash would)."""
    pid = lifecycle.postmaster_pid(pgdata)
    assert pid is not None
    os.kill(pid, signal.SIGINT)
    assert _wait_gone(pgdata)
    return pid


@pytest.fixture
def base() -> Iterator[Path]:
    """A directory every user may traverse (like /tmp), removed with whatever it holds."""
    path = Path(tempfile.mkdtemp(prefix="kb-srv-"))
    path.chmod(0o755)
    yield path
    for pidfile in path.rglob(lifecycle.PIDFILE):
        pid = lifecycle.postmaster_pid(pidfile.parent)
        if pid:
            os.kill(pid, signal.SIGTERM)
            _wait_gone(pidfile.parent)  # a server still shutting down writes behind rmtree
    shutil.rmtree(path, ignore_errors=True)


def test_long_home_socket_is_private_and_a_password_is_required(base: Path) -> None:
    home = base / ("h" * 100) / "home"
    proc = _worker(home, "hold")
    try:
        url = _ready(proc)
        params = conninfo_to_dict(url)
        sock = Path(params["host"])
        st = sock.stat()
        assert stat.S_IMODE(st.st_mode) == 0o700
        assert st.st_uid == _pgdata(url).stat().st_uid  # owned by the server's user
        assert not params.get("password") and (home / "pgpass").exists()  # (the passfile's)
        assert stat.S_IMODE((home / "pgpass").stat().st_mode) == 0o600
        without_secret = {k: v for k, v in params.items() if k != "passfile"}
        with pytest.raises(psycopg.OperationalError, match="password"):
            psycopg.connect(**without_secret, passfile=os.devnull).close()
        with psycopg.connect(url, autocommit=True) as conn:
            hba = conn.execute("SELECT type, auth_method FROM pg_hba_file_rules").fetchall()
            listen = conn.execute("SELECT current_setting('listen_addresses')").fetchone()
        assert hba == [("local", "scram-sha-256")] and listen == ("",)
    finally:
        proc.kill()
        proc.wait()


def test_the_environments_pgpassword_and_pgport_do_not_reach_the_embedded_server(
        base: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """PGPASSWORD (exported for another database) took the place of the home's password
    file: every connection failed authentication. PGPORT moved the server's socket, so a
    process started without it could not reach the server its home held."""
    home = base / "home"
    monkeypatch.setenv("PGPASSWORD", "for-another-database")
    monkeypatch.setenv("PGPORT", "6543")
    first = _worker(home, "hold")
    try:
        _ready(first)
        monkeypatch.delenv("PGPORT")
        second = _worker(home)
        _ready(second)
        assert second.wait(timeout=60) == 0
    finally:
        first.kill()
        first.wait()


def test_start_changes_no_parent_permissions(base: Path) -> None:
    private = base / "private"
    private.mkdir(mode=0o700)
    middle = private / "team"
    middle.mkdir(mode=0o750)
    home = middle / "kb"
    proc = _worker(home, "hold")
    try:
        pgdata = _pgdata(_ready(proc))
    finally:
        proc.kill()
        proc.wait()
    assert stat.S_IMODE(private.stat().st_mode) == 0o700
    assert stat.S_IMODE(middle.stat().st_mode) == 0o750
    if pgdata.parent != home:  # root: the service user cannot pass the private parent
        assert str(pgdata).startswith(str(_SYSTEM_DIR))
        assert _wait_gone(pgdata)
        shutil.rmtree(pgdata.parent, ignore_errors=True)


def test_stale_pid_file_naming_a_live_process_signals_nothing(base: Path) -> None:
    home = base / "home"
    first = _worker(home, "hold")
    pgdata = _pgdata(_ready(first))
    first.kill()  # the watchdog stops the server
    first.wait(timeout=30)
    assert _wait_gone(pgdata)
    bystander = subprocess.Popen(["sleep", "120"])
    try:
        lines = [str(bystander.pid), str(pgdata), "0", "5432", str(pgdata), "", "", "ready"]
        (pgdata / lifecycle.PIDFILE).write_text("\n".join(lines) + "\n")
        second = _worker(home)
        _ready(second)
        assert second.wait(timeout=60) == 0
        assert bystander.poll() is None  # still running: never signalled
    finally:
        bystander.kill()
        bystander.wait()


def test_a_stale_socket_lock_naming_a_live_process_does_not_stop_a_start(base: Path) -> None:
    """After a hard crash (the postmaster killed with SIGKILL) the socket's lock file stays;
    once its pid belongs to another live process, PostgreSQL refused to start ("lock file
    ... already exists"), three times, and every open failed until it was removed by hand."""
    home = base / "home"
    first = _worker(home, "hold")
    pgdata = _pgdata(_ready(first))
    first.kill()
    first.wait(timeout=30)
    assert _wait_gone(pgdata)
    # the server's own user (as root, the service user): a process it may not signal reads as
    # gone to PostgreSQL, one of its own as alive
    owner = pgdata.stat().st_uid
    bystander = subprocess.Popen(["sleep", "120"], user=owner if os.getuid() == 0 else None)
    try:
        lines = [str(bystander.pid), str(pgdata), "0", "5432", str(pgdata), "", "", "ready"]
        (pgdata / lifecycle.PIDFILE).write_text("\n".join(lines) + "\n")
        (pgdata / ".s.PGSQL.5432.lock").write_text("\n".join(lines[:5]) + "\n")
        second = _worker(home)
        _ready(second)
        assert second.wait(timeout=60) == 0
        assert bystander.poll() is None
    finally:
        bystander.kill()
        bystander.wait()


def test_concurrent_first_start_up(base: Path) -> None:
    home = base / "fresh"
    procs = [_worker(home) for _ in range(3)]
    for p in procs:
        _ready(p)
    errors = [p.stderr.read() if p.stderr else "" for p in procs]
    assert [p.wait(timeout=60) for p in procs] == [0, 0, 0], errors


def test_server_stops_when_its_only_client_is_killed(base: Path) -> None:
    home = base / "home"
    proc = _worker(home, "hold")
    pgdata = _pgdata(_ready(proc))
    assert lifecycle.postmaster_pid(pgdata) is not None
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert _wait_gone(pgdata), "the watchdog did not stop the server"


def test_in_process_start_is_idempotent(base: Path) -> None:
    home = base / "home"
    url = start_embedded(home)
    assert start_embedded(home) == url
    assert [pid for pid, _ in lifecycle.live_clients(home)] == [os.getpid()]
    server = _locate(home)
    lifecycle.release(home, server.pgdata, server.bindir, server.user, os.getpid())
    assert lifecycle.live_clients(home) == [] and _wait_gone(server.pgdata, 5)


def _watchdogs(home: Path) -> list[int]:
    import psutil

    out = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        cmd = proc.info["cmdline"] or []
        if any(c.endswith("watchdog.py") for c in cmd) and str(home) in cmd:
            out.append(proc.info["pid"])
    return out


def test_a_server_started_again_has_one_watchdog(base: Path) -> None:
    """A server stopped and started again within the watchdog's interval (2 s) kept both
    watchdogs, the old one watching the new server: five were left after a churn of clients."""
    home = base / "home"
    start_embedded(home)
    server = _locate(home)
    for _ in range(2):  # stopped and started again at once, twice
        lifecycle.release(home, server.pgdata, server.bindir, server.user, os.getpid())
        assert _wait_gone(server.pgdata, 10)
        start_embedded(home)
    deadline = time.monotonic() + 10
    while len(_watchdogs(home)) > 1 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert len(_watchdogs(home)) == 1
    lifecycle.release(home, server.pgdata, server.bindir, server.user, os.getpid())
    assert _wait_gone(server.pgdata, 10)


def test_a_new_cluster_sizes_its_buffers_to_the_memory(base: Path) -> None:
    url = start_embedded(base / "home")
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT setting::bigint * 8192 / 1048576 FROM pg_settings "
                           "WHERE name = 'shared_buffers'").fetchone()
    assert row is not None and row[0] == shared_buffers_mb()


def test_a_crash_before_the_password_took_effect_recovers(base: Path) -> None:
    """A passfile beside a pg_hba.conf that is not ours (a crash between the steps of the first
    start) gets its password set again instead of locking the home for good."""
    home = base / "home"
    proc = _worker(home, "hold")
    pgdata = _pgdata(_ready(proc))
    proc.kill()
    proc.wait()
    assert _wait_gone(pgdata)
    (home / "pgpass").write_text("*:*:*:postgres:another-secret-entirely\n")
    (home / "pgpass").chmod(0o600)
    (pgdata / "pg_hba.conf").write_text("local all all trust\n")
    again = _worker(home)
    _ready(again)
    assert again.wait(timeout=60) == 0
    assert (pgdata / "pg_hba.conf").read_text().strip().endswith("scram-sha-256")


def test_a_home_others_can_write_is_refused(base: Path) -> None:
    from kb_retriever import StoreError

    home = base / "shared"
    home.mkdir()
    home.chmod(0o777)
    with pytest.raises(StoreError, match="writable by no one else"):
        start_embedded(home)
    link = base / "link"
    link.symlink_to(home, target_is_directory=True)
    with pytest.raises(StoreError, match="writable by no one else"):
        start_embedded(link)  # the target is what counts


def test_a_relative_home_is_the_same_home_after_a_change_of_directory(
        base: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A relative KB_HOME was resolved again when a search started the stopped server: after a
    ``chdir`` (a daemon, a worker) it made a second cluster under the new directory, and the
    pool went on knocking at the first one's socket."""
    from kb_retriever import HashingEmbedder, KnowledgeBase, Settings

    (base / "elsewhere").mkdir()
    monkeypatch.chdir(base)
    with KnowledgeBase(Settings(home=Path("rel-home")), embedder=HashingEmbedder(64)) as kb:
        kb.add_documents([{"text": "Redis is the cache layer.", "id": "cache"}])
        pgdata = _pgdata(kb.url)
        monkeypatch.chdir(base / "elsewhere")
        _stop(pgdata)
        assert kb.search("cache layer").primary[0].document.source_path == "cache"
    assert list((base / "elsewhere").iterdir()) == []


@pytest.mark.parametrize("emptied", [False, True], ids=["dead-connections", "no-connection"])
def test_a_search_starts_a_stopped_server_again(base: Path, emptied: bool) -> None:
    """The embedded server stopped (a fast shutdown, as an operator or a crash would) under an
    open knowledge base: every later search waited for the pool and failed, for the life of the
    process (a long-lived MCP server never recovered). A search now starts it again, sync and
    async, four at once here (one starts it, the others find it running), and the next
    searches find the data.

    ``emptied``: the pool had then dropped every connection (its check, as a write runs it)
    and kept trying to open others, with a backoff that doubles for five minutes. A search
    waited out the pool's timeout before it started the server, then the pool's next attempt:
    12 s with the default timeout after 20 s down, 57 s with a 30 s timeout after 3 s. It now
    asks about the server after a second's wait, and connects once it runs."""
    import asyncio

    from kb_retriever import HashingEmbedder, KnowledgeBase, Settings

    async def twice(kb: KnowledgeBase, pgdata: Path) -> list[str]:
        assert (await kb.asearch("cache layer")).primary  # the loop's pool is open
        pid = _stop(pgdata)
        if emptied:
            await kb._pools._apool.check()
            await asyncio.sleep(3)
        started = time.monotonic()  # four searches at once: one starts the server
        results = await asyncio.gather(*(kb.asearch("cache layer") for _ in range(4)))
        assert time.monotonic() - started < timeout_s / 4  # not after the pool's timeout
        found, *others = [[h.document.source_path for h in r.primary] for r in results]
        assert others == [found] * 3
        assert lifecycle.postmaster_pid(pgdata) not in (None, pid)
        # the loop's pool closed in its loop: left to asyncio.run's end, its tasks were
        # cancelled there, and once (in a full run) that wait did not end
        await kb.aclose()
        return found

    # The search that finds the server stopped starts it at once: it used to wait out the
    # pool's timeout for a connection first (10 s by default, sync and async alike).
    timeout_s = 120
    with KnowledgeBase(Settings(home=base / "home", pool_timeout_s=timeout_s),
                       embedder=HashingEmbedder(64)) as kb:
        kb.add_documents([{"text": "Redis is the cache layer.", "id": "cache"}])
        pgdata = _pgdata(kb.url)
        pid = _stop(pgdata)
        if emptied:
            pool = kb._pools.sync()
            pool.check()  # every connection dropped; the pool's attempts to open others fail
            assert pool.get_stats()["pool_available"] == 0
            time.sleep(3)  # the attempts back off
        started = time.monotonic()
        with ThreadPoolExecutor(4) as threads:  # four searches at once: one starts the server
            found = list(threads.map(lambda _: [h.document.source_path for h in kb.search(
                "cache layer").primary], range(4)))
        assert found == [["cache"]] * 4
        assert time.monotonic() - started < timeout_s / 4
        assert lifecycle.postmaster_pid(pgdata) not in (None, pid)
        assert asyncio.run(twice(kb, pgdata)) == ["cache"]
        assert kb.open().search("cache layer").primary


def test_a_watchdog_leaves_a_home_being_removed_without_a_lock_file(tmp_path: Path) -> None:
    """The tests' home was removed at exit while the server's watchdog still ran: it took the
    home's lock, creating ``server.lock`` again, and an empty directory stayed behind each
    run. A home without its lock file is being removed: the watchdog leaves it as it is."""
    from kb_retriever.store.watchdog import watch

    home = tmp_path / "home"
    home.mkdir()
    watch(home, home / "pgdata", home / "bin", None, 0.01)
    assert list(home.iterdir()) == []


def test_a_forked_child_using_the_base_keeps_the_server_after_its_parent_exits(
        base: Path) -> None:
    """A child forked after its parent opened the embedded knowledge base was not one of the
    server's users: the parent's exit hook (which runs before ``multiprocessing`` joins its
    children) stopped the server under the child, whose writes in flight failed."""
    out = base / "out"
    done = subprocess.run([PYTHON, str(HELPERS / "fork_worker.py"), str(base / "home"),
                           str(out)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "FORKED" in done.stdout, done.stderr
    assert out.read_text() == "kept"
