"""Ingest orchestration: find files → parse → embed (cached) → write, one document at a time."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import psycopg

from .calibrate import calibrate_project
from .embedding import Embedder, check_vectors, embedder_errors
from .errors import IngestError, InputError, KbError
from .ingest import SUPPORTED_SUFFIXES, parse_document
from .models import DocumentDraft
from .settings import Settings
from .store import writer

logger = logging.getLogger(__name__)

Progress = Callable[[int, int, str], None]


@dataclass
class IngestReport:
    """What an ingest did. ``failed`` and ``warnings`` are (source path, message) pairs."""

    added: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    deleted: int = 0
    failed: list[tuple[str, str]] = field(default_factory=list)
    warnings: list[tuple[str, str]] = field(default_factory=list)
    chunks_written: int = 0
    chunks_embedded: int = 0

    def summary(self) -> str:
        return (
            f"{len(self.added)} added, {len(self.updated)} updated, {len(self.unchanged)} "
            f"unchanged, {self.deleted} deleted, {len(self.failed)} failed "
            f"({self.chunks_written} chunks written, {self.chunks_embedded} embedded)"
        )


def discover(paths: Iterable[str | Path]) -> list[tuple[Path, Path]]:
    """(file, root) pairs for every supported file under ``paths`` (hidden files skipped)."""
    found: list[tuple[Path, Path]] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            for f in sorted(path.rglob("*")):
                rel = f.relative_to(path)
                if f.is_file() and f.suffix.lower() in SUPPORTED_SUFFIXES and not any(
                    part.startswith(".") for part in rel.parts
                ):
                    found.append((f, path))
        elif path.is_file():
            found.append((path, path.parent))
        else:
            raise InputError(f"no such file or directory: {raw}")
    return found


def embed_chunks(conn: psycopg.Connection, embedder: Embedder, tenant: str,
                 texts: Sequence[str]) -> tuple[list[np.ndarray], int]:
    """Vectors for ``texts``, from the cache where possible; returns (vectors, newly embedded)."""
    hashes = [writer.text_hash(t) for t in texts]
    cached = writer.cached_embeddings(conn, tenant, embedder.model_id, list(set(hashes)))
    missing = list(dict.fromkeys(h for h in hashes if h not in cached))
    if missing:
        by_hash = {h: t for h, t in zip(hashes, texts, strict=True)}
        with embedder_errors():
            raw = embedder.embed_documents([by_hash[h] for h in missing])
        new = check_vectors(raw, count=len(missing), dimension=embedder.dimension,
                            model_id=embedder.model_id)
        arrays = [np.asarray(v, dtype=np.float32) for v in new]
        with conn.transaction():
            writer.store_embeddings(conn, tenant, embedder.model_id, list(zip(missing, arrays, strict=True)))
        cached.update(zip(missing, arrays, strict=True))
    return [np.asarray(cached[h], dtype=np.float32) for h in hashes], len(missing)


def ingest_paths(conn: psycopg.Connection, embedder: Embedder, settings: Settings, *,
                 paths: Iterable[str | Path], tenant: str, project: str, prune: bool = False,
                 progress: Progress | None = None) -> IngestReport:
    """Ingest every supported file under ``paths`` into (tenant, project)."""
    report = IngestReport()
    files = discover(paths)
    seen_by_root: dict[Path, list[str]] = {}
    for i, (file, root) in enumerate(files):
        rel = file.relative_to(root).as_posix() if file != root else file.name
        seen_by_root.setdefault(root, []).append(rel)
        if progress:
            progress(i, len(files), rel)
        try:
            draft = parse_document(file, root=root, settings=settings)
            for w in draft.canonical_warnings:
                report.warnings.append((draft.source_path, w))
            written = report.chunks_written
            _ingest_one(conn, embedder, tenant, project, draft, report)
            if not written and report.chunks_written:  # the run's first write
                writer.refresh_document_stats(conn)
        except IngestError as exc:
            report.failed.append((rel, str(exc)))
        except KbError:
            raise
        except (OSError, UnicodeError, ValueError) as exc:
            report.failed.append((rel, f"{type(exc).__name__}: {exc}"))
    if progress:
        progress(len(files), len(files), "")
    if report.chunks_written:
        # Lexeme frequencies (pg_stats) feed the BM25 keyword signal's idf; refresh them now
        # rather than waiting for autovacuum. ANALYZE samples, so this stays cheap at scale.
        conn.execute("ANALYZE kb_chunks")
    if prune:
        # Paths are relative to their roots, so "missing" means: in the project, not seen now.
        keep = [rel for rels in seen_by_root.values() for rel in rels]
        report.deleted += writer.delete_missing(
            conn, tenant=tenant, project=project, prefix="", keep=keep
        )
    if report.chunks_written or report.deleted:
        # The refusal gate's and the rejected channel's null for this project (calibrate.py).
        calibrate_project(conn, embedder, tenant=tenant, project=project)
    return report


def _ingest_one(conn: psycopg.Connection, embedder: Embedder, tenant: str, project: str,
                draft: DocumentDraft, report: IngestReport) -> None:
    if writer.existing_hash(conn, tenant, project, draft.source_path) == draft.content_hash:
        report.unchanged.append(draft.source_path)
        return
    vectors, n_new = embed_chunks(conn, embedder, tenant, [c.text for c in draft.chunks])
    status = writer.write_document(conn, tenant=tenant, project=project, draft=draft,
                                   embeddings=vectors)
    report.chunks_embedded += n_new
    if status == "unchanged":
        report.unchanged.append(draft.source_path)
        return
    getattr(report, status).append(draft.source_path)
    report.chunks_written += len(draft.chunks)
