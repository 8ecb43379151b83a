"""Ingest orchestration: find files → parse → embed (cached, in batches) → write, file by file.

One file's failure (unreadable, unparsable, rejected by the database, over a limit) is
reported and the run goes on; a lost connection or a failing embedder (its fault, not the
file's: every later file would fail the same way) stops it.
"""

from __future__ import annotations

import errno
import logging
import os
import stat
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..embedding import Embedder, check_vectors, embedder_errors
from ..errors import IngestError, IngestInterruptedError, InputError, StoreError
from ..ingest import SUPPORTED_SUFFIXES, parse_document
from ..ingest.files import FileId, Listed, file_id
from ..models import DocumentDraft
from ..settings import Settings
from ..store import writer
from ..store.session import Session
from .recalibrate import after_write

logger = logging.getLogger(__name__)

Progress = Callable[[int, int, str], None]

# Texts per embedder call: the embedder's memory stays flat whatever the file's size.
EMBED_BATCH = 256


@dataclass
class IngestReport:
    """What an ingest did. ``failed``, ``skipped`` and ``warnings`` are (path, reason) pairs.

    ``skipped`` holds files that were not read on purpose (unsupported type, no text, a
    symlink leaving its root); ``failed`` those that could not be ingested. The previous
    version of a failed or skipped document stays as it was.
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
    back to a parent is skipped) and each real file is read once: under its own path when a
    link also leads to it, else under the first link's (the others are skipped, naming it).
    """
    return [(f.file, f.root) for f in find_files(as_paths(paths), follow_symlinks=follow_symlinks,
                                                 report=report or IngestReport())]


def find_files(paths: Sequence[Path], *, follow_symlinks: bool,
               report: IngestReport) -> list[Found]:
    found: list[Found] = []
    owner: dict[str, Path] = {}  # relative path -> the root that gave it first
    for path in paths:
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
    return _each_file_once(found, report) if follow_symlinks else found


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


def embed_in_batches(session: Session, embedder: Embedder, tenant: str,
                     texts: Sequence[str]) -> tuple[list[np.ndarray], int]:
    """:func:`embed_chunks` :data:`EMBED_BATCH` texts at a time: the embedder never sees more,
    and what a batch embedded is cached before the next starts. Returns (vectors, newly
    embedded); the vectors are held for the document's one write (at most
    ``KB_INGEST_MAX_CHUNKS`` of them)."""
    vectors: list[np.ndarray] = []
    n_new = 0
    for start in range(0, len(texts), EMBED_BATCH):
        batch, n = embed_chunks(session, embedder, tenant, texts[start:start + EMBED_BATCH])
        vectors += batch
        n_new += n
    return vectors, n_new


def embed_chunks(session: Session, embedder: Embedder, tenant: str,
                 texts: Sequence[str]) -> tuple[list[np.ndarray], int]:
    """Vectors for ``texts``, from the cache where possible; returns (vectors, newly embedded)."""
    hashes = [writer.text_hash(t) for t in texts]
    cached = session.cached_embeddings(tenant, embedder.model_id, list(set(hashes)))
    missing = list(dict.fromkeys(h for h in hashes if h not in cached))
    if missing:
        by_hash = {h: t for h, t in zip(hashes, texts, strict=True)}
        with embedder_errors():
            raw = embedder.embed_documents([by_hash[h] for h in missing])
        new = check_vectors(raw, count=len(missing), dimension=embedder.dimension,
                            model_id=embedder.model_id)
        arrays = [np.asarray(v, dtype=np.float32) for v in new]
        session.store_embeddings(tenant, embedder.model_id,
                                 list(zip(missing, arrays, strict=True)))
        cached.update(zip(missing, arrays, strict=True))
    return [np.asarray(cached[h], dtype=np.float32) for h in hashes], len(missing)


def ingest_paths(session: Session, embedder: Embedder, settings: Settings, *,
                 paths: Iterable[str | Path], tenant: str, project: str, prune: bool = False,
                 progress: Progress | None = None, follow_symlinks: bool = False) -> IngestReport:
    """Ingest every supported file under ``paths`` into (tenant, project)."""
    report = IngestReport()
    roots = as_paths(paths)
    session.check_project(tenant, project)  # another model's project: one error, not one per file
    files = find_files(roots, follow_symlinks=follow_symlinks, report=report)
    elsewhere = stored_elsewhere(session, tenant, project, {f.root for f in files})
    for i, found in enumerate(files):
        if progress:
            progress(i, len(files), found.rel)
        try:
            _ingest_file(session, embedder, settings, tenant, project, found, report,
                         elsewhere)
        except IngestError as exc:
            report.failed.append((found.rel, _without_path(str(exc), found.rel)))
        except StoreError as exc:
            if session.broken:  # nothing after this can be written: stop, with what was done
                raise IngestInterruptedError(report, interrupted=found.rel,
                                             remaining=len(files) - i - 1, cause=str(exc)) from exc
            report.failed.append((found.rel, str(exc)))
        except (OSError, UnicodeError, ValueError) as exc:
            report.failed.append((found.rel, f"{type(exc).__name__}: {exc}"))
    if progress:
        progress(len(files), len(files), "")
    if prune:
        report.deleted += prune_missing(session, tenant=tenant, project=project, roots=roots)
    # The statistics log folded, and the trust channels' null measured again (calibrate.py):
    # after a prune, and once enough chunks were written since the last calibration.
    after_write(session, embedder, tenant, project, report.chunks_written,
                recalibrate=bool(report.deleted))
    return report


