"""A real PgBouncer in transaction mode in front of the test server, for the pooler tests.

It runs as the user that owns the server's socket directory (the embedded server's service
user when the tests run as root: PgBouncer refuses root, and only that user may reach the
socket), listens on a free local port, and lets the server's superuser in without a password
(``auth_type = trust``, on 127.0.0.1 only) while it logs in to the server with the password.
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import tempfile
import time
from pathlib import Path

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from ..replica.standby import run_as


def binary() -> str | None:
    return shutil.which("pgbouncer") or next(
        (p for p in ("/usr/sbin/pgbouncer", "/usr/local/bin/pgbouncer") if Path(p).exists()), None)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _password(info: dict[str, str]) -> str:
    if info.get("password"):
        return info["password"]
    passfile = info.get("passfile")
    return Path(passfile).read_text().strip().rsplit(":", 1)[-1] if passfile else ""


class Bouncer:
    """PgBouncer in front of the server of ``server_url``, pooling ``pool_size`` server
    connections per database in transaction mode."""

    def __init__(self, server_url: str, *, pool_size: int = 2) -> None:
        info = conninfo_to_dict(server_url)
        host = info.get("host") or "127.0.0.1"
        self.user = info.get("user") or pwd.getpwuid(os.getuid()).pw_name
        self.dir = Path(tempfile.mkdtemp(prefix="kb-bouncer-"))
        self.port = _free_port()
        runner = None
        if os.geteuid() == 0:  # PgBouncer refuses root: the socket directory's owner
            owner = Path(host).stat().st_uid if host.startswith("/") else None
            runner = pwd.getpwuid(owner).pw_name if owner else "nobody"
            os.chown(self.dir, pwd.getpwnam(runner).pw_uid, -1)
        server = f"host={host} port={info.get('port') or 5432} user={self.user} " \
                 f"password={_password(info)}"
        (self.dir / "users.txt").write_text(f'"{self.user}" ""\n')
        (self.dir / "pgbouncer.ini").write_text(
            f"[databases]\n* = {server}\n[pgbouncer]\nlisten_addr = 127.0.0.1\n"
            f"listen_port = {self.port}\nunix_socket_dir =\nauth_type = trust\n"
            f"auth_file = {self.dir / 'users.txt'}\npool_mode = transaction\n"
            f"default_pool_size = {pool_size}\nmax_client_conn = 500\n"
            f"logfile = {self.dir / 'bouncer.log'}\npidfile = {self.dir / 'bouncer.pid'}\n"
            "ignore_startup_parameters = extra_float_digits\n"
            f"admin_users = {self.user}\n")
        for f in self.dir.iterdir():
            if runner:
                os.chown(f, pwd.getpwnam(runner).pw_uid, -1)
        run_as(runner, [str(binary()), "-d", str(self.dir / "pgbouncer.ini")])
        self._wait_ready()

    def url(self, dbname: str) -> str:
        return make_conninfo("", host="127.0.0.1", port=self.port, user=self.user,
                             dbname=dbname, connect_timeout=10)

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + 15
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError((self.dir / "bouncer.log").read_text()) from None
                time.sleep(0.1)

    def stop(self) -> None:
        pidfile = self.dir / "bouncer.pid"
        try:
            os.kill(int(pidfile.read_text()), signal.SIGTERM)
        except (OSError, ValueError):
            pass
        shutil.rmtree(self.dir, ignore_errors=True)

    def server_states(self, dbname: str) -> list[str]:
        """The state of each of the pooler's server connections to ``dbname`` (its admin
        console's ``SHOW SERVERS``): "active" while linked to a client, else "idle", "used"..."""
        with psycopg.connect(self.url("pgbouncer"), autocommit=True, prepare_threshold=None,
                             cursor_factory=psycopg.ClientCursor) as admin:
            cur = admin.execute("SHOW SERVERS")
            names = [d.name for d in cur.description or ()]
            rows = [dict(zip(names, r, strict=True)) for r in cur.fetchall()]
        return [str(r["state"]) for r in rows if r["database"] == dbname]

    def raw(self, dbname: str) -> psycopg.Connection:
        """A plain client of the pooler (psycopg's defaults, autocommit)."""
        return psycopg.connect(self.url(dbname), autocommit=True, prepare_threshold=None)
