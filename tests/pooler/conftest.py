"""Fixtures of the pooler tier (bouncer.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .bouncer import Bouncer, binary


@pytest.fixture(scope="module")
def bouncer(pg_server_url: str) -> Iterator[Bouncer]:
    if binary() is None:
        pytest.skip("PgBouncer is not installed (apt-get install pgbouncer)")
    b = Bouncer(pg_server_url, pool_size=2)
    yield b
    b.stop()
