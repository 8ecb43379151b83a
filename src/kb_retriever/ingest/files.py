"""Read a listed file through a checked handle: the file read is the file that was listed.

Listing checks where a path leads (inside the root, no loop); a path can change before it is
read (a file swapped for a symlink to a secret). So the listing records the file's identity,
``(st_dev, st_ino)``, and the read opens the path (without following a final symlink where the
listing saw none), then compares the open file's identity with it: anything else is refused.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import NamedTuple

from kb_retriever.errors import IngestError

__all__ = ["FileId", "Listed", "file_id", "read_file"]


class FileId(NamedTuple):
    """A file's identity on this machine."""

    device: int
    inode: int


class Listed(NamedTuple):
    """What the listing saw at a path: the identity of the file it leads to, and whether the
    path itself was a symlink (only then may the read follow one)."""

    id: FileId
    link: bool


def file_id(st: os.stat_result) -> FileId:
    return FileId(st.st_dev, st.st_ino)


def read_file(path: Path, rel: str, limit: int, listed: Listed | None = None) -> bytes:
    """At most ``limit`` bytes of ``path`` (:class:`IngestError` past it), read from the file
    the listing saw (``listed``; None: whatever the path leads to now)."""
    # O_NONBLOCK: a FIFO swapped in must not block the open; regular files ignore it.
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    if listed is not None and not listed.link:
        flags |= getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise IngestError(f"{rel}: is a symlink (loop), or became one after it was "
                              "listed; not read") from None
        raise IngestError(f"{rel}: cannot read file ({exc.strerror or exc})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise IngestError(f"{rel}: not a regular file; not read")
        if listed is not None and file_id(st) != listed.id:
            raise IngestError(f"{rel}: changed between listing and reading (it now leads to "
                              "another file); not read, ingest it again")
        with os.fdopen(fd, "rb", closefd=False) as handle:
            raw = handle.read(limit + 1)  # never read more than the limit
    except OSError as exc:
        raise IngestError(f"{rel}: cannot read file ({exc.strerror or exc})") from None
    finally:
        os.close(fd)
    if len(raw) > limit:
        raise IngestError(f"{rel}: file is larger than {limit // (1024 * 1024)} MB")
    return raw
