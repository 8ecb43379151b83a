"""``kb-retriever bench`` through the real CLI entry point and a real database."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kb_retriever.cli import main

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "examples" / "benchmark" / "corpus"
QUERIES = ROOT / "examples" / "benchmark" / "queries.yaml"


def test_malformed_queries_exit_2(tmp_path, capsys):
    bad = tmp_path / "q.yaml"
    bad.write_text("queries:\n  - id: q1\n    query: x\n    relevance: {a: 9}\n", "utf-8")
    assert main(["bench", "--corpus", str(tmp_path), "--queries", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "grade of 'a' must be an integer 0..3, got 9" in err and "Traceback" not in err


@pytest.mark.db
def test_missed_gate_exits_3(new_database, tmp_path, capsys, monkeypatch):
    (tmp_path / "alpha.md").write_text("# Alpha\n\nalpha beta gamma delta\n", "utf-8")
    queries = tmp_path / "q.yaml"
    queries.write_text("queries:\n  - id: q1\n    query: alpha beta gamma\n"
                       "    relevance: {alpha: 3}\n", "utf-8")
    monkeypatch.setenv("KB_EMBEDDER", "hashing")
    monkeypatch.setenv("KB_BENCHMARK_THRESHOLD_MRR", "1.01")  # unreachable on purpose
    rc = main(["--database-url", new_database(), "bench", "--corpus", str(tmp_path),
               "--queries", str(queries), "--gate", "--tune"])
    out, err = capsys.readouterr()
    assert rc == 3
    assert "gate missed: mrr 1.0000 < 1.01" in err
    assert "MISS mrr" in out and "Tuning (coordinate ascent" in out


@pytest.mark.db
@pytest.mark.slow
def test_example_benchmark_passes_the_gates(new_database, capsys):
    """The CI gate: examples/benchmark with the default MiniLM embedder."""
    rc = main(["--database-url", new_database(), "bench", "--corpus", str(CORPUS),
               "--queries", str(QUERIES), "--k", "5", "--gate", "--json"])
    out = capsys.readouterr().out
    report = json.loads(out)
    assert rc == 0, [g for g in report["gates"] if not g["passed"]]
    assert report["k"] == 5 and report["queries"] == 57 and len(report["per_query"]) == 57
    assert report["ndcg_at_k"] >= 0.80
    assert report["mrr"] >= 0.85
    assert report["citation_precision"] >= 0.90
    assert report["refusal_accuracy"] >= 0.95
    assert all(g["passed"] for g in report["gates"])
    for key in ("precision_at_k", "recall_at_k", "answer_containment_at_k", "graph_recall",
                "rejected_recall", "rejected_precision", "latency_p50_ms", "latency_p95_ms"):
        assert key in report


@pytest.mark.db
def test_two_corpora_benched_in_one_database_are_scored_apart(new_database, tmp_path, capsys,
                                                               monkeypatch):
    """Both went to the project ``benchmark``: the second corpus was searched with the
    first's documents."""
    url = new_database()
    monkeypatch.setenv("KB_EMBEDDER", "hashing")
    for name in ("first", "second"):
        corpus = tmp_path / name / "corpus"
        corpus.mkdir(parents=True)
        (corpus / f"{name}-redis.md").write_text(f"# Redis {name}\n\nredis cache sizing\n",
                                                  "utf-8")
        queries = tmp_path / name / "q.yaml"
        queries.write_text(f"queries:\n  - id: q\n    query: redis cache sizing\n"
                           f"    relevance: {{{name}-redis: 3}}\n", "utf-8")
        rc = main(["--database-url", url, "bench", "--corpus", str(corpus), "--queries",
                   str(queries), "--json"])
        report = json.loads(capsys.readouterr().out)
        assert rc == 0 and report["per_query"][0]["ranked_doc_keys"] == [f"{name}-redis"]
