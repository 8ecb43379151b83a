"""Writes under concurrency: throughput with 1, 4 and 8 concurrent writers, and the search
latency while they write.

    .venv/bin/python benchmarks/writers.py [--size 20000] [--writers 1,4,8] [--seconds 20]
                                           [--readers 2] [--kb-tree NAME=DIR ...]

The knowledge base holds perf.py's synthetic corpus (``--size`` chunks in 10 projects,
bulk-loaded). A writer is a process of its own (an ingestion job, a web worker) calling
``add_documents`` in a loop for ``--seconds``: one document of 5 sections per call, into one
project, a new id three times in four, else a replacement of one of 8 ids shared by all writers
(so writers of one id race). Texts are the corpus's, embedded by the 384-d hashing embedder:
what is measured is the write path, not a model. Meanwhile ``--readers`` processes search (the
query vector given, as load.py's clients do). Per level: documents and chunks written per
second, write p50/p95, failed writes, and search p50/p95 beside a run without writers. At the
end, the statistics are compared with a recount of the chunks.

``--kb-tree NAME=DIR`` runs the same levels with kb-retriever from another source tree (the
code before a change) on a fresh database loaded the same way. Results:
benchmarks/results/writers-<size>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import perf  # noqa: E402  (the corpus, its loader and the percentiles are perf.py's)

SHARED = 8  # ids every writer replaces now and then
SECTIONS = 5


def _text(corpus: Any, rng: random.Random) -> str:
    rows = rng.sample(range(len(corpus.texts)), SECTIONS)
    return "# Note\n\n" + "\n\n".join(f"## Part {j}\n\n{corpus.texts[r]}"
                                      for j, r in enumerate(rows))


def writer(url: str, size: int, seconds: float, seed: int) -> None:
    """Add documents until the deadline; print the latencies, failures and chunk count."""
    import _synth

    from kb_retriever import HashingEmbedder, KnowledgeBase, Settings

    corpus = _synth.make_corpus(min(size, 5_000), seed=seed)
    rng = random.Random(seed)
    kb = KnowledgeBase(Settings(), embedder=HashingEmbedder(384), database_url=url,
                       tenant=perf.TENANT, project=perf.PROJECTS[0]).open()
    print("READY", flush=True)
    sys.stdin.readline()
    lat, failures, chunks, n = [], [], 0, 0
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        n += 1
        doc_id = f"shared-{rng.randrange(SHARED)}" if rng.random() < 0.25 else f"w{seed}-{n}"
        t = time.perf_counter()
        try:
            kb.add_documents([{"id": doc_id, "text": _text(corpus, rng)}])
            chunks += SECTIONS
        except Exception as exc:  # the benchmark counts every failure, whatever its type
            failures.append(f"{type(exc).__name__}: {str(exc)[:200]}")
        lat.append((time.perf_counter() - t) * 1000)
    kb.close()
    print(json.dumps({"lat": lat, "failures": failures, "chunks": chunks}), flush=True)


def reader(url: str, data: Path, seconds: float, offset: int) -> None:
    """Search until the deadline; print the latencies."""
    from kb_retriever import HashingEmbedder, KnowledgeBase, Settings

    qv = np.load(data / "qvec.npy")
    texts = json.loads((data / "queries.json").read_text())["texts"]
    kb = KnowledgeBase(Settings(), embedder=HashingEmbedder(384), database_url=url,
                       tenant=perf.TENANT).open()
    for i in range(10):  # warm-up
        kb.search(texts[i], limit=perf.K, project=perf.PROJECTS, query_embedding=qv[i])
    print("READY", flush=True)
    sys.stdin.readline()
    lat, failures, j = [], [], offset * 997
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        i = j % len(texts)
        j += 1
        t = time.perf_counter()
        try:
            kb.search(texts[i], limit=perf.K, project=perf.PROJECTS, query_embedding=qv[i])
        except Exception as exc:  # counted, as the writers' are
            failures.append(f"{type(exc).__name__}: {str(exc)[:200]}")
        lat.append((time.perf_counter() - t) * 1000)
    kb.close()
    print(json.dumps({"lat": lat, "failures": failures}), flush=True)


def _spawn(args: list[str], tree: Path | None) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(tree / "src")} if tree else None
    return subprocess.Popen([sys.executable, __file__, *args], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, env=env)


def run_level(url: str, data: Path, writers: int, readers: int, seconds: float, size: int,
              tree: Path | None) -> dict[str, Any]:
    procs = ([_spawn(["--writer", "--url", url, "--size", str(size), "--seconds", str(seconds),
                      "--seed", str(w + 1)], tree) for w in range(writers)]
             + [_spawn(["--reader", "--url", url, "--data", str(data), "--seconds",
                        str(seconds), "--seed", str(r)], tree) for r in range(readers)])
    try:
        for p in procs:  # the barrier: every process set up
            assert p.stdout is not None
            line = p.stdout.readline()
            if not line.startswith("READY"):
                raise RuntimeError(f"a process did not start: {line!r}")
        for p in procs:
            assert p.stdin is not None
            p.stdin.write("GO\n")
            p.stdin.flush()
        outs = [json.loads(p.communicate(timeout=seconds + 600)[0].strip().splitlines()[-1])
                for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    wrote, read = outs[:writers], outs[writers:]
    out: dict[str, Any] = {"writers": writers, "readers": readers, "seconds": seconds}
    if wrote:
        lat = [x for o in wrote for x in o["lat"]]
        fails = [f for o in wrote for f in o["failures"]]
        out.update({"documents_per_s": round((len(lat) - len(fails)) / seconds, 1),
                    "chunks_per_s": round(sum(o["chunks"] for o in wrote) / seconds, 1),
                    "write": perf.pct(lat), "failed_writes": len(fails),
                    "failure_examples": sorted(set(fails))[:3]})
    search = [x for o in read for x in o["lat"]]
    out["search"] = perf.pct(search) if search else None
    out["failed_searches"] = sum(len(o["failures"]) for o in read)
    return out


def statistics_exact(url: str) -> bool:
    """The scope statistics as searches read them equal a recount of the chunks."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        has_log = conn.execute("SELECT to_regclass('kb_lexeme_log') IS NOT NULL").fetchone()
        log = ("UNION ALL SELECT l.tenant_id, l.project_key, u.lexeme, u.n FROM kb_lexeme_log l, "
               "unnest(l.lexemes, l.deltas) AS u(lexeme, n)") if has_log and has_log[0] else ""
        stored = conn.execute(
            "SELECT tenant_id, project_key, lexeme, sum(n) FROM (SELECT tenant_id, project_key, "
            f"lexeme, chunks AS n FROM kb_lexemes {log}) t GROUP BY 1, 2, 3 HAVING sum(n) <> 0 "
            "ORDER BY 1, 2, 3").fetchall()
        counted = conn.execute(
            "SELECT c.tenant_id, c.project_key, u.lexeme, count(*) FROM kb_chunks c, "
            "unnest(c.tsv) AS u GROUP BY 1, 2, 3 ORDER BY 1, 2, 3").fetchall()
    return stored == counted


