"""Speed under load: throughput and latency with 1, 4 and 16 concurrent clients, per system.

    .venv/bin/python benchmarks/load.py [--size 100000] [--clients 1,4,16] [--per-client 100]
                                        [--skip-peers] [--rounds 1]
                                        [--kb-tree NAME=DIR ...] [--kb-tree-only]
                                        [--home DIR] [--warmup N]

A client is a process of its own (a web worker, say), with its own connection pool, searching
with the query vector given (no embedding time). All clients of a level start together (a
barrier after their warm-up); throughput is all their searches over the wall time from the
start to the last one's end, latency is pooled over every search. Systems: kb-retriever with
its defaults and with the AND full-text mode (``KB_FTS_QUERY_MODE=plain``), langchain-postgres
``PGVectorStore`` hybrid, LlamaIndex ``PGVectorStore`` hybrid, on the synthetic corpus of
``perf.py``. Beside each, its SciFact nDCG@10 from benchmarks/results/scifact.json (the
quality of the same configuration on real data). Results: benchmarks/results/load-<size>.json.

``--kb-variant NAME=KB_X=v[,KB_Y=w]`` adds system ``kb+NAME``: the defaults with those settings
(environment variables of the client processes), in turn with the others.

``--kb-tree NAME=DIR`` adds system ``kb@NAME``: kb-retriever's defaults from the source tree
``DIR`` (a git worktree, say, with one speed device taken out), on the same server and data,
in turn with the others; ``--kb-tree-only`` runs only those. With ``--rounds`` above 1 every
level runs that many times, the systems taking turns each round (each round starting with the
next one, so that none always runs first), and the figures are the median over the rounds.
This is how decision 0004's devices were re-measured under load.

``--warmup N`` (default 10) is how many searches each client runs before the level starts;
``--warmup 0`` measures a fresh client's first searches (its connections new, nothing prepared).

``--home DIR`` keeps the embedded server and its loaded corpus in ``DIR`` (a fresh temporary
directory otherwise): a second run with the same ``DIR`` and ``--size`` searches the corpus the
first one loaded (and the peers' tables, once loaded) instead of loading it again.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import perf  # noqa: E402  (the corpus, the loaders and the peers' set-up are perf.py's)

SYSTEMS = ("kb", "kb-and", "langchain", "llamaindex")
WARMUP = 10


def _scifact() -> dict[str, float | None]:
    """SciFact nDCG@10 of each system's configuration, as measured by benchmarks/beir.py."""
    data = json.loads((HERE / "results" / "scifact.json").read_text())
    ablation = {row["variant"]: row["ndcg@10"] for row in data["ablation"]}
    systems = data["systems"]
    return {"kb": systems["kb-retriever defaults"]["ndcg@10"],
            "kb-and": ablation.get("fts_query_mode=plain"),
            "langchain": systems["langchain-postgres PGVectorStore hybrid (rrf)"]["ndcg@10"],
            "llamaindex": None}  # beir.py measures LlamaIndex's QueryFusionRetriever instead


