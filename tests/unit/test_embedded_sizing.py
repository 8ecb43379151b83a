"""The embedded server's shared_buffers follows the memory it may use (store/embedded.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kb_retriever.store import embedded


def _physical() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


@pytest.mark.parametrize(("limit", "expected"), [
    ("max\n", None),  # cgroup v2 without a limit: the machine's memory
    ("1073741824\n", 1024**3),  # a 1 GiB container
    ("9223372036854771712\n", None),  # cgroup v1 without a limit: a huge number
])
def test_a_containers_limit_bounds_the_memory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              limit: str, expected: int | None) -> None:
    path = tmp_path / "memory.max"
    path.write_text(limit, encoding="ascii")
    monkeypatch.setattr(embedded, "_CGROUP_LIMITS", (tmp_path / "absent", path))
    memory = embedded._memory_bytes()
    assert memory == min(_physical(), expected or _physical())
    if expected == 1024**3 and _physical() > 1024**3:
        assert embedded.shared_buffers_mb() == 256


def test_the_size_is_a_quarter_within_bounds() -> None:
    assert embedded.shared_buffers_mb(64 * 1024**2) == 128  # never below 128 MB
    assert embedded.shared_buffers_mb(8 * 1024**3) == 2048
    assert embedded.shared_buffers_mb(1024**4) == 8192  # nor above 8 GB
    assert embedded.shared_buffers_mb(0) == 128


def test_unreadable_memory_keeps_the_former_size(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(embedded, "_memory_bytes", lambda: None)
    assert embedded.shared_buffers_mb() == 512
