"""Ingest orchestration: find files → parse → embed (cached, in batches) → write, file by file.

One file's failure (unreadable, unparsable, rejected by the database, over a limit) is
reported and the run goes on; a lost connection or a failing embedder (its fault, not the
file's: every later file would fail the same way) stops it.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

import numpy as np

from ..embedding import Embedder, check_vectors, embedder_errors
from ..errors import IngestError, IngestInterruptedError, StoreError
from ..ingest import parse_document
from ..ingest.budget import Budget
from ..models import DocumentDraft
from ..settings import Settings
from ..store import by_id, writer
from ..store.session import Session
from .found import Found, IngestReport, as_paths, discover, find_files
from .recalibrate import after_write

__all__ = ["EMBED_BATCH", "IngestReport", "as_paths", "discover", "embed_chunks",
           "embed_in_batches", "find_files", "ingest_paths", "prune_missing"]

logger = logging.getLogger(__name__)

Progress = Callable[[int, int, str], None]

# Texts per embedder call: the embedder's memory stays flat whatever the file's size.
EMBED_BATCH = 256


def embed_in_batches(session: Session, embedder: Embedder, tenant: str,
                     texts: Sequence[str], budget: Budget | None = None,
                     ) -> tuple[list[np.ndarray], int]:
    """:func:`embed_chunks` :data:`EMBED_BATCH` texts at a time: the embedder never sees more,
    and what a batch embedded is cached before the next starts. Returns (vectors, newly
    embedded); the vectors are held for the document's one write (at most
    ``KB_INGEST_MAX_CHUNKS`` of them). A file's ``budget`` is checked before each batch: a
    4.4 MB text file embedded for 100 s past its deadline. What was embedded stays cached, so
    the file's next ingest goes on from there."""
    vectors: list[np.ndarray] = []
    n_new = 0
    for start in range(0, len(texts), EMBED_BATCH):
        if budget is not None:
            budget.tick(f"embedding chunk {start + 1} of {len(texts)}")
        batch, n = embed_chunks(session, embedder, tenant, texts[start:start + EMBED_BATCH])
        vectors += batch
        n_new += n
    return vectors, n_new


def embed_chunks(session: Session, embedder: Embedder, tenant: str,
                 texts: Sequence[str]) -> tuple[list[np.ndarray], int]:
    """Vectors for ``texts``, from the cache where possible; returns (vectors, newly embedded)."""
    hashes = [writer.text_hash(t) for t in texts]
    cached = session.cached_embeddings(tenant, embedder.model_id, embedder.dimension,
                                       list(set(hashes)))
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
    if prune:  # first: a file moved within the root takes its slug from its old path's document
        report.deleted += prune_missing(session, tenant=tenant, project=project, roots=roots)
    elsewhere = stored_elsewhere(session, tenant, project, {f.root for f in files})
    # Files stored under another root's id first: re-keyed, their old ids are free for the
    # files of this run that have them (docs/sub/a.md stored as a.md, then docs/a.md).
    files.sort(key=lambda f: os.path.join(f.root.resolve(), f.rel) not in elsewhere)
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
    budget = Budget.start(found.rel, settings)  # read and embedded within it (the parse checks its own)
    draft = parse_document(found.file, root=found.root, settings=settings, listed=found.listed)
    root = str(found.root.resolve())
    stored = elsewhere.get(os.path.join(root, draft.source_path), [])
    if not draft.chunks:
        removed = _remove_emptied(session, tenant, project, draft.source_path, root,
                                  [path for path, _ in stored])
        report.skipped.append((found.rel, "no text to index" + (
            "; the version stored before was removed" if removed else "")))
        report.deleted += removed
        return
    for w in draft.canonical_warnings:
        report.warnings.append((draft.source_path, w))
    _ingest_one(session, embedder, tenant, project, draft, report, source_root=root,
                held_elsewhere=bool(stored), budget=budget)
    for path, other_root in stored:  # written: the write deleted them
        report.warnings.append((draft.source_path, f"the same file was stored as {path} "
                                                   f"(ingested from {other_root}); replaced"))


def _remove_emptied(session: Session, tenant: str, project: str, source_path: str, root: str,
                    other_ids: Sequence[str]) -> int:
    """Delete the stored versions of a file that now holds no text (its id's, and those of the
    same file stored under another root's id): kept, they would go on serving its old text.
    A document of the same id from another root is another file and stays."""
    stored_hash, stored_root = session.stored_version(tenant, project, source_path)
    ids = list(other_ids)
    if stored_hash is not None and stored_root in (None, root):
        ids.append(source_path)
    return session.delete_documents(tenant, project, ids) if ids else 0


def _ingest_one(session: Session, embedder: Embedder, tenant: str, project: str,
                draft: DocumentDraft, report: IngestReport, *, source_root: str | None,
                held_elsewhere: bool = False, budget: Budget | None = None) -> None:
    """Embed and write one file's draft; ``held_elsewhere``: the project holds the file
    under another root's id too, which the write replaces (``store.writer._take_file``)."""
    stored_hash, stored_root = session.stored_version(tenant, project, draft.source_path)
    if (source_root is not None and stored_root is not None and stored_root != source_root
            and (Path(stored_root) / draft.source_path).is_file()):
        # Another root's file of the same relative path, still there: not a move, a clash.
        raise IngestError(f"this project already holds {draft.source_path} from {stored_root}; "
                          "ingest the two roots into different projects, or their common parent")
    if stored_hash == draft.content_hash and not held_elsewhere and source_root in (None, stored_root):
        report.unchanged.append(draft.source_path)
        return
    vectors, n_new = embed_in_batches(session, embedder, tenant, [c.text for c in draft.chunks],
                                      budget)
    session.prepare_writes()
    status = session.write_document(tenant, project, draft, vectors, source_root=source_root,
                                    seen_root=stored_root)
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
    gone = [(root, rel) for root, rel in session.documents_under(tenant, project, sorted(dirs))
            if _gone(Path(root) / rel)]
    # by root and path: a file another ingest moved to its new root meanwhile is not gone
    return session.run(by_id.delete_files_sql(tenant, project, gone)) if gone else 0


def _gone(path: Path) -> bool:
    """Whether the file is known to be gone: one that cannot be looked at (a folder without
    read permission) stays, and the ingest reports that folder as failed."""
    try:
        return not path.is_file()
    except OSError:  # EACCES: it raised out of prune as "the database could not be reached"
        return False
