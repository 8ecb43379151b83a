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

from .embedding import Embedder, check_vectors, embedder_errors
from .ranking.calibration import PROBE_VERSION, PROBES

__all__ = ["calibrate_project"]

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
    "probe_similarity = EXCLUDED.probe_similarity, calibrated_at = EXCLUDED.calibrated_at"
)

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