def searcher(system: str, url: str) -> Any:
    """A ``search(vector, text)`` callable for ``system``, set up as perf.py's children do."""
    if system in ("kb", "kb-and"):
        from kb_retriever import HashingEmbedder, KnowledgeBase, Settings

        settings = Settings(fts_query_mode="plain") if system == "kb-and" else Settings()
        kb = KnowledgeBase(settings, embedder=HashingEmbedder(384), database_url=url,
                           tenant=perf.TENANT).open()
        return lambda v, t: kb.search(t, limit=perf.K, project=perf.PROJECTS, query_embedding=v)
    if system == "langchain":
        from dataclasses import replace

        from langchain_core.embeddings import FakeEmbeddings
        from langchain_postgres import PGEngine, PGVectorStore
        from langchain_postgres.v2.hybrid_search_config import (
            HybridSearchConfig,
            reciprocal_rank_fusion,
        )

        engine = PGEngine.from_connection_string(url=perf._sa_urls(url)[0])
        cfg = HybridSearchConfig(tsv_column="content_tsv", primary_top_k=perf.KC,
                                 secondary_top_k=perf.KC, fusion_function=reciprocal_rank_fusion)
        store = PGVectorStore.create_sync(engine, table_name="lc_perf",
                                          embedding_service=FakeEmbeddings(size=384),
                                          hybrid_search_config=cfg)
        return lambda v, t: store.similarity_search_by_vector(
            v.tolist(), k=perf.K, hybrid_search_config=replace(cfg, fts_query=t))
    from llama_index.core.vector_stores.types import VectorStoreQuery, VectorStoreQueryMode

    store = perf._llamaindex_store(url)
    return lambda v, t: store.query(VectorStoreQuery(
        query_embedding=v.tolist(), similarity_top_k=perf.K, sparse_top_k=perf.K, query_str=t,
        mode=VectorStoreQueryMode.HYBRID))


def worker(system: str, url: str, data: Path, n: int, offset: int, warmup: int = WARMUP) -> None:
    """One client: set up, warm up, say READY, wait for GO, run ``n`` searches, print JSON."""
    from kb_retriever.search.graph import graph_seed
    qv = np.load(data / "qvec.npy")
    texts = json.loads((data / "queries.json").read_text())["texts"]
    search = searcher(system, url)
    for i in range(warmup):
        search(qv[i % len(qv)], texts[i % len(texts)])
    print("READY", flush=True)
    sys.stdin.readline()
    lat = []
    stages: dict[str, list[float]] = {}  # kb-retriever's own per-stage timings (meta)
    hops: list[bool] = []  # kb-retriever: whether the search's graph stage made a round trip
    queries: list[int] = []  # which query each search ran
    cpu = time.process_time()
    for j in range(n):
        i = (offset * 997 + j) % len(texts)  # each client its own walk through the queries
        queries.append(i)
        t = time.perf_counter()
        result = search(qv[i], texts[i])
        lat.append((time.perf_counter() - t) * 1000)
        for stage, ms in (getattr(getattr(result, "meta", None), "timings_ms", None) or {}).items():
            stages.setdefault(stage, []).append(ms)
        if hasattr(result, "primary"):  # the graph walks from a seed the top holds
            hops.append(graph_seed(result.primary) is not None)
    cpu_ms = (time.process_time() - cpu) * 1000 / max(n, 1)
    print(json.dumps({"lat": lat, "queries": queries, "cpu_ms": cpu_ms, "stages": stages,
                      "hops": hops}), flush=True)
    sys.stdin.readline()  # stay connected until the parent has read the server's CPU


# Server processes whose work is not the searches' (their titles, as ps shows them).
_MAINTENANCE = ("checkpointer", "background writer", "walwriter", "autovacuum", "archiver",
                "logical replication", "walsummarizer")


def server_usage(postmaster: int | None) -> dict[int, tuple[float, int, int]]:
    """Of each process the server's postmaster started, its maintenance processes left out (a
    checkpoint or autovacuum is not a search's work; the backends and I/O workers are): CPU
    seconds (user + system) so far, bytes read through read calls (``rchar``: the pages it
    read into shared buffers, from the OS cache or the disk) and bytes the disk gave it
    (``read_bytes``), from /proc; empty where /proc cannot tell."""
    if postmaster is None:
        return {}
    tick = os.sysconf("SC_CLK_TCK")
    out: dict[int, tuple[float, int, int]] = {}
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            fields = (proc / "stat").read_text().rsplit(")", 1)[1].split()
            title = (proc / "cmdline").read_bytes().decode(errors="replace")
            io = dict(line.split(": ") for line in (proc / "io").read_text().splitlines())
        except (OSError, IndexError, ValueError):
            continue  # a process that ended while we read
        # fields[1]: the parent's pid; 11 and 12: user and system time in clock ticks
        if int(fields[1]) == postmaster and not any(m in title for m in _MAINTENANCE):
            out[int(proc.name)] = ((int(fields[11]) + int(fields[12])) / tick,
                                   int(io["rchar"]), int(io["read_bytes"]))
    return out


