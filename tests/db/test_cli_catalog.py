"""``kb-retriever projects``, ``documents`` and ``delete`` (issue 28: a user opened psql), and
a truthful ``search --explain``."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from kb_retriever.cli import main

pytestmark = pytest.mark.db

ADR = """---
slug: dec-cache
type: decision
status: accepted
---
# Redis as the cache layer

We standardise on Redis cluster for the shared cache layer.
"""


@pytest.fixture
def url(new_database: Callable[[], str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> str:
    monkeypatch.setenv("KB_EMBEDDER", "hashing")
    url = new_database()
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "dec-cache.md").write_text(ADR)
    (tmp_path / "a" / "notes.md").write_text("# Notes\n\nLunch is at noon.\n\n## More\n\nTea.\n")
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "runbook.md").write_text("# Restart\n\nRestart the worker pool.\n")
    assert main(["--database-url", url, "ingest", str(tmp_path / "a"), "--project",
                 "platform"]) == 0
    assert main(["--database-url", url, "ingest", str(tmp_path / "b"), "--project", "ops"]) == 0
    capsys.readouterr()
    return url


def _json(capsys: pytest.CaptureFixture[str], *argv: str) -> object:
    assert main(list(argv)) == 0
    return json.loads(capsys.readouterr().out)


def test_projects_lists_counts_and_the_model(url: str,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    got = _json(capsys, "--database-url", url, "projects", "--json")
    assert [(p["project"], p["documents"]) for p in got] == [("ops", 1), ("platform", 2)]
    assert all(p["chunks"] >= p["documents"] for p in got)
    # both projects are bound to the one model they were written with
    assert len({(p["model_id"], p["dimension"]) for p in got}) == 1
    assert got[0]["model_id"] and got[0]["dimension"] > 0
    assert main(["--database-url", url, "projects"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["project", "documents", "chunks", "model", "dimension"]
    assert lines[1].split()[:2] == ["ops", "1"] and lines[2].split()[:2] == ["platform", "2"]
    assert _json(capsys, "--database-url", url, "projects", "--tenant", "other", "--json") == []


def test_documents_lists_ids_titles_types_statuses(url: str,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    got = _json(capsys, "--database-url", url, "documents", "--project", "platform", "--json")
    by_slug = {d["slug"]: d for d in got}
    assert set(by_slug) == {"dec-cache", None}
    adr = by_slug["dec-cache"]
    assert adr["title"] == "Redis as the cache layer" and adr["canonical_type"] == "decision"
    assert adr["canonical_status"] == "accepted" and adr["id"].endswith("dec-cache.md")
    assert by_slug[None]["chunks"] >= 1 and by_slug[None]["canonical_type"] is None
    assert main(["--database-url", url, "documents", "--project", "platform"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].split() == ["id", "slug", "title", "type", "status", "chunks"]
    assert "dec-cache" in out and "decision" in out and "accepted" in out
    assert main(["--database-url", url, "documents", "--project", "none"]) == 0
    assert "no documents in project none" in capsys.readouterr().out


def test_delete_by_slug_and_id_says_what_went(url: str,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    docs = _json(capsys, "--database-url", url, "documents", "--project", "platform", "--json")
    notes = next(d["id"] for d in docs if d["slug"] is None)
    assert main(["--database-url", url, "delete", "dec-cache", notes, "--project",
                 "platform"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("deleted 2 documents from project platform: ") and notes in out
    assert _json(capsys, "--database-url", url, "documents", "--project", "platform",
                 "--json") == []
    # an unknown key: nothing else happens, exit 2, and the output says which
    assert main(["--database-url", url, "delete", "runbook-typo", "--project", "ops",
                 "--json"]) == 2
    out = capsys.readouterr()
    assert json.loads(out.out) == {
        "project": "ops", "tenant": "default", "deleted": [], "deleted_count": 0,
        "not_found": ["runbook-typo"]}
    # bad input says so on stderr, in one line (it went to stdout alone)
    assert out.err == "kb-retriever: not found in project ops: runbook-typo\n"
    assert [p["project"] for p in _json(capsys, "--database-url", url, "projects",
                                        "--json")] == ["ops"]


def test_explain_names_where_the_legs_ranked_a_chunk(url: str,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """--explain printed "fts rank=None" next to "keyword=0.805"."""
    assert main(["--database-url", url, "search", "redis cache layer", "--project",
                 "platform", "--explain"]) == 0
    out = capsys.readouterr().out
    assert "rank=None" not in out and "fts rank" not in out
    assert "vector leg #1, full-text leg #1" in out
    # a search by embedding alone: the full-text leg did not run, and --explain says so
    from kb_retriever import KnowledgeBase
    from kb_retriever.prompt.render import render_result
    from kb_retriever.search.modes import Legs

    with KnowledgeBase(database_url=url, project="platform") as kb:
        result = kb.search(None, query_embedding=kb.embedder.embed_query("lunch"),
                           legs=Legs(min_similarity=-1.0))
    text = render_result(result, explain=True)
    assert "full-text leg: off" in text and "full-text leg #" not in text


def test_listing_and_deleting_with_another_embedder_leave_the_models_and_calibration_alone(
        url: str, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Run with another embedder than the data's (``KB_EMBEDDER`` unset: MiniLM), the listing
    and delete commands registered its model, built its index (a ``CREATE INDEX`` that holds
    every write back) and loaded it; the delete then calibrated the project with probes that
    find none of its chunks, and left it uncalibrated."""
    import psycopg

    def state() -> tuple[list[tuple[str, int]], list[str], tuple[str, int]]:
        with psycopg.connect(url) as conn:
            models = conn.execute("SELECT model_id, dimension FROM kb_models ORDER BY id").fetchall()
            indexes = [r[0] for r in conn.execute(
                "SELECT indexname FROM pg_indexes WHERE indexname LIKE 'kb_chunks_hnsw_%' "
                "ORDER BY 1")]
            calibration = conn.execute(
                "SELECT probe_model, cardinality(probe_similarity) FROM kb_scope_stats "
                "WHERE project_key = 'platform'").fetchone()
        return models, indexes, calibration

    before = state()
    assert before[2][1] > 0  # calibrated by the ingest
    monkeypatch.delenv("KB_EMBEDDER")
    _json(capsys, "--database-url", url, "projects", "--json")
    docs = _json(capsys, "--database-url", url, "documents", "--project", "platform", "--json")
    notes = next(d["id"] for d in docs if d["slug"] is None)  # type: ignore[attr-defined]
    deleted = _json(capsys, "--database-url", url, "delete", notes, "--project", "platform",
                    "--json")
    assert deleted["deleted_count"] == 1  # type: ignore[index]
    assert state() == before


def test_delete_reads_only_the_documents_it_names(url: str) -> None:
    """``delete`` resolved its keys against every document of the project, each with its
    chunk count: a project of a million chunks was read whole to delete one document."""
    from kb_retriever.kb import CatalogBase

    with CatalogBase(database_url=url, project="platform") as kb:
        named = kb.list_documents(keys=["dec-cache", "notes.md", "nope", "notes.md"])
        assert [(d.id, d.slug, d.chunks) for d in named] == [
            ("dec-cache.md", "dec-cache", 1), ("notes.md", None, 2)]
        assert len(kb.list_documents()) == 2 and kb.list_documents(keys=[]) == []
