"""Symlinks are checked where a file is opened, not only where it is listed (issue 23, part
4): a file swapped for a link after listing is not read, a loop is one failed file, and
``follow_symlinks`` walks each folder once."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest

from kb_retriever import KnowledgeBase
from kb_retriever.write import from_files as ingestion_module

pytestmark = pytest.mark.db

MakeKb = Callable[..., KnowledgeBase]


def _write(folder: Path, name: str, content: str) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(content, encoding="utf-8")
    return path


def _stored(kb: KnowledgeBase) -> list[str]:
    with psycopg.connect(kb.url) as conn:
        return [r[0] for r in conn.execute("SELECT source_path FROM kb_documents ORDER BY 1")]


@pytest.mark.parametrize("follow", [False, True])
def test_a_symlink_loop_is_one_failed_file(make_kb: MakeKb, tmp_path: Path,
                                           follow: bool) -> None:
    _write(tmp_path, "a.md", "# A\n\nredis cache\n")
    (tmp_path / "d").mkdir()
    os.symlink("self.md", tmp_path / "d" / "self.md")  # ln -s self.md d/self.md
    os.symlink("pong", tmp_path / "d" / "ping")
    os.symlink("ping", tmp_path / "d" / "pong")
    kb = make_kb()
    report = kb.ingest([tmp_path], follow_symlinks=follow)
    assert report.added == ["a.md"]
    assert sorted(report.failed) == [("d/ping", "symlink loop; not read"),
                                     ("d/pong", "symlink loop; not read"),
                                     ("d/self.md", "symlink loop; not read")]


def test_follow_symlinks_walks_each_folder_once(make_kb: MakeKb, tmp_path: Path) -> None:
    root = tmp_path / "kb"
    _write(root, "a.md", "# A\n\nalpha notes\n")
    _write(root, "sub/b.md", "# B\n\nbeta notes\n")
    _write(tmp_path / "shared", "c.md", "# C\n\ngamma notes\n")
    os.symlink("..", root / "sub" / "up")  # a cycle: each file was indexed 41 times
    os.symlink(tmp_path / "shared", root / "one")  # two ways into one outside folder
    os.symlink(tmp_path / "shared", root / "two")
    kb = make_kb()
    report = kb.ingest([root], follow_symlinks=True)
    assert report.failed == []
    assert sorted(report.added) == ["a.md", "one/c.md", "sub/b.md"]
    assert sorted(report.skipped) == [("sub/up", "symlink to the ingest root, walked once"),
                                      ("two", "symlink to the folder one, walked once")]
    assert _stored(kb) == ["a.md", "one/c.md", "sub/b.md"]


def _swap_after_listing(monkeypatch: pytest.MonkeyPatch, swap: Callable[[], None]) -> None:
    """The test's hook between listing and reading: the real listing, then ``swap``."""
    real = ingestion_module.find_files

    def listed_then_swapped(*args: Any, **kwargs: Any) -> Any:
        found = real(*args, **kwargs)
        swap()
        return found

    monkeypatch.setattr(ingestion_module, "find_files", listed_then_swapped)


@pytest.mark.parametrize("follow", [False, True])
def test_a_file_swapped_for_a_symlink_after_listing_is_not_read(
        make_kb: MakeKb, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, follow: bool) -> None:
    root, outside = tmp_path / "kb", tmp_path / "secret"
    note = _write(root, "note.md", "# Note\n\npublic note\n")
    _write(root, "sub/inner.md", "# Inner\n\npublic inner\n")
    _write(root, "alias-target.md", "# Target\n\npublic target\n")
    os.symlink("alias-target.md", root / "alias.md")  # inside the root: listed
    secret = _write(outside, "passwords.md", "# Secret\n\nzebracorn launch codes\n")
    _write(outside, "inner.md", "# Secret\n\nzebracorn inner codes\n")

    def swap() -> None:
        note.unlink()  # a file becomes a link to a secret
        os.symlink(secret, note)
        (root / "sub").rename(tmp_path / "old-sub")  # a folder becomes a link
        os.symlink(outside, root / "sub")
        (root / "alias.md").unlink()  # a link is pointed elsewhere
        os.symlink(secret, root / "alias.md")

    _swap_after_listing(monkeypatch, swap)
    kb = make_kb()
    report = kb.ingest([root], follow_symlinks=follow)
    failed = dict(report.failed)
    # alias.md leads to alias-target.md, listed already: read once, never as alias (without
    # follow_symlinks too: it was a second document of the same file)
    assert ("alias.md", "the same file as alias-target.md, read once") in report.skipped
    assert sorted(failed) == ["note.md", "sub/inner.md"], report
    assert "changed between listing and reading" in failed["sub/inner.md"]
    assert "became one after it was listed" in failed["note.md"]
    assert report.added == ["alias-target.md"]
    assert kb.search("zebracorn launch codes").primary == ()
    assert _stored(kb) == ["alias-target.md"]


def test_a_broken_symlink_and_a_fifo_are_reported(make_kb: MakeKb, tmp_path: Path) -> None:
    """Both were left out of the report: neither failed nor skipped."""
    _write(tmp_path, "a.md", "# A\n\nredis cache\n")
    os.symlink("gone.md", tmp_path / "broken.md")
    os.mkfifo(tmp_path / "pipe.md")
    report = make_kb().ingest([tmp_path])
    assert report.failed == []
    assert sorted(report.skipped) == [
        ("broken.md", "broken symlink: its target does not exist"),
        ("pipe.md", "not a regular file (a FIFO, socket or device); not read")]


def test_one_folder_named_twice_or_a_link_to_a_file_beside_it_is_read_once(
        make_kb: MakeKb, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``ingest docs /abs/docs`` failed every file of the second spelling ("the same relative
    path as the file under docs"); without ``follow_symlinks`` a link inside the root to a
    file beside it became a second document of that file."""
    root = tmp_path / "docs"
    _write(root, "a.md", "# A\n\nalpha notes\n")
    os.symlink("a.md", root / "alias.md")
    os.symlink(root, tmp_path / "docs-link")
    monkeypatch.chdir(tmp_path)
    kb = make_kb()
    report = kb.ingest(["docs", root, tmp_path / "docs-link"])
    assert (report.added, report.failed) == (["a.md"], [])
    assert ("alias.md", "the same file as a.md, read once") in report.skipped
    assert _stored(kb) == ["a.md"]
