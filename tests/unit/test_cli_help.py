"""The command line reads well: plain help for every command and option, --version, and
``--help`` without importing numpy, psycopg, the model runtime or the MCP SDK."""

from __future__ import annotations

import io
import subprocess
import sys

import pytest

from kb_retriever.cli import build_parser, main
from kb_retriever.write.progress import Progress

COMMANDS = ("ingest", "search", "prompt", "bench", "doctor", "mcp", "projects", "documents",
            "delete")


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


@pytest.mark.parametrize("argv, expected", [
    (["--databse-url", "x", "search", "foo"],
     "unknown option '--databse-url' before the command; did you mean --database-url?"),
    (["--hme=kb-home", "search", "foo"], "unknown option '--hme' before the command; did you "
                                         "mean --home?"),
    (["--zzz", "search", "foo"], "unknown option '--zzz' before the command ("),
])
def test_a_misspelt_global_option_is_named(argv: list[str], expected: str,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    """``--databse-url x search foo`` reported "invalid choice: 'x'"."""
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert expected in err and "invalid choice" not in err and len(err.splitlines()) == 1


def test_known_global_options_and_their_prefixes_still_parse() -> None:
    from kb_retriever.cli import _check_global_options

    parser = build_parser()
    for argv in (["--database-url", "u", "-v", "search", "q"], ["--database-url=u", "search"],
                 ["--data", "u", "--home", "h", "projects"], ["search", "--zzz"]):
        _check_global_options(parser, argv)  # no SystemExit
    args = parser.parse_args(["--data", "u", "projects", "--json"])
    assert args.database_url == "u" and args.command == "projects" and args.json


def test_prompt_max_chars_says_it_is_a_soft_budget() -> None:
    text = " ".join(_help("prompt").split())
    assert "soft budget" in text and "may still be longer" in text


@pytest.mark.parametrize("port", ["0", "99999", "http"])
def test_an_mcp_port_out_of_range_is_a_usage_error(port: str,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """--port 99999 reached uvicorn: a traceback, then exit 1."""
    with pytest.raises(SystemExit) as exit_:
        main(["mcp", "--transport", "streamable-http", "--port", port])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert f"a port is a number from 1 to 65535, got {port!r}" in err
    assert len(err.splitlines()) == 1


@pytest.mark.parametrize("argv, env", [(["--home", ""], {}), ([], {"KB_HOME": ""}),
                                       (["--database-url", " "], {})])
def test_an_empty_home_is_a_usage_error(argv: list[str], env: dict[str, str],
                                        tmp_path, monkeypatch, capsys) -> None:
    """An empty home was the current directory: the server's cluster was made there. An empty
    --database-url (or database_url="") was libpq's defaults: another database."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("KB_DATABASE_URL", raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert main([*argv, "projects"]) == 2
    assert list(tmp_path.iterdir()) == []
    assert "empty" in capsys.readouterr().err


def test_a_reader_that_goes_away_ends_the_output_quietly(tmp_path) -> None:
    """``kb-retriever ... | head`` printed "unexpected BrokenPipeError" and exited 1."""
    script = ("import sys; from kb_retriever import cli\n"
              "cli.COMMANDS['search'] = lambda args: print('x' * 1_000_000) or 0\n"
              "sys.exit(cli.main(['search', 'q']))\n")
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, cwd=tmp_path)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.read(10)
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 1 and err == ""


@pytest.mark.parametrize("argv, message", [
    (["search", ""], "query is empty"),
    (["prompt", "  "], "query is empty"),
    (["search", "q", "--limit", "0"], "limit must be between 1 and"),
    (["search", "q", "--filters", "{bad"], "--filters is not valid JSON"),
    (["prompt", "q", "--filters", '{"colour": "red"}'], "colour"),
])
def test_a_bad_search_is_refused_before_any_database_is_opened(
        argv: list[str], message: str, tmp_path, monkeypatch, capsys) -> None:
    """They read as "the database could not be reached", or started the embedded server
    and loaded the model first, then refused the input."""
    monkeypatch.delenv("KB_DATABASE_URL", raising=False)
    home = tmp_path / "home"
    assert main(["--home", str(home), *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and "reached" not in err, err
    assert not home.exists()


def test_doctor_refuses_an_empty_database_url_or_home(tmp_path, monkeypatch, capsys) -> None:
    """doctor took them as not given: it diagnosed (and started) the default embedded
    server, where every other command says they are empty."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("KB_DATABASE_URL", raising=False)
    monkeypatch.setenv("KB_HOME", str(tmp_path / "default-home"))
    for argv in (["--database-url", " "], ["--home", ""]):
        assert main([*argv, "doctor"]) == 2
        assert "empty" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []
