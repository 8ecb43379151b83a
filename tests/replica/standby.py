"""A real streaming replica for the tests: ``pg_basebackup -R`` of an embedded primary, started
by the same PostgreSQL binaries as the same user, on a socket directory of its own.

The primary is an embedded server of its own home (``start_embedded``); replication is allowed
over its local socket (one line in its pg_hba.conf), as an operator would allow it.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from kb_retriever.store import embedded


def run_as(user: str | None, argv: list[str], env: dict[str, str] | None = None) -> None:
    """Run ``argv`` as ``user`` (the embedded server's service user when the tests run as
    root), failing with its output."""
    extra = " ".join(f"{k}={shlex.quote(v)}" for k, v in (env or {}).items())
    line = f"{extra} {shlex.join(argv)}".strip()
    cmd = ["su", user, "-s", "/bin/sh", "-c", line] if user else ["/bin/sh", "-c", line]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        raise RuntimeError(f"{argv[0]} failed: {done.stderr or done.stdout}")


def _private_dir(user: str | None) -> Path:
    path = Path(tempfile.mkdtemp(prefix="kb-replica-"))
    if user:
        import pwd

        entry = pwd.getpwnam(user)
        os.chown(path, entry.pw_uid, entry.pw_gid)
    return path


class Standby:
    """A replica of the embedded primary of ``home`` (its URL ``primary_url``)."""

    def __init__(self, home: Path, primary_url: str) -> None:
        server = embedded._locate(embedded._resolve_home(home))
        self.bindir, self.user = str(server.bindir), server.user
        info = conninfo_to_dict(primary_url)
        self.passfile = str(info["passfile"])
        password = Path(self.passfile).read_text().strip().rsplit(":", 1)[-1]
        with psycopg.connect(primary_url, autocommit=True) as conn:
            hba = str(conn.execute("SHOW hba_file").fetchone()[0])  # type: ignore[index]
            line = "local replication all scram-sha-256\n"
            if line not in Path(hba).read_text():
                with open(hba, "a", encoding="utf-8") as f:
                    f.write(line)
                conn.execute("SELECT pg_reload_conf()")
        self.data = _private_dir(self.user) / "pgdata"
        self.socket = _private_dir(self.user)
        run_as(self.user, [f"{self.bindir}/pg_basebackup", "-D", str(self.data), "-R", "-X",
                        "stream", "-c", "fast", "-h", str(info["host"]), "-U", "postgres"],
            {"PGPASSWORD": password})
        self.start()

    def url(self, dbname: str) -> str:
        return make_conninfo("", host=str(self.socket), user="postgres", dbname=dbname,
                             passfile=self.passfile)

    def start(self) -> None:
        options = f"-h '' -k {shlex.quote(str(self.socket))} -c unix_socket_permissions=0700"
        run_as(self.user, [f"{self.bindir}/pg_ctl", "-D", str(self.data), "-l",
                        str(self.data / "server.log"), "-w", "-o", options, "start"])

    def stop(self) -> None:
        run_as(self.user, [f"{self.bindir}/pg_ctl", "-D", str(self.data), "-m", "fast", "-w",
                        "stop"])

    def remove(self) -> None:
        """Stop the replica if it runs and remove its data and socket directories."""
        try:
            self.stop()
        except RuntimeError:
            pass  # already stopped
        shutil.rmtree(self.data.parent, ignore_errors=True)
        shutil.rmtree(self.socket, ignore_errors=True)

    def sql(self, dbname: str, statement: str) -> object:
        with psycopg.connect(self.url(dbname), autocommit=True) as conn:
            return conn.execute(statement).fetchone()


def stop_primary(home: Path) -> None:
    """Stop the embedded primary of ``home`` at once (``pg_ctl -m immediate``)."""
    server = embedded._locate(embedded._resolve_home(home))
    run_as(server.user, [f"{server.bindir}/pg_ctl", "-D", str(server.pgdata), "-m", "immediate",
                      "-w", "stop"])
