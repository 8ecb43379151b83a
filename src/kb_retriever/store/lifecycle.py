"""Process bookkeeping for the embedded server: the home's lock, its clients, its postmaster.

Standard library and psutil only, and no relative imports: ``watchdog.py`` runs this module's
functions in a bare interpreter, without importing the package.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import pwd
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import psutil

LOCK_NAME = "server.lock"
CLIENTS_NAME = "clients.json"
PIDFILE = "postmaster.pid"


@contextlib.contextmanager
def home_lock(home: Path, *, create: bool = True) -> Iterator[None]:
    """Exclusive, inter-process: one process at a time initialises, starts or stops the server.
    Without ``create`` a home whose lock file is gone (being removed) raises
    FileNotFoundError instead of getting the file back."""
    flags = os.O_RDWR | os.O_NOFOLLOW | (os.O_CREAT if create else 0)
    fd = os.open(home / LOCK_NAME, flags, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def _identity(pid: int) -> tuple[int, float] | None:
    """(pid, start time): a pid alone may be reused by an unrelated process.

    On Linux the start time is the process's start in clock ticks since boot
    (``/proc/<pid>/stat``), which a step of the wall clock does not move; elsewhere psutil's
    creation time."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return pid, float(stat.rsplit(")", 1)[1].split()[19])  # field 22, starttime
    except (OSError, IndexError, ValueError):
        pass
    try:
        return pid, psutil.Process(pid).create_time()
    except (psutil.NoSuchProcess, psutil.AccessDenied, ValueError):
        return None


def live_clients(home: Path) -> list[tuple[int, float]]:
    """The registered client processes that still run (dead or reused pids are dropped)."""
    try:
        raw = json.loads((home / CLIENTS_NAME).read_text() or "[]")
    except (FileNotFoundError, ValueError):
        raw = []
    out = []
    for item in raw:
        if isinstance(item, list) and len(item) == 2 and isinstance(item[0], int):
            now = _identity(item[0])
            if now is not None and now[1] == float(item[1]):
                out.append(now)
    return out


def _write_clients(home: Path, clients: Sequence[tuple[int, float]]) -> None:
    fd, tmp = tempfile.mkstemp(dir=home, prefix=f".{CLIENTS_NAME}.")  # O_EXCL, 0600
    with os.fdopen(fd, "w") as fh:
        json.dump([list(c) for c in clients], fh)
    os.replace(tmp, home / CLIENTS_NAME)


def add_client(home: Path, pid: int) -> None:
    """Register ``pid`` as a user of the server (call under :func:`home_lock`)."""
    me = _identity(pid)
    clients = [c for c in live_clients(home) if c[0] != pid]
    _write_clients(home, clients + ([me] if me else []))


def remove_client(home: Path, pid: int) -> list[tuple[int, float]]:
    """Unregister ``pid``; return the clients left (call under :func:`home_lock`)."""
    left = [c for c in live_clients(home) if c[0] != pid]
    _write_clients(home, left)
    return left


def postmaster_pid(pgdata: Path) -> int | None:
    """The pid in ``postmaster.pid`` if it is verified to be this data directory's postmaster.

    A stale file may name any live process; this checks that the process is a ``postgres``
    whose working directory is ``pgdata`` (the postmaster changes into its data directory), so
    nothing else is ever signalled.
    """
    try:
        first = (pgdata / PIDFILE).read_text().splitlines()[0].strip()
        pid = int(first)
    except (OSError, IndexError, ValueError):
        return None
    if pid <= 0:
        return None
    try:
        proc = psutil.Process(pid)
        if proc.name() != "postgres" or Path(proc.cwd()).resolve() != pgdata.resolve():
            return None
    except (psutil.Error, OSError):
        return None
    return pid


def socket_dir(pgdata: Path) -> Path | None:
    """The socket directory recorded in ``postmaster.pid`` (line 5), if any."""
    try:
        lines = (pgdata / PIDFILE).read_text().splitlines()
    except OSError:
        return None
    return Path(lines[4]) if len(lines) > 4 and lines[4].strip() else None


def run_as(user: str | None) -> dict[str, Any]:
    """``subprocess`` arguments that run a command as ``user`` (its group, no other groups)."""
    if user is None:
        return {}
    entry = pwd.getpwnam(user)
    return {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": [], "cwd": "/"}


def pg_ctl_stop(bindir: Path, pgdata: Path, user: str | None) -> None:
    """Stop this data directory's postmaster, only if :func:`postmaster_pid` verifies it."""
    if postmaster_pid(pgdata) is None:
        return
    sock = socket_dir(pgdata)
    subprocess.run([str(bindir / "pg_ctl"), "-D", str(pgdata), "-m", "fast", "-w", "-t", "60",
                    "stop"], check=False, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, **run_as(user))
    if sock is not None and sock != pgdata:  # a private temp dir made for a long path
        with contextlib.suppress(OSError):
            sock.rmdir()


def release(home: Path, pgdata: Path, bindir: Path, user: str | None, pid: int) -> None:
    """Unregister ``pid``; the last client stops the server (an exit hook of ``pid``)."""
    if os.getpid() != pid:  # a forked child inherits the hook: only the registrant releases
        return
    with contextlib.suppress(OSError):  # the home is gone: nothing left to release
        with home_lock(home):
            if not remove_client(home, pid):
                pg_ctl_stop(bindir, pgdata, user)
