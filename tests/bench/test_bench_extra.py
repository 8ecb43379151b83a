"""ranx is the `bench` extra: without it, `kb-retriever bench` says what to install, at once."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

from kb_retriever.cli import main


def test_bench_without_ranx_names_the_extra(tmp_path, capsys, monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "ranx" else real(name, *a))
    queries = tmp_path / "q.yaml"
    queries.write_text("queries:\n  - id: q1\n    query: x\n    relevance: {a: 1}\n", "utf-8")
    # No database option: the check comes before anything is opened or ingested.
    assert main(["bench", "--corpus", str(tmp_path), "--queries", str(queries)]) == 2
    err = capsys.readouterr().err
    assert "pip install 'kb-retriever[bench]'" in err and "Traceback" not in err


def test_the_core_imports_no_benchmark_stack():
    code = ("import sys, kb_retriever.cli, kb_retriever.bench.command, kb_retriever.bench.metrics; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('ranx', 'numba')))")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    assert out.stdout.strip() == "[]"
