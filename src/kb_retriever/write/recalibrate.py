"""Calibrating a project's trust channels at ingest (ranking/calibration.py has the why).

Each probe sentence is embedded as a query (once per process and model) and searched against
the project's chunks; the top-1 cosines are stored in ``kb_scope_stats``, where searches read
them (cached) to place the refusal gate and the rejected channel above the project's own null.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import numpy as np
import psycopg

from ..embedding import Embedder, check_vectors, embedder_errors
from ..errors import KbError
from ..ranking.calibration import PROBE_VERSION, PROBES
from ..store.stats import settle

__all__ = ["RECALIBRATE_AT", "after_write", "calibrate_after_write", "calibrate_project",
           "needs_calibration"]

logger = logging.getLogger(__name__)

_TOP1 = (
    "SELECT 1 - (c.embedding <=> %(v)s) AS sim FROM kb_chunks c "
    "WHERE c.tenant_id = %(tenant)s AND c.project_key = %(project)s "
    "ORDER BY c.embedding <=> %(v)s LIMIT 1"
)
_STORE = (
    "INSERT INTO kb_scope_stats AS s (tenant_id, project_key, probe_model, probe_version, "
    "probe_similarity, calibrated_at) VALUES (%(tenant)s, %(project)s, %(model)s, %(version)s, "
    "%(sims)s, now()) ON CONFLICT (tenant_id, project_key) DO UPDATE SET "
    "probe_model = EXCLUDED.probe_model, probe_version = EXCLUDED.probe_version, "
    "probe_similarity = EXCLUDED.probe_similarity, calibrated_at = EXCLUDED.calibrated_at, "
    "writes_since_calibration = 0"
)
# Count a write; the row exists once the project's statistics were first folded (store/stats.py).
# Its chunks are the folded count plus the log's (exact, as the statistics readers count).
_WRITTEN = (
    "UPDATE kb_scope_stats SET writes_since_calibration = writes_since_calibration + %(n)s "
    "WHERE tenant_id = %(tenant)s AND project_key = %(project)s "
    "RETURNING chunks + (SELECT coalesce(sum(l.chunks), 0) FROM kb_lexeme_log l "
    "WHERE l.tenant_id = %(tenant)s AND l.project_key = %(project)s), "
    "writes_since_calibration, probe_model, probe_version, calibrated_at"
)

#: A write recalibrates the project once the chunks written since its last calibration reach
#: this fraction of it. The null is a maximum of cosines over the project's chunks, which a
#: tenth more (or other) chunks barely moves; a small project recalibrates on every write.
RECALIBRATE_AT = 0.1

_vectors: dict[str, list[np.ndarray]] = {}  # model id -> the probes' query vectors
_lock = threading.Lock()


def _probe_vectors(embedder: Embedder) -> list[np.ndarray]:
    with _lock:
        have = _vectors.get(embedder.model_id)
    if have is not None:
        return have
    with embedder_errors():
        raw = [embedder.embed_query(p) for p in PROBES]
    vecs = [np.asarray(v, dtype=np.float32) for v in check_vectors(
        raw, count=len(PROBES), dimension=embedder.dimension, model_id=embedder.model_id)]
    with _lock:
        _vectors[embedder.model_id] = vecs
    return vecs


def needs_calibration(state: tuple[Any, ...] | None, model_id: str) -> bool:
    """Whether a project whose ``_WRITTEN`` row is ``state`` must be calibrated again.

    >>> from datetime import datetime
    >>> at = datetime(2026, 12, 1)
    >>> needs_calibration((1000, 99, "m", PROBE_VERSION, at), "m")
    False
    >>> needs_calibration((1000, 100, "m", PROBE_VERSION, at), "m"), needs_calibration(
    ...     (1000, 1, "other", PROBE_VERSION, at), "m"), needs_calibration(None, "m")
    (True, True, True)
    """
    if state is None:
        return True
    chunks, written, model, version, calibrated_at = state
    if calibrated_at is None or model != model_id or version != PROBE_VERSION:
        return True
    return int(written) >= RECALIBRATE_AT * max(int(chunks), 1)


def calibrate_after_write(conn: psycopg.Connection[Any], embedder: Embedder, *, tenant: str,
                          project: str, chunks_written: int) -> bool:
    """Count ``chunks_written`` against the project's calibration and recalibrate it when
    :func:`needs_calibration` says so; True when it did."""
    state = conn.execute(_WRITTEN, {"n": chunks_written, "tenant": tenant,
                                    "project": project}).fetchone()
    if not needs_calibration(state, embedder.model_id):
        return False
    calibrate_project(conn, embedder, tenant=tenant, project=project)
    return True


def after_write(conn: psycopg.Connection[Any], embedder: Embedder, tenant: str, project: str,
                chunks_written: int, *, recalibrate: bool = False) -> None:
    """What follows a committed write of ``chunks_written`` chunks: fold the statistics log,
    then recalibrate the project when enough changed (``recalibrate``: always, as after a
    prune). Never raises: the write is saved whatever happens here, and a calibration that
    fails now runs after a later write (the searches meanwhile use the last one)."""
    settle(conn, tenant, project)
    if not chunks_written and not recalibrate:
        return
    try:
        if recalibrate:
            calibrate_project(conn, embedder, tenant=tenant, project=project)
        else:
            calibrate_after_write(conn, embedder, tenant=tenant, project=project,
                                  chunks_written=chunks_written)
    except (KbError, psycopg.Error) as exc:
        logger.warning("calibration of %s/%s postponed: %s", tenant, project, exc)


def calibrate_project(conn: psycopg.Connection[Any], embedder: Embedder, *, tenant: str,
                      project: str) -> list[float]:
    """Measure and store the project's null (each probe's top-1 cosine); return it. A project
    with no chunks stores an empty list (uncalibrated)."""
    sims: list[float] = []
    for vec in _probe_vectors(embedder):
        row = conn.execute(_TOP1, {"v": vec, "tenant": tenant, "project": project}).fetchone()
        if row is None:
            sims = []
            break
        sims.append(round(float(row[0]), 6))
    with conn.transaction():
        conn.execute(_STORE, {"tenant": tenant, "project": project, "model": embedder.model_id,
                              "version": PROBE_VERSION, "sims": sims})
    logger.debug("calibrated %s/%s: %s", tenant, project, sims)
    return sims
