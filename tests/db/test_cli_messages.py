"""What the command line tells a person: hints, progress, whole numbers."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from kb_retriever.cli import main

pytestmark = pytest.mark.db


@pytest.fixture
def url(new_database: Callable[[], str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> str:
    monkeypatch.setenv("KB_EMBEDDER", "hashing")
    url = new_database()
    (tmp_path / "a.md").write_text("# Redis\n\nredis is the cache layer\n")
    assert main(["--database-url", url, "ingest", str(tmp_path), "--project", "platform"]) == 0
    capsys.readouterr()
    return url


def test_a_misspelt_project_gets_a_hint(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--database-url", url, "search", "redis", "--project", "platfrom"]) == 0
    err = capsys.readouterr().err
    assert "hint: project platfrom of tenant default has no documents" in err
    assert "platform (1)" in err
    assert main(["--database-url", url, "search", "redis", "--project", "platform"]) == 0
    assert "hint" not in capsys.readouterr().err


def test_ingest_progress_is_printed_when_not_a_terminal(url: str, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    for i in range(3):
        (tmp_path / f"n{i}.md").write_text(f"# N{i}\n\nnote {i}\n")
    assert main(["--database-url", url, "ingest", str(tmp_path), "--project", "p2"]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "ingest: 0/4 files (0%)" and err[-1] == "ingest: 4/4 files (100%)"


def test_explain_rounds_numbers(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--database-url", url, "search", "redis cache", "--project", "platform",
                 "--explain"]) == 0
    out = capsys.readouterr().out
    assert "raw sim=" in out
    raw = out.split("raw sim=")[1].split(",")[0]
    assert len(raw.split(".")[-1]) <= 3


def test_search_prints_document_fields_escaped(url: str, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    """A title, slug or heading holding ESC cleared or recoloured the terminal on
    ``kb-retriever search``; a line break in one forged a row of the table."""
    (tmp_path / "rej.md").write_text(
        '---\nslug: "rej-\\e[31mred"\ntype: rejected-approach\nstatus: rejected\n'
        'title: "Memcached\\e[2J\\nfake row"\n---\n# Memcached \x1b[1mbold\n\n'
        "redis cache layer was rejected\n", encoding="utf-8")
    (tmp_path / "dec.md").write_text(
        '---\nslug: dec-cache\ntype: decision\nstatus: accepted\nrejected: ["[[rej-\\e[31mred]]"]\n'
        "---\n# Redis \x1b[2J cache\n\nredis is the cache layer\n", encoding="utf-8")
    assert main(["--database-url", url, "ingest", str(tmp_path), "--project", "esc"]) == 0
    capsys.readouterr()
    assert main(["--database-url", url, "search", "redis cache layer \x1b[2J", "--project",
                 "esc"]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\\x1b" in out
    assert not any(line.startswith("fake row") for line in out.splitlines())


def test_a_prompt_over_several_projects_names_them_all(url: str,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """``prompt --also-project`` said ``Project: platform`` over chunks of both projects."""
    assert main(["--database-url", url, "prompt", "redis cache", "--project", "platform",
                 "--also-project", "other"]) == 0
    assert "Project: platform, other" in capsys.readouterr().out


def test_a_prompt_on_a_terminal_shows_escapes_and_says_when_the_gate_refuses(
        url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """``prompt`` printed a document's escape sequences raw (``search`` shows them escaped),
    and gave no sign when the grounding gate refused: the prompt went to a model anyway."""
    (tmp_path / "esc.md").write_text("# Redis \x1b[2J cache\n\nredis \x1b]0;pwned\x07 is the "
                                     "cache layer\n\tindented\n", encoding="utf-8")
    assert main(["--database-url", url, "ingest", str(tmp_path / "esc.md"), "--project",
                 "tty"]) == 0
    capsys.readouterr()
    monkeypatch.setattr("sys.stdout.isatty", lambda: True)
    assert main(["--database-url", url, "prompt", "redis cache layer", "--project", "tty"]) == 0
    shown = capsys.readouterr()
    assert "\x1b" not in shown.out and "\\x1b]0;pwned\\x07" in shown.out
    assert "\n\tindented\n" in shown.out and "grounding gate" not in shown.err
    monkeypatch.setattr("sys.stdout.isatty", lambda: False)
    assert main(["--database-url", url, "prompt", "redis cache layer", "--project", "tty"]) == 0
    assert "\x1b]0;pwned\x07" in capsys.readouterr().out  # a pipe gets the text as stored
    assert main(["--database-url", url, "prompt", "chocolate souffle recipe", "--project",
                 "tty"]) == 0
    assert "the grounding gate refuses this question" in capsys.readouterr().err
