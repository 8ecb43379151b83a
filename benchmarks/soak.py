"""Soak: many searches against a small knowledge base, reporting RSS as it goes.

    python benchmarks/soak.py [--searches 10000] [--every 1000] [--mode sync|async]
                              [--database-url URL]

With no URL an embedded server is started in a temporary KB_HOME. The hashing embedder
keeps the run about the library (pools, pipeline, rows), not a model. Memory is read from
/proc/self/status (VmRSS), so the script needs Linux. Results go in docs/reliability.md.
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import gc
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

from kb_retriever import HashingEmbedder, KnowledgeBase, Settings

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "examples" / "kb"
QUERIES = [
    "what cache layer did we standardise on?", "why not rabbitmq for events?",
    "how do we rotate the oauth signing key?", "payment timeouts incident",
    "session store module", "multi region active active", "idempotency keys",
    "stripe integration retries", "kafka event bus decision", "redis cluster mode",
]
# Concurrency of async mode: enough to queue on the default 4-connection pool.
ASYNC_BATCH = 32


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def run_sync(kb: KnowledgeBase, n: int, every: int,
             rng: random.Random) -> list[tuple[int, float, float]]:
    samples, t0 = [], time.perf_counter()
    for i in range(1, n + 1):
        kb.search(rng.choice(QUERIES), limit=rng.randint(1, 10))
        if i % every == 0:
            gc.collect()
            samples.append((i, rss_mb(), time.perf_counter() - t0))
    return samples


async def run_async(kb: KnowledgeBase, n: int, every: int,
                    rng: random.Random) -> list[tuple[int, float, float]]:
    samples, t0, done = [], time.perf_counter(), 0
    try:
        while done < n:
            batch = min(ASYNC_BATCH, n - done)
            await asyncio.gather(*(kb.asearch(rng.choice(QUERIES), limit=rng.randint(1, 10))
                                   for _ in range(batch)))
            before, done = done, done + batch
            if done // every > before // every:
                gc.collect()
                samples.append((done, rss_mb(), time.perf_counter() - t0))
    finally:
        await kb.aclose()
    return samples


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--searches", type=int, default=10_000)
    p.add_argument("--every", type=int, default=1_000)
    p.add_argument("--mode", choices=("sync", "async"), default="sync")
    p.add_argument("--database-url")
    p.add_argument("--seed", type=int, default=7)
    args = p.parse_args(argv)
    home = tempfile.mkdtemp(prefix="kb-soak-")
    # Registered before the server starts, so it runs after pgserver's own exit hook stops it.
    atexit.register(shutil.rmtree, home, ignore_errors=True)
    kb = KnowledgeBase(Settings(), embedder=HashingEmbedder(384), database_url=args.database_url,
                       home=home, project="soak").open()
    report = kb.ingest([CORPUS])
    print(f"corpus: {report.summary()}", file=sys.stderr)
    rng = random.Random(args.seed)
    # Warm-up: imports, pool connections, plan caches; RSS before it is not comparable.
    for q in QUERIES:
        kb.search(q)
    gc.collect()
    start = rss_mb()
    if args.mode == "sync":
        samples = run_sync(kb, args.searches, args.every, rng)
    else:
        samples = asyncio.run(run_async(kb, args.searches, args.every, rng))
    kb.close()
    print(f"mode={args.mode} searches={args.searches} rss_after_warmup={start:.1f} MB")
    print("| searches | RSS MB | Δ vs warm-up MB | elapsed s | searches/s |")
    print("|---:|---:|---:|---:|---:|")
    for i, rss, elapsed in samples:
        print(f"| {i} | {rss:.1f} | {rss - start:+.1f} | {elapsed:.1f} | {i / elapsed:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
