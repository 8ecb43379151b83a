"""Beyond one machine, measured on this one: one PostgreSQL, a Citus cluster (a coordinator
and two workers) and a primary with a streaming replica, on the same data.

    .venv/bin/python benchmarks/scale.py [--size 100000] [--clients 1,4,16] [--per-client 100]
                                         [--rounds 1] [--systems single,citus,replica]

perf.py's synthetic corpus, its ten scopes loaded as ten **tenants** (so Citus spreads them over
its shards), bulk-loaded into each system. A client is a process of its own searching its
queries' tenants with the query vector given (load.py's clients); all clients of a level start
together. Reported per system and level: searches per second and latency percentiles. Every
server here shares the same 2 cores, so what is measured is the routing's overhead and the
results' correctness at scale, not the throughput of more machines (docs/scaling.md projects
that, with its assumptions). Citus comes from ``shared/tools/citus`` beside the repository
(built on first use, about 4 minutes). Results: benchmarks/results/scale-<size>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))

import perf  # noqa: E402  (the corpus, the percentiles)

TENANTS = [f"t{t}" for t in range(10)]
WARMUP = 10


def load(url: str, corpus: Any) -> dict[str, Any]:
    """The corpus into ``url``, scope t as tenant ``t<t>`` (project ``p``)."""
    import _synth

    from kb_retriever import HashingEmbedder, KnowledgeBase, Settings
    from kb_retriever.write.bulk import bulk_load

    with KnowledgeBase(Settings(), embedder=HashingEmbedder(384), database_url=url):
        pass
    t0, chunks = time.perf_counter(), 0
    for t, tenant in enumerate(TENANTS):
        items = (("p", d, v) for d, v in _synth.documents(corpus, t))
        chunks += bulk_load(url, items, tenant=tenant, defer_indexes=True).chunks
    return {"chunks": chunks, "load_s": round(time.perf_counter() - t0, 1)}


def worker(url: str, data: Path, n: int, offset: int) -> None:
    """One client: warm up, say READY, wait for GO, run ``n`` searches, print JSON."""
    from kb_retriever import HashingEmbedder, KnowledgeBase, Settings

    qv = np.load(data / "qvec.npy")
    meta = json.loads((data / "queries.json").read_text())
    texts, tenants = meta["texts"], meta["tenants"]
    kb = KnowledgeBase(Settings(), embedder=HashingEmbedder(384), database_url=url).open()
    servers: dict[str, int] = {}

    def search(i: int) -> None:
        r = kb.search(texts[i], limit=perf.K, tenant=TENANTS[tenants[i]], project="p",
                      query_embedding=qv[i])
        server = r.meta.get("server") or "primary"
        servers[server] = servers.get(server, 0) + 1

    for i in range(WARMUP):
        search(i % len(texts))
    print("READY", flush=True)
    sys.stdin.readline()
    lat = []
    for j in range(n):
        i = (offset * 997 + j) % len(texts)
        t = time.perf_counter()
        search(i)
        lat.append((time.perf_counter() - t) * 1000)
    kb.close()
    print(json.dumps({"lat": lat, "servers": servers}), flush=True)


def run_level(url: str, env: dict[str, str], data: Path, clients: int,
              per_client: int) -> dict[str, Any]:
    procs = [subprocess.Popen([sys.executable, __file__, "--worker", "--url", url, "--data",
                               str(data), "--n", str(per_client), "--offset", str(c)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                              env={**os.environ, **env}) for c in range(clients)]
    try:
        for p in procs:
            assert p.stdout is not None
            line = p.stdout.readline()
            if not line.startswith("READY"):
                raise RuntimeError(f"a client did not start: {line!r}")
        t0 = time.perf_counter()
        for p in procs:
            assert p.stdin is not None
            p.stdin.write("GO\n")
            p.stdin.flush()
        outs = [json.loads(p.communicate(timeout=1800)[0].strip().splitlines()[-1])
                for p in procs]
        wall = time.perf_counter() - t0
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    lat = [x for o in outs for x in o["lat"]]
    servers: dict[str, int] = {}
    for o in outs:
        for k, v in o["servers"].items():
            servers[k] = servers.get(k, 0) + v
    return {"clients": clients, "searches": len(lat),
            "throughput_per_s": round(len(lat) / wall, 1), **perf.pct(lat), "servers": servers}


def _systems(names: list[str], stack: list[Any]) -> dict[str, tuple[str, dict[str, str]]]:
    """name -> (database URL, environment of its clients), each started here."""
    import psycopg
    from psycopg import sql
    from psycopg.conninfo import make_conninfo

    from kb_retriever.store.embedded import start_embedded

    out: dict[str, tuple[str, dict[str, str]]] = {}
    if "single" in names or "replica" in names:
        home = Path(tempfile.mkdtemp(prefix="kb-scale-"))
        stack.append(lambda: shutil.rmtree(home, ignore_errors=True))
        server = start_embedded(home)
        with psycopg.connect(server, autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier("scale")))
        primary = make_conninfo(server, dbname="scale")
        if "single" in names:
            out["single"] = (primary, {})
        if "replica" in names:
            from tests.replica.standby import Standby

            standby = Standby(home, server)
            stack.append(standby.remove)
            out["replica"] = (primary, {"KB_REPLICA_URLS": standby.url("scale")})
    if "citus" in names:
        from tests.citus.cluster import Cluster, build

        cluster = Cluster(build())
        stack.append(lambda: shutil.rmtree(cluster.data, ignore_errors=True))  # after stop
        cluster.start()
        stack.append(cluster.stop)
        out["citus"] = (cluster.new_database(), {})
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=100_000)
    ap.add_argument("--clients", default="1,4,16")
    ap.add_argument("--per-client", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--systems", default="single,citus,replica")
    ap.add_argument("--out-dir", default=str(HERE / "results"))
    ap.add_argument("--worker", action="store_true")
    ap.add_argument("--url")
    ap.add_argument("--data")
    ap.add_argument("--n", type=int)
    ap.add_argument("--offset", type=int, default=0)
    args = ap.parse_args()
    if args.worker:
        worker(args.url, Path(args.data), args.n, args.offset)
        return 0

    import _synth

    stack: list[Any] = []
    try:
        systems = _systems(args.systems.split(","), stack)
        corpus = _synth.make_corpus(args.size)
        qv, texts, tenants = _synth.queries(corpus, 500)
        res: dict[str, Any] = {"size": args.size, "machine": perf.machine(),
                               "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
        loaded: set[str] = set()
        for name, (url, _) in systems.items():
            if url not in loaded:  # the replica serves the single node's data
                res.setdefault("load", {})[name] = load(url, corpus)
                loaded.add(url)
        time.sleep(5)  # the replica replays the load
        with tempfile.TemporaryDirectory() as tmp:
            data = Path(tmp)
            np.save(data / "qvec.npy", qv)
            (data / "queries.json").write_text(json.dumps(
                {"texts": texts, "tenants": [int(t) for t in tenants]}))
            for clients in (int(c) for c in args.clients.split(",")):
                for name, (url, env) in systems.items():
                    runs = [run_level(url, env, data, clients, args.per_client)
                            for _ in range(args.rounds)]
                    out = runs[0] if len(runs) == 1 else {
                        **runs[0], **{k: round(float(np.median([r[k] for r in runs])), 3)
                                      for k in ("throughput_per_s", "p50", "p95")}}
                    res.setdefault(name, []).append(out)
                    print(f"[{args.size}] {clients:>2} clients {name:<8} "
                          f"{out['throughput_per_s']:>7.1f}/s  p50 {out['p50']:.2f}  "
                          f"p95 {out['p95']:.2f} ms  {out['servers']}", file=sys.stderr)
        path = Path(args.out_dir) / f"scale-{args.size}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(res, indent=2) + "\n")
        print(path)
    finally:
        for undo in reversed(stack):
            undo()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
