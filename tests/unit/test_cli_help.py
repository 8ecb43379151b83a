"""The command line reads well: plain help for every command and option, --version, and
``--help`` without importing numpy, psycopg, the model runtime or the MCP SDK."""

from __future__ import annotations

import io
import subprocess
import sys

import pytest

from kb_retriever.cli import build_parser, main
from kb_retriever.write.progress import Progress

COMMANDS = ("ingest", "search", "prompt", "bench", "doctor", "mcp")


def _help(*argv: str) -> str:
    out = subprocess.run([sys.executable, "-m", "kb_retriever", *argv, "--help"],
                         capture_output=True, text=True, check=True)
    return out.stdout


@pytest.mark.parametrize("command", [None, *COMMANDS])
def test_help_has_no_markup_and_every_option_is_explained(command: str | None) -> None:
    text = _help(*([command] if command else []))
    for markup in ("``", ":class:", ":func:", ":meth:"):
        assert markup not in text
    parser = build_parser()
    actions = parser._actions if command is None else \
        parser._subparsers._group_actions[0].choices[command]._actions  # type: ignore[union-attr]
    for action in actions:
        if action.option_strings or action.dest not in ("command", "help"):
            assert action.help, f"{command} {action.option_strings or action.dest} has no help"


def test_version() -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0


def test_help_imports_nothing_heavy() -> None:
    code = ("import sys; from kb_retriever.cli import build_parser; build_parser(); "
            "heavy = [m for m in ('numpy', 'psycopg', 'onnxruntime', 'pydantic', 'mcp') if m in sys.modules];"
            "print(','.join(heavy))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_progress_without_a_terminal_prints_plain_periodic_lines() -> None:
    stream = io.StringIO()
    progress = Progress("ingest", stream=stream, interval_s=0.0)
    for i in range(3):
        progress(i, 3, f"f{i}.md")
    progress(3, 3, "")
    assert stream.getvalue().splitlines() == [
        "ingest: 0/3 files (0%)", "ingest: 1/3 files (33%)", "ingest: 2/3 files (66%)",
        "ingest: 3/3 files (100%)"]
    quiet = io.StringIO()
    slow = Progress("ingest", stream=quiet, interval_s=3600)
    for i in range(50):
        slow(i, 50, "x")
    slow(50, 50, "")
    assert len(quiet.getvalue().splitlines()) == 2  # the start and the end