def _without_path(message: str, rel: str) -> str:
    """Loaders name the file in their messages; the report already does."""
    prefix = f"{rel}: "
    return message[len(prefix):] if message.startswith(prefix) else message


def stored_elsewhere(session: Session, tenant: str, project: str,
                     roots: Iterable[Path]) -> dict[str, list[tuple[str, str]]]:
    """The files (absolute paths) that the project holds from a folder inside one of
    ``roots`` or from a folder that holds one: each one's (id, ingest root). A file's id is its
    path from the root it was ingested from, so a folder ingested, then its parent, would
    otherwise hold the file twice."""
    out: dict[str, list[tuple[str, str]]] = {}
    for root in {str(r.resolve()) for r in roots}:
        for other_root, path in session.documents_near(tenant, project, root):
            out.setdefault(os.path.join(other_root, path), []).append((path, other_root))
    return out


def _ingest_file(session: Session, embedder: Embedder, settings: Settings, tenant: str,
                 project: str, found: Found, report: IngestReport,
                 elsewhere: Mapping[str, list[tuple[str, str]]]) -> None:
    draft = parse_document(found.file, root=found.root, settings=settings, listed=found.listed)
    if not draft.chunks:
        report.skipped.append((found.rel, "no text to index"))
        return
    if len(draft.chunks) > settings.ingest_max_chunks:
        raise IngestError(f"{len(draft.chunks)} chunks, more than KB_INGEST_MAX_CHUNKS="
                          f"{settings.ingest_max_chunks}; split the file or raise the limit")
    for w in draft.canonical_warnings:
        report.warnings.append((draft.source_path, w))
    root = str(found.root.resolve())
    stored = elsewhere.get(os.path.join(root, draft.source_path), [])
    _ingest_one(session, embedder, tenant, project, draft, report, source_root=root,
                replaces=[path for path, _ in stored])
    for path, other_root in stored:  # written: the write deleted them
        report.warnings.append((draft.source_path, f"the same file was stored as {path} "
                                                   f"(ingested from {other_root}); replaced"))


def _ingest_one(session: Session, embedder: Embedder, tenant: str, project: str,
                draft: DocumentDraft, report: IngestReport, *, source_root: str | None,
                replaces: Sequence[str] = ()) -> None:
    stored_hash, stored_root = session.stored_version(tenant, project, draft.source_path)
    if (source_root is not None and stored_root is not None and stored_root != source_root
            and (Path(stored_root) / draft.source_path).is_file()):
        # Another root's file of the same relative path, still there: not a move, a clash.
        raise IngestError(f"this project already holds {draft.source_path} from {stored_root}; "
                          "ingest the two roots into different projects, or their common parent")
    if stored_hash == draft.content_hash and not replaces and source_root in (None, stored_root):
        report.unchanged.append(draft.source_path)
        return
    vectors, n_new = embed_in_batches(session, embedder, tenant, [c.text for c in draft.chunks])
    session.prepare_writes()
    status = session.write_document(tenant, project, draft, vectors, source_root=source_root,
                                    replaces=replaces, seen_root=stored_root)
    report.chunks_embedded += n_new
    if status == "unchanged":
        report.unchanged.append(draft.source_path)
        return
    getattr(report, status).append(draft.source_path)
    report.chunks_written += len(draft.chunks)


def prune_missing(session: Session, *, tenant: str, project: str,
                  roots: Sequence[Path]) -> int:
    """Delete the project's documents found under one of ``roots`` (ingested from it or from
    a folder inside it) whose file is gone.

    Documents from other roots, and those written before the root was recorded, stay.
    """
    dirs = {str(r.resolve()) for r in roots if r.is_dir()}
    dirs.update(str(r.parent.resolve()) for r in roots if r.is_file())
    gone = [rel for root, rel in session.documents_under(tenant, project, sorted(dirs))
            if _gone(Path(root) / rel)]
    return session.delete_documents(tenant, project, gone) if gone else 0


def _gone(path: Path) -> bool:
    """Whether the file is known to be gone: one that cannot be looked at (a folder without
    read permission) stays, and the ingest reports that folder as failed."""
    try:
        return not path.is_file()
    except OSError:  # EACCES: it raised out of prune as "the database could not be reached"
        return False
