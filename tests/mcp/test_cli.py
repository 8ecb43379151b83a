"""`kb-retriever mcp` refuses what it cannot serve safely, in one line with exit code 2."""

from __future__ import annotations

import subprocess
import sys

import pytest


def _run(*args: str, code: str | None = None) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-c", code] if code else [sys.executable, "-m", "kb_retriever", *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)


@pytest.mark.parametrize("host", ["0.0.0.0", "192.168.1.10", "example.com"])
def test_http_binds_loopback_only(host: str) -> None:
    out = _run("mcp", "--transport", "streamable-http", "--host", host, "--port", "1")
    assert out.returncode == 2
    assert out.stderr == (f"kb-retriever: --host {host} is not a loopback address; the MCP server "
                          "has no authentication, so it binds 127.0.0.1, ::1 or localhost only\n")


def test_missing_extra_is_an_install_hint() -> None:
    code = ("import sys; sys.modules['mcp'] = None; from kb_retriever.cli import main; "
            "sys.exit(main(['mcp', '--project', 'p']))")
    out = _run(code=code)
    assert out.returncode == 2
    assert out.stderr.startswith("kb-retriever: the MCP server needs the mcp extra: "
                                 "pip install 'kb-retriever[mcp]'")


def test_a_host_given_with_stdio_is_not_checked() -> None:
    """stdio listens on no address, and the CLI checks --host only for HTTP; the server then
    refused 0.0.0.0 anyway, over stdio. With stdin at its end it starts and stops."""
    out = _run("--database-url", "postgresql://u@127.0.0.1:1/x", "mcp", "--host", "0.0.0.0")
    assert out.returncode == 0, out.stderr
