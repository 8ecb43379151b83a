"""Fixtures of the Citus tier (cluster.py)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import psycopg
import pytest

from .cluster import Cluster, build, tools_present


@pytest.fixture(scope="session")
def citus() -> Iterator[Cluster]:
    if not tools_present():
        pytest.skip("shared/tools/citus is not beside the repository")
    cluster = Cluster(build())
    cluster.start()
    with psycopg.connect(cluster.url(cluster.ports[0]), autocommit=True) as conn:
        conn.execute("ALTER SYSTEM SET citus.enable_stat_counters = on")
        conn.execute("SELECT pg_reload_conf()")
    yield cluster
    cluster.stop()
    shutil.rmtree(cluster.data, ignore_errors=True)
