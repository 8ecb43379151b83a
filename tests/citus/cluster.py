"""A real Citus cluster for the tests: Citus 14 built into the embedded server's PostgreSQL by
``shared/tools/citus/build.sh`` (beside the repository; cached; the first build took 45 s on 2
cores, 2026-12-06), a coordinator and two workers on 127.0.0.1 started by ``cluster.sh``. A
session that will run the Citus tier starts the build at once, at the lowest CPU priority
(:func:`start_build`, from the root conftest), so that it uses the cores the tests before it leave idle.

Each test database is created on every node with the ``citus`` and ``vector`` extensions and
the workers added, as an operator would set one up.
"""

from __future__ import annotations

import fcntl
import os
import signal
import socket
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import psycopg
from psycopg import sql

ROOT = Path(__file__).resolve().parents[2]
TOOLS = ROOT.parent / "shared" / "tools" / "citus"
BASE_PORT = 9850  # coordinator; the workers take the next ports
WORKERS = 2
# one build on this machine at a time, wherever build.sh builds (KB_CITUS_HOME)
BUILD_LOCK = Path(tempfile.gettempdir()) / "kb-citus-build.lock"


def tools_present() -> bool:
    return (TOOLS / "build.sh").is_file() and (TOOLS / "cluster.sh").is_file()


def build() -> str:
    """The bin directory of the Citus-enabled PostgreSQL (built once, then reused).

    One build at a time: build.sh starts an unfinished build over (``rm -rf``), so a second
    caller (the tier's fixture, scale.py's process) waits for the lock of the one under way,
    then finds the build done."""
    with open(BUILD_LOCK, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = subprocess.run(["bash", str(TOOLS / "build.sh"), sys.executable], check=True,
                              capture_output=True, text=True, timeout=1800)
    return done.stdout.strip().splitlines()[-1]


def start_build() -> subprocess.Popen[bytes] | None:
    """:func:`build` in a process of its own at nice 19 (make and the compilers inherit it):
    on a new machine the build (45 s alone on two cores here) otherwise comes on top of the
    suite.
    None when the tools are not beside the repository. :func:`stop_build` ends it."""
    if not tools_present():
        return None
    return subprocess.Popen(["nice", "-n", "19", sys.executable, "-m", "tests.citus.cluster"],
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)


def stop_build(proc: subprocess.Popen[bytes] | None) -> None:
    """End a build that :func:`start_build` started and the session no longer waits for (a
    session that stopped early); an unfinished build is started over by the next one."""
    if proc is not None and proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=60)


def _free_ports(n: int) -> list[int]:
    """``n`` consecutive free ports from BASE_PORT on: a cluster left running by a killed run,
    or another started meanwhile (scale.py beside the test tier), takes its block."""
    for base in range(BASE_PORT, BASE_PORT + 200, n):
        ports = list(range(base, base + n))
        if all(_free(port) for port in ports):
            return ports
    raise RuntimeError(f"no {n} free ports from {BASE_PORT}")


def _free(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


class Cluster:
    """A coordinator and its workers, started in a directory of their own."""

    def __init__(self, bindir: str) -> None:
        self.bindir = bindir
        # the servers run as an unprivileged user when the tests run as root: a readable place
        self.data = Path(tempfile.mkdtemp(prefix="kb-citus-test-"))
        self.data.chmod(0o755)
        self.ports = _free_ports(WORKERS + 1)

    def start(self) -> None:
        subprocess.run(["bash", str(TOOLS / "cluster.sh"), "start", self.bindir, str(self.data),
                        str(self.ports[0]), str(WORKERS)], check=True, capture_output=True,
                       text=True, timeout=300)

    def stop(self) -> None:
        subprocess.run(["bash", str(TOOLS / "cluster.sh"), "stop", self.bindir, str(self.data)],
                       capture_output=True, text=True, timeout=300)

    def url(self, port: int, dbname: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{port}/{dbname}"

    def new_database(self, *, workers: bool = True) -> str:
        """A database with citus and vector on every node, its workers added (none with
        ``workers=False``); the coordinator's URL."""
        name = f"kbcitus_{uuid.uuid4().hex[:10]}"
        for port in self.ports:
            with psycopg.connect(self.url(port), autocommit=True) as conn:
                conn.execute("SET citus.enable_create_database_propagation TO off")
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
            with psycopg.connect(self.url(port, name), autocommit=True) as conn:
                conn.execute("CREATE EXTENSION citus")
                conn.execute("CREATE EXTENSION vector")
        with psycopg.connect(self.url(self.ports[0], name), autocommit=True) as conn:
            conn.execute("SELECT citus_set_coordinator_host('127.0.0.1', %s)", [self.ports[0]])
            for port in self.ports[1:] if workers else ():
                conn.execute("SELECT citus_add_node('127.0.0.1', %s)", [port])
        return self.url(self.ports[0], name)

    def pg_ctl(self, port: int, action: str) -> None:
        """Stop or start one node (``action``: stop | start)."""
        node = self.data / f"node{port}"
        cmd = [f"{self.bindir}/pg_ctl", "-D", str(node), "-w", "-m", "fast",
               "-l", str(self.data / f"node{port}.log"), action]
        if os.geteuid() == 0:
            cmd = ["su", "kb-citus", "-s", "/bin/sh", "-c", " ".join(cmd)]
        subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=120)


def counters(url: str) -> tuple[int, int]:
    """(single-shard, multi-shard) query executions of the database so far."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT query_execution_single_shard, query_execution_multi_shard "
                           "FROM citus_stat_counters WHERE name = current_database()").fetchone()
    return (int(row[0]), int(row[1])) if row else (0, 0)


if __name__ == "__main__":  # start_build's process
    print(build())