def per_search(before: dict[int, tuple[float, int, int]],
               after: dict[int, tuple[float, int, int]], searches: int) -> dict[str, float]:
    """What the server's processes spent per search between two :func:`server_usage` reads:
    CPU ms, KB read into shared buffers and KB read from the disk."""
    spent = [sum(now[i] - before.get(pid, (0.0, 0, 0))[i] for pid, now in after.items())
             for i in range(3)]
    return {"server_cpu_ms": round(spent[0] * 1000 / searches, 3),
            "server_read_kb": round(spent[1] / 1024 / searches, 1),
            "disk_read_kb": round(spent[2] / 1024 / searches, 1)}


def run_level(system: str, url: str, data: Path, clients: int, per_client: int,
              trees: dict[str, Path], variants: dict[str, dict[str, str]],
              postmaster: int | None = None, warmup: int = WARMUP) -> dict[str, Any]:
    env = None
    if system.startswith("kb@"):  # kb-retriever's defaults from another source tree
        env = {**os.environ, "PYTHONPATH": str(trees[system[3:]] / "src")}
        system = "kb"
    elif system.startswith("kb+"):  # kb-retriever with some settings changed (KB_* variables)
        env = {**os.environ, **variants[system[3:]]}
        system = "kb"
    procs = [subprocess.Popen([sys.executable, __file__, "--worker", system, "--url", url,
                               "--data", str(data), "--n", str(per_client), "--offset", str(c),
                               "--warmup", str(warmup)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
             for c in range(clients)]
    try:
        for p in procs:  # the barrier: every client set up and warm
            assert p.stdout is not None
            line = p.stdout.readline()
            if not line.startswith("READY"):
                raise RuntimeError(f"{system} client did not start: {line!r}")
        usage0 = server_usage(postmaster)
        t0 = time.perf_counter()
        for p in procs:
            assert p.stdin is not None
            p.stdin.write("GO\n")
            p.stdin.flush()
        outs = [json.loads(p.stdout.readline()) for p in procs if p.stdout is not None]
        wall = time.perf_counter() - t0
        # the backends are still there (each client waits for EXIT): their work during the level
        usage1 = server_usage(postmaster)
        for p in procs:
            p.communicate("EXIT\n", timeout=60)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    lat = [x for o in outs for x in o["lat"]]
    # the client's own CPU per search (its Python and driver work; the server's is not in it)
    client_cpu = float(np.mean([o["cpu_ms"] for o in outs]))
    stages: dict[str, list[float]] = {}
    for o in outs:
        for stage, ms in o.get("stages", {}).items():
            stages.setdefault(stage, []).extend(ms)
    out = {"clients": clients, "searches": len(lat), "wall_s": round(wall, 2),
           "throughput_per_s": round(len(lat) / wall, 1), **perf.pct(lat),
           "spread": spread(outs),
           "client_cpu_ms": round(client_cpu, 3), "loadavg": os.getloadavg()[0]}
    hops = [h for o in outs for h in o.get("hops", [])]
    if hops and len(hops) == len(lat) and any(hops) and not all(hops):
        # the tail of the searches that made a second round trip (graph expansion) and of the rest
        out["graph_round_trip"] = {
            "share": round(sum(hops) / len(hops), 3),
            "p95_with": perf.pct([x for x, h in zip(lat, hops, strict=True) if h])["p95"],
            "p95_without": perf.pct([x for x, h in zip(lat, hops, strict=True) if not h])["p95"]}
    out["p50_first_10"] = out["spread"]["p50_first_10"]  # each client's first ten searches
    if usage1:  # the server's CPU and reads per search: its backends and I/O workers
        out.update(per_search(usage0, usage1, len(lat)))
    if stages:  # p50 / p95 of each stage, over the searches that ran it
        out["stages_ms"] = {stage: perf.pct(ms) for stage, ms in stages.items()}
    return out


def spread(outs: list[dict[str, Any]]) -> dict[str, Any]:
    """How a level's latencies spread: their percentiles, the median of each client's first
    ten searches against its later ones, and how many distinct queries the slowest 5 % of the
    searches were (a handful: expensive queries make the tail; about as many as the
    searches: waiting for the CPU does). Each worker reports the query of each search."""
    lat = [(ms, q, j) for o in outs
           for j, (ms, q) in enumerate(zip(o["lat"], o["queries"], strict=True))]
    xs = np.array([ms for ms, _, _ in lat])
    slow = np.percentile(xs, 95)
    tail = [q for ms, q, _ in lat if ms >= slow]
    first = [ms for ms, _, j in lat if j < 10]
    later = [ms for ms, _, j in lat if j >= 10]
    return {"percentiles": {str(p): round(float(np.percentile(xs, p)), 2)
                            for p in (1, 10, 25, 50, 75, 90, 95, 99)},
            "p50_first_10": round(float(np.median(first)), 2) if first else None,
            "p50_later": round(float(np.median(later)), 2) if later else None,
            "slowest_5pct": len(tail), "slowest_5pct_distinct_queries": len(set(tail))}


def _median(outs: list[dict[str, Any]]) -> dict[str, Any]:
    """One level's rounds as one: the median of each figure, and every round's figures."""
    figures = [k for k in ("throughput_per_s", "p50", "p95", "client_cpu_ms", "server_cpu_ms",
                           "server_read_kb", "disk_read_kb", "p50_first_10")
               if all(o.get(k) is not None for o in outs)]
    med = {k: round(float(np.median([o[k] for o in outs])), 3) for k in figures}
    return {**outs[0], **med, "rounds": [{k: o[k] for k in figures} for o in outs]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=100_000)
    ap.add_argument("--clients", default="1,4,16")
    ap.add_argument("--per-client", type=int, default=100)
    ap.add_argument("--queries", type=int, default=500)
    ap.add_argument("--skip-peers", action="store_true")
    ap.add_argument("--systems", default=",".join(SYSTEMS),
                    help="which of the built-in systems run (comma-separated)")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--kb-tree", action="append", default=[], metavar="NAME=DIR")
    ap.add_argument("--kb-tree-only", action="store_true")
    ap.add_argument("--kb-variant", action="append", default=[], metavar="NAME=KB_X=v[,KB_Y=w]",
                    help="adds system kb+NAME: the defaults with these settings")
    ap.add_argument("--out-dir", default=str(HERE / "results"))
    ap.add_argument("--home", help="keep the server and the loaded corpus here (reused)")
    ap.add_argument("--worker", choices=SYSTEMS)
    ap.add_argument("--url")
    ap.add_argument("--data")
    ap.add_argument("--n", type=int)
    ap.add_argument("--offset", type=int, default=0)
    # searches each client runs before the level starts: 0 measures a fresh client's first ones
    ap.add_argument("--warmup", type=int, default=WARMUP)
    args = ap.parse_args()
    if args.worker:
        worker(args.worker, args.url, Path(args.data), args.n, args.offset, args.warmup)
        return 0

    import _synth
    import psycopg
    from psycopg import sql
    from psycopg.conninfo import make_conninfo

    from kb_retriever.store.embedded import start_embedded

    levels = [int(c) for c in args.clients.split(",")]
    trees = {name: Path(tree).resolve()
             for name, _, tree in (t.partition("=") for t in args.kb_tree)}
    chosen = args.systems.split(",")
    systems = [s for s in SYSTEMS if s in chosen
               and not (args.skip_peers and s in ("langchain", "llamaindex"))]
    variants = {name: dict(kv.split("=", 1) for kv in rest.split(","))
                for name, _, rest in (v.partition("=") for v in args.kb_variant)}
    systems = (([] if args.kb_tree_only else systems) + [f"kb@{name}" for name in trees]
               + [f"kb+{name}" for name in variants])
    quality = _scifact()
    # The server may still be writing when the directory goes: that is no failure of the run.
    with tempfile.TemporaryDirectory(prefix="kb-load-", ignore_cleanup_errors=True) as tmp_home:
        home = Path(args.home) if args.home else Path(tmp_home)
        server_url = start_embedded(home)
        # the postmaster's pid: the first line of postmaster.pid
        postmaster = int((home / "pgdata" / "postmaster.pid").read_text().split()[0])
        db = f"load_{args.size}"
        url = make_conninfo(server_url, dbname=db)
        corpus = _synth.make_corpus(args.size)
        loaded_file = home / f"{db}.loaded.json"  # what an earlier run with --home loaded
        loaded = json.loads(loaded_file.read_text()) if loaded_file.exists() else {}
        if not loaded:
            with psycopg.connect(server_url, autocommit=True) as conn:
                conn.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(db)))
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(db)))
            loaded = {"ingest": perf.load_kb(url, corpus)}
        # each peer's table is loaded once, when a run first asks for that peer
        missing = tuple(s for s in ("langchain", "llamaindex")
                        if s in systems and s not in loaded.get("peer_load", {}))
        if missing:
            loaded.setdefault("peer_load", {}).update(perf.load_peers(url, corpus, missing))
        loaded_file.write_text(json.dumps(loaded))
        res: dict[str, Any] = {"size": args.size, "machine": perf.machine(),
                               "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                               "per_client": args.per_client, **loaded}
        qv, texts, _ = _synth.queries(corpus, args.queries)
        with tempfile.TemporaryDirectory() as tmp:
            data = Path(tmp)
            np.save(data / "qvec.npy", qv)
            (data / "queries.json").write_text(json.dumps({"texts": texts}))
            for clients in levels:  # each level every system in turn: a slow minute hits all
                runs: dict[str, list[dict[str, Any]]] = {}
                for r in range(args.rounds):
                    # each round starts with another system: none is always first or last
                    for system in systems[r % len(systems):] + systems[:r % len(systems)]:
                        out = run_level(system, url, data, clients, args.per_client, trees,
                                        variants, postmaster, args.warmup)
                        runs.setdefault(system, []).append(out)
                        print(f"[{args.size}] {clients:>2} clients {system:<18} "
                              f"{out['throughput_per_s']:>7.1f}/s  p50 {out['p50']:.2f}  "
                              f"p95 {out['p95']:.2f} ms  client CPU {out['client_cpu_ms']:.3f} ms  "
                              f"server CPU {out.get('server_cpu_ms', float('nan')):.3f} ms  "
                              f"read {out.get('server_read_kb', float('nan')):.0f} KB "
                              f"(disk {out.get('disk_read_kb', float('nan')):.0f})",
                              file=sys.stderr)
                        for stage, st in out.get("stages_ms", {}).items():
                            print(f"    {stage:<12} p50 {st['p50']:.2f}  p95 {st['p95']:.2f} ms"
                                  f"  ({st['n']} searches)", file=sys.stderr)
                for system, outs in runs.items():
                    out = _median(outs) if len(outs) > 1 else outs[0]
                    out["scifact_ndcg@10"] = quality.get(system.partition("@")[0])
                    if system.startswith("kb+"):  # SciFact was measured for the defaults
                        out["scifact_ndcg@10"] = None
                    res.setdefault(system, []).append(out)
        name = f"load-{args.size}" + ("-trees" if args.kb_tree_only else "")
        path = Path(args.out_dir) / f"{name}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(res, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
