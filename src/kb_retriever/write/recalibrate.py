"""Calibrating a project's trust channels at ingest (ranking/calibration.py has the why).

Each probe sentence is embedded as a query (once per process and model) and searched against
the project's chunks; the top-1 cosines are stored in ``kb_scope_stats``, where searches read
them (cached) to place the refusal gate and the rejected channel above the project's own null.
"""

from __future__ import annotations

import logging
import threading

import numpy as np

from ..embedding import Embedder, check_vectors, embedder_errors
from ..errors import KbError
from ..ingest.language import scripts_of
from ..ranking.calibration import ALL_PROBES, PROBE_VERSION, PROBES, probes_for
from ..store.session import CalibrationState, Session

__all__ = ["RECALIBRATE_AT", "after_write", "calibrate_after_write", "calibrate_project",
           "needs_calibration"]

logger = logging.getLogger(__name__)

#: A write recalibrates the project once the chunks written since its last calibration reach
#: this fraction of it. The null is a maximum of cosines over the project's chunks, which a
#: tenth more (or other) chunks barely moves; a small project recalibrates on every write.
RECALIBRATE_AT = 0.1

_vectors: dict[tuple[str, int], np.ndarray] = {}  # (model id, probe index) -> query vector
_lock = threading.Lock()


def _probe_vectors(embedder: Embedder, indexes: list[int]) -> list[np.ndarray]:
    """The query vectors of ``ALL_PROBES[i]`` for each of ``indexes``, embedded once per
    process and model."""
    with _lock:
        missing = [i for i in indexes if (embedder.model_id, i) not in _vectors]
    if missing:
        with embedder_errors():
            raw = [embedder.embed_query(ALL_PROBES[i]) for i in missing]
        vecs = check_vectors(raw, count=len(missing), dimension=embedder.dimension,
                             model_id=embedder.model_id)
        with _lock:
            for i, v in zip(missing, vecs, strict=True):
                _vectors[embedder.model_id, i] = np.asarray(v, dtype=np.float32)
    with _lock:
        return [_vectors[embedder.model_id, i] for i in indexes]


def needs_calibration(state: CalibrationState | None, model_id: str) -> bool:
    """Whether a project in ``state`` (after its writes were counted) must be calibrated again.

    >>> from datetime import datetime
    >>> at = datetime(2026, 12, 1)
    >>> needs_calibration(CalibrationState(1000, 99, "m", PROBE_VERSION, at), "m")
    False
    >>> needs_calibration(CalibrationState(1000, 100, "m", PROBE_VERSION, at), "m"), \\
    ...     needs_calibration(CalibrationState(1000, 1, "other", PROBE_VERSION, at), "m"), \\
    ...     needs_calibration(None, "m")
    (True, True, True)
    """
    if state is None:
        return True
    if state.calibrated_at is None or state.model != model_id or state.version != PROBE_VERSION:
        return True
    return state.written >= RECALIBRATE_AT * max(state.chunks, 1)


def calibrate_after_write(session: Session, embedder: Embedder, *, tenant: str, project: str,
                          chunks_written: int) -> bool:
    """Count ``chunks_written`` against the project's calibration and recalibrate it when
    :func:`needs_calibration` says so; True when it did."""
    state = session.count_written(tenant, project, chunks_written)
    return needs_calibration(state, embedder.model_id) and _calibrate_own(
        session, embedder, tenant, project, counted=state.written if state else None)


def _calibrate_own(session: Session, embedder: Embedder, tenant: str, project: str, *,
                   counted: int | None = None) -> bool:
    """:func:`calibrate_project` when the session's model is the project's own (another
    model's probes find none of its chunks: the CLI's delete opens with any embedder, and
    only counts then); whether it calibrated."""
    if not session.embeds_project(tenant, project):
        return False
    calibrate_project(session, embedder, tenant=tenant, project=project, counted=counted)
    return True


def after_write(session: Session, embedder: Embedder, tenant: str, project: str,
                chunks_written: int, *, recalibrate: bool = False) -> None:
    """What follows a committed write of ``chunks_written`` chunks: fold the statistics log,
    then recalibrate the project when enough changed (``recalibrate``: always, as after a
    prune). Never raises: the write is saved whatever happens here, and a calibration that
    fails now runs after a later write (the searches meanwhile use the last one)."""
    try:
        session.settle(tenant, project)  # (a fold that fails now runs after a later write)
        if not chunks_written and not recalibrate:
            return
        if recalibrate:
            _calibrate_own(session, embedder, tenant, project)
        else:
            calibrate_after_write(session, embedder, tenant=tenant, project=project,
                                  chunks_written=chunks_written)
    except KbError as exc:
        logger.warning("calibration of %s/%s postponed: %s", tenant, project, exc)


def calibrate_project(session: Session, embedder: Embedder, *, tenant: str, project: str,
                      counted: int | None = None) -> list[float | None]:
    """Measure and store the project's null (each probe's top-1 cosine: PROBES, and the
    questions of each other script its documents are written in, None for the rest); return
    it. A project with no chunks stores an empty list (uncalibrated).

    The writes counted since the last calibration when it starts (``counted``, else read
    now) are the ones it measures; those another writer counts meanwhile stay counted."""
    if counted is None:
        state = session.count_written(tenant, project, 0)
        counted = state.written if state is not None else 0
    wanted = probes_for(scripts_of(session.text_sample(tenant, project)))
    sims: list[float | None] = [None] * len(ALL_PROBES)
    for i, vec in zip(wanted, _probe_vectors(embedder, wanted), strict=True):
        sim = session.top1_similarity(tenant, project, vec)
        if sim is None:
            sims = []
            break
        sims[i] = round(sim, 6)
    if len(wanted) == len(PROBES):  # Latin script alone: PROBES' cosines, as stored before
        sims = sims[:len(PROBES)]
    session.save_calibration(tenant, project, model=embedder.model_id, version=PROBE_VERSION,
                             similarities=sims, counted=counted)
    logger.debug("calibrated %s/%s: %s", tenant, project, sims)
    return sims
