"""No benchmark script rots (issue 27): each one runs end to end on tiny data, for wiring,
not for speed. Each starts its own embedded server, as a user would run it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.citus.cluster import tools_present

pytestmark = [pytest.mark.db, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks"
SCIFACT = ROOT.parent / "shared" / "datasets" / "scifact"


def _run(*args: str, timeout: int = 600) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def test_perf_runs_on_a_few_hundred_chunks(tmp_path: Path) -> None:
    _run(str(BENCH / "perf.py"), "--sizes", "400", "--queries", "10", "--warmup", "2",
         "--rounds", "1", "--skip-peers", "--out-dir", str(tmp_path))
    res = json.loads((tmp_path / "perf-400.json").read_text())
    assert res["ingest"]["chunks"] == 400 and "error" not in res["kb"]
    assert res["kb"]["kb_unfiltered"]["n"] == 10
    assert 0.0 <= res["filtered_recall"]["recall_at_10"] <= 1.0


def test_load_runs_on_a_few_hundred_chunks(tmp_path: Path) -> None:
    _run(str(BENCH / "load.py"), "--size", "400", "--clients", "1,2", "--per-client", "5",
         "--queries", "20", "--rounds", "1", "--skip-peers", "--out-dir", str(tmp_path))
    assert list(tmp_path.glob("load-400*.json"))


def test_equivalence_dumps_and_compares(tmp_path: Path) -> None:
    dump = tmp_path / "a.json"
    _run(str(BENCH / "equivalence.py"), "dump", str(dump), "--queries", "3")
    out = _run(str(BENCH / "equivalence.py"), "compare", str(dump), str(dump))
    assert "72 searches before, 72 after, 0 differ" in out.stdout, out.stdout


def test_writers_runs_with_two_writers_and_a_reader(tmp_path: Path) -> None:
    _run(str(BENCH / "writers.py"), "--size", "400", "--writers", "1,2", "--readers", "1",
         "--seconds", "1", "--out-dir", str(tmp_path))
    res = json.loads((tmp_path / "writers-400.json").read_text())["current"]
    assert [level["writers"] for level in res["levels"]] == [0, 1, 2]
    assert all(level.get("failed_writes", 0) == 0 and level["failed_searches"] == 0
               for level in res["levels"])
    assert res["statistics_exact"] is True


def test_soak_runs_sync_and_async() -> None:
    for mode in ("sync", "async"):
        out = _run(str(BENCH / "soak.py"), "--searches", "20", "--every", "10", "--mode", mode)
        assert "| 20 |" in out.stdout, out.stdout


def test_scale_runs_on_one_server_and_a_replica(tmp_path: Path) -> None:
    """The Citus system of scale.py builds Citus (minutes on a new machine): the next test."""
    _run(str(BENCH / "scale.py"), "--size", "400", "--clients", "1,2", "--per-client", "5",
         "--systems", "single,replica", "--out-dir", str(tmp_path))
    res = json.loads((tmp_path / "scale-400.json").read_text())
    assert [level["searches"] for level in res["single"]] == [5, 10]
    assert set(res["replica"][0]["servers"]) == {"replica 1"}  # the replica answered


@pytest.mark.citus
@pytest.mark.skipif(not tools_present(), reason="shared/tools/citus is not beside the project")
def test_scale_runs_on_a_citus_cluster(tmp_path: Path) -> None:
    _run(str(BENCH / "scale.py"), "--size", "400", "--clients", "1", "--per-client", "5",
         "--systems", "citus", "--out-dir", str(tmp_path), timeout=2400)
    res = json.loads((tmp_path / "scale-400.json").read_text())
    assert res["load"]["citus"]["chunks"] == 400 and res["citus"][0]["searches"] == 5


@pytest.mark.skipif(not SCIFACT.is_dir(), reason="the SciFact files are beside the project")
def test_beir_smoke_runs(tmp_path: Path) -> None:
    _run(str(BENCH / "beir.py"), "--dataset", str(SCIFACT), "--smoke", "50", "--skip-peers",
         "--out", str(tmp_path / "scifact.json"))


def test_a_partial_beir_run_keeps_what_it_did_not_rerun() -> None:
    """``beir.py --skip-peers`` once overwrote the results file without the peers' rows, which
    load.py reads: its examples (``merged``) say what a run keeps."""
    _run("-m", "doctest", str(BENCH / "beir.py"))
