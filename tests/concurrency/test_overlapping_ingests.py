"""Two ingests at once of a folder and of a folder inside it: each file stays one document.

A file's id is its path from the root it was ingested from, so ``docs/sub/a.md`` is
``sub/a.md`` to an ingest of ``docs`` and ``a.md`` to one of ``docs/sub``. One after the
other, the second ingest finds the first's copy and replaces it; at once, each read the
project before the other wrote, and the file was stored twice.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psycopg
import pytest

from kb_retriever import HashingEmbedder, KnowledgeBase, Settings

pytestmark = pytest.mark.db

FILES = 12


def _stored(url: str) -> list[tuple[str, str]]:
    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT source_root, source_path FROM kb_documents "
                            "ORDER BY 1, 2").fetchall()
    return [(str(root), str(path)) for root, path in rows]


def test_a_folder_and_its_subfolder_ingested_at_once_hold_each_file_once(
        new_database: Callable[[], str], tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    (docs / "sub").mkdir(parents=True)
    (docs / "top.md").write_text("# Top\n\nthe top-level note\n", encoding="utf-8")
    for i in range(FILES):
        (docs / "sub" / f"n{i:02}.md").write_text(f"# Note {i}\n\ninner note number {i}\n",
                                                  encoding="utf-8")
    url = new_database()
    # Both ingests have read what the project holds before either writes a file.
    both_listed = threading.Barrier(2, timeout=60)

    def ingest(root: Path) -> None:
        def progress(done: int, total: int, rel: str) -> None:
            if done == 0:
                both_listed.wait()

        with KnowledgeBase(Settings(), embedder=HashingEmbedder(256), database_url=url) as kb:
            report = kb.ingest([root], progress=progress)
        assert report.failed == [], report.failed

    with ThreadPoolExecutor(2) as pool:
        for done in [pool.submit(ingest, docs), pool.submit(ingest, docs / "sub")]:
            done.result(timeout=120)

    stored = _stored(url)
    files = [Path(root, path).resolve() for root, path in stored]
    assert len(files) == len(set(files)) == FILES + 1, stored