def run_tree(server_url: str, name: str, tree: Path | None, args: argparse.Namespace,
             data: Path, corpus: Any) -> dict[str, Any]:
    import psycopg
    from psycopg import sql
    from psycopg.conninfo import make_conninfo

    db = f"writers_{name}".replace("-", "_")
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(db)))
    url = make_conninfo(server_url, dbname=db)
    if tree is None:
        ingest = perf.load_kb(url, corpus)
    else:  # the other tree's schema and loader
        code = ("import sys, json; sys.path.insert(0, sys.argv[2]); import perf, _synth; "
                "print(json.dumps(perf.load_kb(sys.argv[1], _synth.make_corpus(int(sys.argv[3])))))")
        done = subprocess.run([sys.executable, "-c", code, url, str(HERE), str(args.size)],
                              env={**os.environ, "PYTHONPATH": str(tree / "src")},
                              capture_output=True, text=True, check=True)
        ingest = json.loads(done.stdout.strip().splitlines()[-1])
    levels = [run_level(url, data, 0, args.readers, args.seconds, args.size, tree)]
    for w in (int(x) for x in args.writers.split(",")):
        levels.append(run_level(url, data, w, args.readers, args.seconds, args.size, tree))
        last = levels[-1]
        print(f"[{name}] {w} writers: {last['documents_per_s']} docs/s, write p95 "
              f"{last['write']['p95']:.0f} ms, {last['failed_writes']} failed; search p95 "
              f"{last['search']['p95']:.1f} ms (alone {levels[0]['search']['p95']:.1f})",
              file=sys.stderr)
    return {"ingest": ingest, "levels": levels, "statistics_exact": statistics_exact(url)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=20_000)
    ap.add_argument("--writers", default="1,4,8")
    ap.add_argument("--readers", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--kb-tree", action="append", default=[], metavar="NAME=DIR")
    ap.add_argument("--out-dir", default=str(HERE / "results"))
    ap.add_argument("--writer", action="store_true")
    ap.add_argument("--reader", action="store_true")
    ap.add_argument("--url")
    ap.add_argument("--data")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    if args.writer:
        writer(args.url, args.size, args.seconds, args.seed)
        return 0
    if args.reader:
        reader(args.url, Path(args.data), args.seconds, args.seed)
        return 0

    import _synth

    from kb_retriever.store.embedded import start_embedded

    trees: dict[str, Path | None] = {"current": None}
    trees.update({name: Path(tree).resolve()
                  for name, _, tree in (t.partition("=") for t in args.kb_tree)})
    with tempfile.TemporaryDirectory(prefix="kb-writers-", ignore_cleanup_errors=True) as home:
        server_url = start_embedded(Path(home))
        corpus = _synth.make_corpus(args.size)
        qv, texts, _ = _synth.queries(corpus, 300)
        res: dict[str, Any] = {"size": args.size, "machine": perf.machine(),
                               "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
        with tempfile.TemporaryDirectory() as tmp:
            data = Path(tmp)
            np.save(data / "qvec.npy", qv)
            (data / "queries.json").write_text(json.dumps({"texts": texts}))
            for name, tree in trees.items():
                res[name] = run_tree(server_url, name, tree, args, data, corpus)
    path = Path(args.out_dir) / f"writers-{args.size}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(res, indent=2) + "\n")
    print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
