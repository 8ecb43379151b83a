"""Which files an ingest reads: the walk of the paths named, each file once, and the report
that names every file it did not read and why.

A file's id is its path from the root it is found under; the listing records what each path
leads to, and the read must find that same file (:func:`~kb_retriever.ingest.files.read_file`).
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..ingest import SUPPORTED_SUFFIXES
from ..ingest.files import FileId, Listed, file_id

__all__ = ["Found", "IngestReport", "as_paths", "discover", "find_files"]


@dataclass
class IngestReport:
    """What an ingest did. ``failed``, ``skipped`` and ``warnings`` are (path, reason) pairs.

    ``skipped`` holds files that were not read on purpose (unsupported type, no text, a
    symlink leaving its root); ``failed`` those that could not be ingested. The previous
    version of a failed document stays as it was; that of a file now without text is
    deleted (counted in ``deleted``), as it would go on serving the old text.
    """

    added: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    deleted: int = 0
    failed: list[tuple[str, str]] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    warnings: list[tuple[str, str]] = field(default_factory=list)
    chunks_written: int = 0
    chunks_embedded: int = 0

    def summary(self) -> str:
        return (
            f"{len(self.added)} added, {len(self.updated)} updated, {len(self.unchanged)} "
            f"unchanged, {len(self.skipped)} skipped, {self.deleted} deleted, "
            f"{len(self.failed)} failed ({self.chunks_written} chunks written, "
            f"{self.chunks_embedded} embedded)"
        )


@dataclass(frozen=True)
class Found:
    """A file to ingest: its path, the root it was found under, its path relative to that,
    and what the listing saw there (the read must find the same file)."""

    file: Path
    root: Path
    rel: str
    listed: Listed | None = None


def as_paths(paths: Any) -> list[Path]:
    """``paths`` as a list: one ``str``/``Path`` is one path, not a sequence of characters."""
    if isinstance(paths, str | os.PathLike):
        paths = [paths]
    try:
        items = list(paths)
    except TypeError:
        raise InputError(f"paths must be a path or a list of paths, not {type(paths).__name__}") from None
    out = []
    for item in items:
        if not isinstance(item, str | os.PathLike) or not str(item).strip():
            raise InputError(f"each path must be a non-empty str or Path, not {item!r:.60}")
        if "\x00" in str(item):
            raise InputError("a path must not contain NUL characters")
        out.append(Path(item))
    if not out:
        raise InputError("ingest needs at least one path")
    return out


def discover(paths: Iterable[str | Path], *, follow_symlinks: bool = False,
             report: IngestReport | None = None) -> list[tuple[Path, Path]]:
    """(file, root) pairs for every supported file under ``paths`` (hidden files skipped).

    Files of other types, and symlinks that leave their root (unless ``follow_symlinks``),
    are listed in ``report.skipped`` when a report is given; symlink loops in
    ``report.failed``. With ``follow_symlinks`` each real directory is walked once (a link
    back to a parent is skipped). Each real file is read once: under its own path when a link
    also leads to it, else under the first link's (the others are skipped, naming it); a path
    named twice (``docs`` and its absolute path) is read once.
    """
    return [(f.file, f.root) for f in find_files(as_paths(paths), follow_symlinks=follow_symlinks,
                                                 report=report or IngestReport())]


def find_files(paths: Sequence[Path], *, follow_symlinks: bool,
               report: IngestReport) -> list[Found]:
    found: list[Found] = []
    owner: dict[str, Path] = {}  # relative path -> the root that gave it first
    paths = _each_path_once(paths, report)
    inside = _inside_others(paths)
    for path in paths:
        if path in inside:
            report.warnings.append((str(path), f"inside {inside[path]}, which this ingest also "
                                               "names: its files are read from there"))
            continue
        if path.is_dir():
            candidates = _walk(path, follow_symlinks, report)
        elif path.is_file():
            candidates = [(path, path.parent, Listed(file_id(path.stat()), path.is_symlink()))]
        elif path.is_symlink():
            raise InputError(f"{path} is a broken symlink or a symlink loop")
        else:
            raise InputError(f"no such file or directory: {path}")
        for file, root, listed in candidates:
            rel = file.relative_to(root).as_posix()
            if file.suffix.lower() not in SUPPORTED_SUFFIXES:
                report.skipped.append((rel, f"unsupported file type {file.suffix or '(none)'!r}; "
                                            f"supported: {', '.join(SUPPORTED_SUFFIXES)}"))
                continue
            if rel in owner and owner[rel] != root:
                report.failed.append((rel, f"{file} has the same relative path as the file "
                                           f"under {owner[rel]}; ingest the two roots into "
                                           "different projects, or their common parent"))
                continue
            if rel not in owner:
                owner[rel] = root
                found.append(Found(file, root, rel, listed))
    # (a link inside the root to a file inside it, followed or not, is that file again)
    return _each_file_once(found, report)


def _each_path_once(paths: Sequence[Path], report: IngestReport) -> list[Path]:
    """``paths`` with each real file or folder once (``docs`` and its absolute path, or a
    link to it: every file of the second failed as a relative path the first also gave)."""
    first: dict[Path, Path] = {}
    for path in paths:
        held = first.setdefault(path.resolve(), path)
        if held is not path:
            report.warnings.append((str(path), f"the same as {held}, which this ingest also "
                                               "names: read once"))
    return list(first.values())


def _inside_others(paths: Sequence[Path]) -> dict[Path, Path]:
    """The paths named that the walk of another folder named lists too (``ingest docs/adr
    docs``), each with the outermost such folder: read from there alone, or each file would be
    stored twice, under two ids."""
    folders = [(p, p.resolve()) for p in paths if p.is_dir()]
    out: dict[Path, Path] = {}
    for path in paths:
        real = path.resolve()
        holders = [(folder, real_folder) for folder, real_folder in folders
                   if real != real_folder and real.is_relative_to(real_folder)
                   and not any(part.startswith(".")  # the walk skips hidden names
                               for part in real.relative_to(real_folder).parts)]
        if holders:
            out[path] = min(holders, key=lambda held: len(held[1].parts))[0]
    return out


def _each_file_once(found: list[Found], report: IngestReport) -> list[Found]:
    """``found`` with each real file once: under its own path (no symlink on the way) when
    one leads to it, else under the first."""
    def through_link(f: Found) -> bool:
        return os.path.realpath(f.file) != os.path.abspath(f.file)

    kept: dict[FileId, Found] = {}
    for f in sorted(found, key=through_link):  # stable: own paths first, in listing order
        if f.listed is None:
            continue
        first = kept.setdefault(f.listed.id, f)
        if first is not f:
            report.skipped.append((f.rel, f"the same file as {first.rel}, read once"))
    return [f for f in found if f.listed is None or kept[f.listed.id] is f]


def _walk(root: Path, follow_symlinks: bool,
          report: IngestReport) -> list[tuple[Path, Path, Listed]]:
    real_root = root.resolve()
    walked = {file_id(root.stat()): "."}  # real directories walked, by identity: each once
    out: list[tuple[Path, Path, Listed]] = []

    def unreadable(exc: OSError) -> None:
        where = Path(exc.filename).relative_to(root).as_posix() if exc.filename else "."
        report.failed.append((where, f"cannot read directory ({exc.strerror or exc})"))

    for dirpath, dirnames, filenames in os.walk(root, onerror=unreadable,
                                                followlinks=follow_symlinks):
        keep = []
        for name in sorted(d for d in dirnames if not d.startswith(".")):
            sub = Path(dirpath, name)
            rel = sub.relative_to(root).as_posix()
            if not follow_symlinks:  # os.walk enters no link; report those leaving the root
                if sub.is_symlink() and not Path(os.path.realpath(sub)).is_relative_to(real_root):
                    report.skipped.append((rel, "symlink to a directory outside the ingest "
                                                "root (not followed)"))
                keep.append(name)
                continue
            try:
                seen = walked.setdefault(file_id(sub.stat()), rel)
            except OSError:  # gone since os.walk listed it
                continue
            if seen != rel:  # a link back to a parent (a cycle), or a second way into a folder
                again = "the ingest root" if seen == "." else f"the folder {seen}"
                report.skipped.append((rel, f"symlink to {again}, walked once"))
                continue
            keep.append(name)
        dirnames[:] = keep
        for name in sorted(filenames):
            if not name.startswith("."):
                listed = _listed(Path(dirpath, name), root, real_root, follow_symlinks, report)
                if listed is not None:
                    out.append((Path(dirpath, name), root, listed))
    return sorted(out)


def _listed(file: Path, root: Path, real_root: Path, follow_symlinks: bool,
            report: IngestReport) -> Listed | None:
    """What ``file`` leads to, or None, reported when it is a symlink loop, a broken symlink,
    a symlink that leaves the root (os.walk lists loops and broken links as files) or not a
    regular file (a FIFO would block the read)."""
    rel = file.relative_to(root).as_posix()
    try:
        link = stat.S_ISLNK(os.lstat(file).st_mode)
    except OSError:  # gone since it was listed
        return None
    try:
        st = os.stat(file)
    except OSError as exc:  # a loop or a broken link
        if exc.errno == errno.ELOOP:
            report.failed.append((rel, "symlink loop; not read"))
        else:
            report.skipped.append((rel, "broken symlink: its target does not exist"))
        return None
    if link and not follow_symlinks \
            and not Path(os.path.realpath(file)).is_relative_to(real_root):
        report.skipped.append((rel, "symlink to a file outside the ingest root (not followed)"))
        return None
    if not stat.S_ISREG(st.st_mode):
        report.skipped.append((rel, "not a regular file (a FIFO, socket or device); not read"))
        return None
    return Listed(file_id(st), link)
