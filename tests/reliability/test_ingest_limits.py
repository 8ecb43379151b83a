"""Ingest never aborts on one file, stays bounded, and follows only what it was given."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from kb_retriever import HashingEmbedder, InputError, KnowledgeBase, Settings
from kb_retriever.cli import main
from kb_retriever.write.from_files import EMBED_BATCH

pytestmark = pytest.mark.db

MakeKb = Callable[..., KnowledgeBase]


def _write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def _paths(kb: KnowledgeBase, project: str = "default") -> list[str]:
    import psycopg

    with psycopg.connect(kb.url) as conn:
        rows = conn.execute("SELECT source_path FROM kb_documents WHERE project_key = %s "
                            "ORDER BY 1", [project]).fetchall()
    return [r[0] for r in rows]


def test_a_huge_heading_neither_fails_nor_stops_the_run(make_kb: MakeKb, tmp_path: Path) -> None:
    # 1.7 MB of heading text overflowed the chunk's tsvector (limit 1 MB) and stopped the run.
    words = " ".join(f"w{i}" for i in range(250_000))
    _write(tmp_path, "a-huge.md", f"# {words}\n\nbody text about caches\n")
    _write(tmp_path, "b-fine.md", "# Fine\n\nredis is our cache\n")
    kb = make_kb()
    report = kb.ingest(tmp_path)
    assert report.failed == []
    assert sorted(report.added) == ["a-huge.md", "b-fine.md"]
    hit = kb.search("caches body").primary[0]
    assert len(hit.heading_path) <= 200


def test_database_failures_are_reported_per_file_and_the_run_goes_on(
        make_kb: MakeKb, tmp_path: Path) -> None:
    import psycopg

    for name in ("a.md", "b-rejected.md", "c-slow.md", "d.md"):
        _write(tmp_path, name, f"# {name}\n\ntext of {name}\n")
    kb = make_kb(settings=Settings(ingest_statement_timeout_ms=300))
    with psycopg.connect(kb.url, autocommit=True) as conn:  # the database refuses one file...
        conn.execute("ALTER TABLE kb_documents ADD CONSTRAINT t_no_b "
                     "CHECK (source_path <> 'b-rejected.md')")
        conn.execute(  # ... and takes too long over another
            "CREATE FUNCTION t_slow() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
            "IF NEW.source_path = 'c-slow.md' THEN PERFORM pg_sleep(2); END IF; RETURN NEW; END $$")
        conn.execute("CREATE TRIGGER t_slow BEFORE INSERT ON kb_documents "
                     "FOR EACH ROW EXECUTE FUNCTION t_slow()")
    report = kb.ingest([tmp_path])
    assert report.added == ["a.md", "d.md"]
    failed = dict(report.failed)
    assert list(failed) == ["b-rejected.md", "c-slow.md"]
    assert "t_no_b" in failed["b-rejected.md"] and "cancel" in failed["c-slow.md"]
    with psycopg.connect(kb.url) as conn:  # nothing half-written for the failed files
        rows = conn.execute("SELECT source_path FROM kb_documents ORDER BY 1").fetchall()
    assert rows == [("a.md",), ("d.md",)]
    # The connection went back to the pool with the search timeout, not the ingest's.
    with kb._pools.sync().connection() as conn:
        assert conn.execute("SHOW statement_timeout").fetchone() == ("10s",)


def test_one_path_string_is_one_path(make_kb: MakeKb, tmp_path: Path) -> None:
    _write(tmp_path, "one.md", "# One\n\nthe only document\n")
    kb = make_kb()
    assert kb.ingest(str(tmp_path)).added == ["one.md"]
    assert kb.ingest(tmp_path / "one.md").unchanged == ["one.md"]
    for bad in ([5], [None], [""], 5, []):
        with pytest.raises(InputError):
            kb.ingest(bad)  # type: ignore[arg-type]


def test_symlinks_leaving_the_root_are_not_followed(make_kb: MakeKb, tmp_path: Path) -> None:
    root, outside = tmp_path / "kb", tmp_path / "secret"
    _write(root, "inside.md", "# Inside\n\npublic note\n")
    secret = _write(outside, "passwords.md", "# Secret\n\nzebracorn launch codes\n")
    os.symlink(secret, root / "link.md")
    os.symlink(outside, root / "linked-dir")
    os.symlink(root / "inside.md", root / "alias.md")  # stays inside: the same file, once
    kb = make_kb()
    report = kb.ingest([root])
    assert sorted(report.added) == ["inside.md"]
    assert sorted(p for p, _ in report.skipped) == ["alias.md", "link.md", "linked-dir"]
    assert kb.search("zebracorn launch codes").primary == ()
    allowed = kb.ingest([root], follow_symlinks=True)
    # link.md and linked-dir/passwords.md are one real file: read once (issue 23)
    assert sorted(allowed.added) == ["link.md"]
    assert ("linked-dir/passwords.md", "the same file as link.md, read once") in allowed.skipped
    assert ("inside.md" in allowed.unchanged) and ("alias.md", "the same file as inside.md, "
                                                   "read once") in allowed.skipped


def test_two_roots_with_the_same_relative_path_never_overwrite(make_kb: MakeKb,
                                                               tmp_path: Path) -> None:
    _write(tmp_path / "a", "x.md", "# X\n\nfrom root a\n")
    _write(tmp_path / "b", "x.md", "# X\n\nfrom root b\n")
    kb = make_kb()
    for _ in range(2):  # every run, not only the first
        report = kb.ingest([tmp_path / "a", tmp_path / "b"])
        assert [p for p, _ in report.failed] == ["x.md"]
        assert "same relative path" in report.failed[0][1]
    assert "from root a" in kb.search("root").primary[0].text
    # Nor across runs: b alone may not take over a's x.md while a's file is still there ...
    clash = kb.ingest([tmp_path / "b"])
    assert [p for p, _ in clash.failed] == ["x.md"] and "already holds" in clash.failed[0][1]
    assert "from root a" in kb.search("root").primary[0].text
    # ... but once it is gone, the file moved: b's version replaces it.
    (tmp_path / "a" / "x.md").unlink()
    assert kb.ingest([tmp_path / "b"]).updated == ["x.md"]


def test_prune_removes_exactly_the_gone_files_under_the_given_roots(make_kb: MakeKb,
                                                                    tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    gone = _write(a, "gone.md", "# Gone\n\nsoon deleted\n")
    _write(a, "kept.md", "# Kept\n\nstill here\n")
    _write(b, "other.md", "# Other\n\nanother root\n")
    kb = make_kb()
    kb.ingest([a])
    kb.ingest([b])
    gone.unlink()
    report = kb.ingest([a / "kept.md"], prune=True)  # a file named: its folder is the root
    assert report.deleted == 1
    assert _paths(kb) == ["kept.md", "other.md"]
    assert kb.ingest([a], prune=True).deleted == 0  # nothing else is gone


def test_a_folder_then_its_parent_hold_each_file_once(make_kb: MakeKb, tmp_path: Path) -> None:
    """A file's id is its path from the root it was ingested from: ingesting docs/adr, then
    docs, stored adr's files twice (a canonical one failed on its own slug instead), and a
    prune of docs never removed the first copy once the file was gone."""
    docs = tmp_path / "docs"
    adr = _write(docs / "adr", "0001.md", "---\nslug: dec-cache\ntype: decision\n"
                                          "status: accepted\n---\n# Cache\n\nWe use Redis.\n")
    note = _write(docs / "adr", "note.md", "# Note\n\nRedis sizing notes.\n")
    kb = make_kb()
    kb.ingest([docs / "adr"])
    report = kb.ingest([docs])
    assert report.failed == [] and sorted(report.added) == ["adr/0001.md", "adr/note.md"]
    assert ("adr/note.md", f"the same file was stored as note.md (ingested from "
                           f"{(docs / 'adr').resolve()}); replaced") in report.warnings
    assert _paths(kb) == ["adr/0001.md", "adr/note.md"]
    back = kb.ingest([docs / "adr"])  # and back: the latest root names the file
    assert back.failed == [] and _paths(kb) == ["0001.md", "note.md"]
    note.unlink()
    adr.unlink()
    assert kb.ingest([docs], prune=True).deleted == 2  # from a folder inside the root
    assert _paths(kb) == []


def test_a_parent_after_its_subfolder_holds_both_files_of_one_name(
        make_kb: MakeKb, tmp_path: Path) -> None:
    """docs/sub/a.md was stored as a.md; an ingest of docs read docs/a.md first and failed it
    as a clash with that record, which the same run then re-keyed to sub/a.md: the failure
    lasted until the ingest ran again."""
    docs = tmp_path / "docs"
    _write(docs, "a.md", "# Top\n\nthe top-level note\n")
    _write(docs / "sub", "a.md", "# Inner\n\nthe inner note\n")
    kb = make_kb()
    kb.ingest([docs / "sub"])
    report = kb.ingest([docs])
    assert report.failed == [] and sorted(report.added) == ["a.md", "sub/a.md"]
    assert _paths(kb) == ["a.md", "sub/a.md"]


@pytest.mark.parametrize("order", ["inner first", "outer first"])
def test_overlapping_roots_in_one_ingest_store_each_file_once(
        make_kb: MakeKb, tmp_path: Path, order: str) -> None:
    """``ingest docs/sub docs`` stored docs/sub's files twice, as x.md and as sub/x.md (and
    failed a.md, the same relative path under two roots)."""
    docs = tmp_path / "docs"
    _write(docs, "a.md", "# Top\n\nthe top-level note\n")
    _write(docs / "sub", "a.md", "# Inner\n\nthe inner note\n")
    _write(docs / "sub", "x.md", "# X\n\nonly in sub\n")
    named = [docs / "sub", docs / "sub" / "x.md", docs]
    kb = make_kb()
    report = kb.ingest(named if order == "inner first" else named[::-1])
    assert report.failed == [], report
    assert sorted(report.added) == ["a.md", "sub/a.md", "sub/x.md"]
    assert _paths(kb) == ["a.md", "sub/a.md", "sub/x.md"]
    inside = f"inside {docs}, which this ingest also names: its files are read from there"
    assert sorted(report.warnings) == [(str(docs / "sub"), inside),
                                       (str(docs / "sub" / "x.md"), inside)]


class CountingEmbedder(HashingEmbedder):
    def __init__(self, dim: int) -> None:
        super().__init__(dim)
        self.batches: list[int] = []

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        self.batches.append(len(texts))
        return super().embed_documents(texts)


def test_embedding_is_batched_and_chunk_count_is_limited(make_kb: MakeKb, tmp_path: Path) -> None:
    many = "\n\n".join(f"# Heading {i}\n\nparagraph number {i}" for i in range(600))
    _write(tmp_path / "ok", "many.md", many)
    embedder = CountingEmbedder(64)
    kb = make_kb(embedder=embedder)
    report = kb.ingest([tmp_path / "ok"])
    assert report.chunks_written == 600 and max(embedder.batches) <= EMBED_BATCH
    _write(tmp_path / "big", "too-many.md", many)
    _write(tmp_path / "big", "small.md", "# Small\n\nfine\n")
    assert Settings().ingest_max_chunks < 20_000  # the 20,000-heading file fails
    limited = make_kb(settings=Settings(ingest_max_chunks=100))
    report = limited.ingest([tmp_path / "big"])
    assert report.added == ["small.md"]
    assert report.failed == [("too-many.md", "more than KB_INGEST_MAX_CHUNKS=100 chunks; "
                                             "split the file or raise the limit")]


def test_empty_and_unsupported_files_are_reported_the_same_way_everywhere(
        make_kb: MakeKb, tmp_path: Path) -> None:
    _write(tmp_path, "empty.md", "")
    _write(tmp_path, "picture.png", "not really")
    _write(tmp_path, "ok.md", "# Ok\n\ntext\n")
    kb = make_kb()
    folder = kb.ingest([tmp_path])
    named = kb.ingest([tmp_path / "empty.md", tmp_path / "picture.png"])
    for report in (folder, named):
        assert sorted(p for p, _ in report.skipped) == ["empty.md", "picture.png"]
        assert report.failed == []


def test_a_file_emptied_to_no_text_stops_serving_its_old_text(make_kb: MakeKb,
                                                               tmp_path: Path) -> None:
    """Its stored version went on answering searches ("skipped: no text"). An empty file of
    the same name under another root is another file: the stored one stays."""
    mine, other = tmp_path / "mine", tmp_path / "other"
    _write(mine, "cache.md", "# Cache\n\nWe cache sessions in redis.\n")
    _write(other, "cache.md", "")
    kb = make_kb()
    kb.ingest([mine])
    assert kb.ingest([other]).deleted == 0 and _paths(kb) == ["cache.md"]
    _write(mine, "cache.md", "")
    report = kb.ingest([mine])
    assert report.deleted == 1 and report.skipped == [
        ("cache.md", "no text to index; the version stored before was removed")]
    assert _paths(kb) == [] and not kb.search("redis sessions").primary
    again = kb.ingest([mine])
    assert again.deleted == 0 and again.skipped == [("cache.md", "no text to index")]


def test_cli_exit_code_says_whether_anything_failed(
        new_database: Callable[[], str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("KB_EMBEDDER", "hashing")
    _write(tmp_path, "good.md", "# Good\n\nfine\n")
    bad = tmp_path / "bad\x1b[2J\nname.md"
    bad.write_bytes(b"\xff\xfe not utf-8")
    args = ["--database-url", new_database(), "ingest"]
    assert main([*args, str(tmp_path)]) == 1  # a folder with one bad file
    out = capsys.readouterr().out
    assert "\x1b" not in out and "bad\\x1b[2J\\nname.md" in out
    assert main([*args, str(bad)]) == 1  # the same file named explicitly
    assert main([*args, str(tmp_path / "good.md")]) == 0


def test_prune_keeps_a_file_it_cannot_look_at(make_kb: MakeKb, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """A folder without read permission under the root: prune's look at its files raised
    PermissionError, which the store's boundary reported as "the database could not be
    reached", and the ingest's report was lost. A file that cannot be looked at is not known
    to be gone: it stays. (The test runs as root, whom permissions do not stop: the look fails
    as it does for a user.)"""
    a = tmp_path / "a"
    _write(a / "locked", "s.md", "# Secret\n\nbehind a folder without permission\n")
    _write(a, "open.md", "# Open\n\nreadable\n")
    kb = make_kb()
    kb.ingest([a])
    real = Path.is_file

    def is_file(path: Path) -> bool:
        if "locked" in path.parts:
            raise PermissionError(13, "Permission denied", str(path))
        return real(path)

    monkeypatch.setattr(Path, "is_file", is_file)
    report = kb.ingest([a], prune=True)
    assert report.deleted == 0
    assert _paths(kb) == ["locked/s.md", "open.md"]


def test_two_roots_ingested_at_once_keep_each_file_of_one_root(make_kb: MakeKb,
                                                               tmp_path: Path) -> None:
    """The clash check (another root's file of the same path) ran before the write's lock: two
    processes ingesting folders A and B into one project at once overwrote each other's files,
    reported "updated" (113 of 150). The write checks the root again under its lock: each path
    is the file of the root that wrote it first, and the other ingest reports it failed."""
    from concurrent.futures import ThreadPoolExecutor

    names = [f"x{i:03d}.md" for i in range(40)]
    for root in ("A", "B"):
        for name in names:
            _write(tmp_path / root, name, f"# {name}\n\nwritten under root {root}\n")
    kb = make_kb()
    with ThreadPoolExecutor(2) as pool:
        reports = dict(zip("AB", pool.map(lambda r: kb.ingest([tmp_path / r]), "AB"), strict=True))
    for root, report in reports.items():
        assert report.updated == [] and report.unchanged == [], root
        assert sorted(report.added + [p for p, _ in report.failed]) == names, root
    for doc in kb.get_by_ids(names):
        assert doc.id in reports[doc.text.split()[-1]].added  # the text of the root that wrote it
    assert len(kb.get_by_ids(names)) == len(names)


def test_a_moved_folder_takes_its_new_root(make_kb: MakeKb, tmp_path: Path) -> None:
    """After `mv kb-old kb`, an ingest of kb found every file unchanged and kept kb-old as
    their root: a prune of kb then missed a deleted file, and a new kb-old/b.md replaced
    kb/b.md silently."""
    old, new = tmp_path / "kb-old", tmp_path / "kb"
    _write(old, "a.md", "# A\n\nalpha\n")
    _write(old, "b.md", "# B\n\nbeta\n")
    kb = make_kb()
    kb.ingest([old])
    old.rename(new)
    assert sorted(kb.ingest([new], prune=True).unchanged) == ["a.md", "b.md"]
    (new / "a.md").unlink()
    assert kb.ingest([new], prune=True).deleted == 1
    _write(old, "b.md", "# B\n\nanother beta\n")
    [(path, reason)] = kb.ingest([old]).failed
    assert path == "b.md" and "already holds b.md" in reason
    # (a file reads back as written, its heading included: tests/db/test_file_text.py)
    assert [d.text for d in kb.get_by_ids(["a.md", "b.md"])] == ["# B\n\nbeta"]


def test_a_canonical_file_moved_within_the_root_keeps_its_slug_with_prune(
        make_kb: MakeKb, tmp_path: Path) -> None:
    """``git mv adr/0007.md adr/archive/0007.md``, then ``ingest docs --prune``: the new path
    failed (its slug was the old path's) and the prune, at the end of the run, deleted the old
    one: the decision was gone until the next run. The prune now runs first."""
    docs = tmp_path / "docs"
    (docs / "adr" / "archive").mkdir(parents=True)
    adr = docs / "adr" / "0007.md"
    adr.write_text("---\nslug: dec-cache\ntype: decision\nstatus: accepted\n---\n"
                   "# Redis is the cache\n\nWe chose Redis.\n")
    kb = make_kb()
    assert kb.ingest([docs]).failed == []
    adr.rename(docs / "adr" / "archive" / "0007.md")
    report = kb.ingest([docs], prune=True)
    assert report.failed == [] and report.deleted == 1
    assert _paths(kb) == ["adr/archive/0007.md"]
    assert kb.search("which cache did we choose").primary[0].document.slug == "dec-cache"


def test_a_prune_keeps_a_file_another_ingest_moved_meanwhile(make_kb: MakeKb, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """A prune read (root, path) pairs, looked for each file, then deleted by path alone: a
    file moved from a/ to b/ and ingested from b/ while the prune of a/ looked at its other
    files was deleted, though that ingest had reported it stored. It stays now: the delete
    takes a row only while it is still stored from the root the prune read."""
    import threading

    from kb_retriever.write import from_files

    a, b = tmp_path / "a", tmp_path / "b"
    _write(a, "x.md", "# X\n\nthe moved file\n")
    _write(a, "y.md", "# Y\n\nanother file\n")
    kb = make_kb()
    kb.ingest([a])
    (b / "x.md").parent.mkdir()
    (a / "x.md").rename(b / "x.md")
    looked, moved = threading.Event(), threading.Event()
    real_gone = from_files._gone

    def slow_gone(path: Path) -> bool:  # the prune looks at its files while b/ is ingested
        looked.set()
        assert moved.wait(60)
        return real_gone(path)

    monkeypatch.setattr(from_files, "_gone", slow_gone)
    pruned: list[int] = []
    prune = threading.Thread(target=lambda: pruned.append(kb.ingest([a], prune=True).deleted))
    prune.start()
    assert looked.wait(60)
    monkeypatch.setattr(from_files, "_gone", real_gone)  # b/'s ingest looks as usual
    report = kb.ingest([b])
    assert report.failed == [] and "x.md" in [*report.unchanged, *report.updated]
    moved.set()
    prune.join(60)
    assert not prune.is_alive() and pruned == [0]
    assert _paths(kb) == ["x.md", "y.md"] and "moved" in kb.search("the moved file").primary[0].text
