"""SciFact (BEIR) retrieval quality: kb-retriever against its peers, plus an ablation.

    make bench-beir
    .venv/bin/python benchmarks/beir.py --dataset ../shared/datasets/scifact

Every system uses the same MiniLM vectors (embedded once, cached in benchmarks/.cache/), runs
with k=100 and is scored with ranx on the test qrels: nDCG@10, MRR@10, Recall@100. Latency is
per query, single client, query embedding excluded (every system gets the cached vector).
The dataset is read where it lies (CC BY-NC: never copy it into the repository).
Writes benchmarks/results/scifact.json and prints Markdown tables.
"""

from __future__ import annotations

import argparse
import atexit
import csv
import gzip
import json
import logging
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _kb  # noqa: E402
import peers  # noqa: E402
from _embed_cache import cached_embeddings  # noqa: E402

from kb_retriever import KnowledgeBase, Settings  # noqa: E402
from kb_retriever.embedding.minilm import MiniLMEmbedder  # noqa: E402

logger = logging.getLogger("beir")

K = 100
METRICS = ["ndcg@10", "mrr@10", "recall@100"]
RESULTS = Path(__file__).resolve().parent / "results" / "scifact.json"


# --- data -----------------------------------------------------------------------------------

def load_dataset(path: Path) -> dict[str, Any]:
    with gzip.open(path / "corpus.jsonl.gz", "rt", encoding="utf-8") as fh:
        docs = [json.loads(line) for line in fh]
    qrels: dict[str, dict[str, int]] = {}
    with open(path / "qrels_test.tsv", encoding="utf-8") as fh:
        for row in csv.DictReader(fh, delimiter="\t"):
            qrels.setdefault(row["query-id"], {})[row["corpus-id"]] = int(row["score"])
    with open(path / "queries.jsonl", encoding="utf-8") as fh:
        queries = [json.loads(line) for line in fh]
    queries = [qq for qq in queries if qq["_id"] in qrels]
    return {
        "ids": [d["_id"] for d in docs],
        "titles": [d.get("title") or "" for d in docs],
        "bodies": [d.get("text") or "" for d in docs],
        # BEIR's document text; the cache key hashes exactly these strings.
        "texts": [(d.get("title") or "") + " " + (d.get("text") or "") for d in docs],
        "queries": queries,
        "qrels": qrels,
    }


# --- running and scoring --------------------------------------------------------------------

Runs = dict[str, dict[str, float]]


def run(search: Callable[[str, np.ndarray, int], list[str]], queries: list[dict[str, Any]],
        qvecs: np.ndarray, *, timed: bool = True, k: int = K) -> tuple[Runs, list[float]]:
    out: dict[str, dict[str, float]] = {}
    lat: list[float] = []
    for qq, vec in zip(queries, qvecs, strict=True):
        t = time.perf_counter()
        ranked = search(qq["text"], vec, k)
        lat.append((time.perf_counter() - t) * 1000)
        # ranx wants scores; rank order is all that matters.
        out[qq["_id"]] = {d: float(k - i) for i, d in enumerate(dict.fromkeys(ranked))}
    return out, lat if timed else []


def score(qrels: dict[str, dict[str, int]], runs: dict[str, dict[str, float]]) -> dict[str, float]:
    from ranx import Qrels, Run, evaluate

    # A query with no result at all must still count as 0, so give it an empty run entry.
    filled = {qid: runs.get(qid) or {"__none__": 0.0} for qid in qrels}
    res = evaluate(Qrels(qrels), Run(filled), METRICS, make_comparable=True)
    return {m: round(float(res[m]), 4) for m in METRICS}


def latency(lat: list[float]) -> dict[str, float]:
    if not lat:
        return {}
    qs = statistics.quantiles(lat, n=100, method="inclusive")
    return {"p50_ms": round(statistics.median(lat), 1), "p95_ms": round(qs[94], 1)}


# --- main -----------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dataset", type=Path, default=Path("../shared/datasets/scifact"))
    ap.add_argument("--skip-peers", action="store_true", help="kb-retriever systems only")
    ap.add_argument("--skip-ablation", action="store_true")
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--smoke", type=int, default=0, metavar="N",
                    help="wiring check: first N docs and N queries, random vectors, no JSON "
                         "written")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    for noisy in ("httpx", "bm25s", "llama_index", "langchain"):
        logging.getLogger(noisy).setLevel(logging.WARNING)

    ds = load_dataset(args.dataset)
    embedder = MiniLMEmbedder()
    if args.smoke:
        for key in ("ids", "titles", "bodies", "texts", "queries"):
            ds[key] = ds[key][: args.smoke]
        ds["qrels"] = {qq["_id"]: ds["qrels"][qq["_id"]] for qq in ds["queries"]}
    qtexts = [qq["text"] for qq in ds["queries"]]
    if args.smoke:
        rng = np.random.default_rng(0)
        dvecs, qvecs = (rng.normal(size=(n, 384)).astype(np.float32)
                        for n in (len(ds["ids"]), len(qtexts)))
    else:
        dvecs = cached_embeddings(embedder, ds["texts"], kind="corpus")
        qvecs = cached_embeddings(embedder, qtexts, kind="queries", query=True)
    logger.info("%d docs, %d judged queries", len(ds["ids"]), len(ds["queries"]))

    home = Path(tempfile.mkdtemp(prefix="kb-beir-"))
    # Registered before the server starts, so it runs after pgserver's own exit hook stops it.
    atexit.register(shutil.rmtree, home, ignore_errors=True)
    base = Settings(home=home, database_url=None)
    kb = KnowledgeBase(base, embedder=embedder, project=_kb.PROJECT).open()
    t = time.perf_counter()
    counts = _kb.load_corpus(kb, ds["ids"], ds["titles"], ds["bodies"], dvecs)
    load_s = time.perf_counter() - t
    logger.info("kb-retriever load: %s in %.0fs", counts, load_s)

    results: dict[str, Any] = {"systems": {}}  # an ablation key only when it ran: merged()

    def record(name: str, search, note: str = "", *, close=None) -> None:
        logger.info("running %s", name)
        runs, lat = run(search, ds["queries"], qvecs)
        entry = {**score(ds["qrels"], runs), **latency(lat), "note": note}
        results["systems"][name] = entry
        logger.info("%s: %s", name, entry)
        if close:
            close()

    def not_run(name: str, why: str) -> None:
        results["systems"][name] = {"not_run": why}
        logger.warning("%s not run: %s", name, why)

    dense_s = base.model_copy(update={"hybrid_search_enabled": False, "reranking_enabled": False,
                                      "default_min_similarity": -1.0})
    with KnowledgeBase(dense_s, embedder=embedder, database_url=kb.url) as kbd:
        record("kb-retriever dense only", _kb.kb_search(kbd),
               "hybrid off, rerank off, no similarity floor: plain HNSW top-k")
    fts, close = _kb.fts_search(kb.url, base)
    record("kb-retriever FTS only", fts, "the hybrid leg's OR tsquery, ts_rank(tsv, q, 1)", close=close)
    record("kb-retriever defaults", _kb.kb_search(kb),
           "Settings() defaults, k documents (the adaptive cutoff off, as the peers return k)")
    record("kb-retriever defaults, adaptive cutoff on", _kb.kb_search(kb, cutoff=None),
           "Settings() defaults as a prompt gets them: weak documents leave the top k")

    if not args.skip_peers:
        lookup = peers.VectorLookup(embedder, {
            **dict(zip(ds["texts"], dvecs, strict=True)), **dict(zip(qtexts, qvecs, strict=True)),
        })
        for name, build in (
            ("LangChain EnsembleRetriever (BM25Retriever + InMemoryVectorStore)",
             lambda: peers.langchain_ensemble(ds["ids"], ds["texts"], lookup, K)),
            ("LlamaIndex QueryFusionRetriever reciprocal_rerank (vector + BM25Retriever)",
             lambda: peers.llamaindex_fusion(ds["ids"], ds["texts"], dvecs, lookup, K)),
        ):
            try:
                record(name, build())
            except Exception as exc:  # a peer that cannot run is reported, not fatal
                not_run(name, f"{type(exc).__name__}: {exc}")
        for fusion in ("weighted_sum", "rrf"):
            name = f"langchain-postgres PGVectorStore hybrid ({fusion})"
            try:
                search, close = peers.langchain_pgvectorstore(
                    kb.url, ds["ids"], ds["texts"], dvecs, lookup, K, fusion=fusion)
                record(name, search, "exact dense scan + plainto_tsquery/ts_rank_cd",
                       close=close)
            except Exception as exc:
                not_run(name, f"{type(exc).__name__}: {exc}")
        results["peer_embedding_cache_misses"] = lookup.misses

    if not args.skip_ablation:
        results["ablation"] = ablation(kb, base, ds, qvecs)
        results["fts_match_cap"] = cap_sweep(kb, base, ds, qvecs)

    kb.close()
    results["meta"] = {
        "dataset": "SciFact (BEIR test split)", "docs": len(ds["ids"]),
        "queries": len(ds["queries"]), "k": K, "embedder": embedder.model_id,
        "date": datetime.now(UTC).strftime("%Y-%m-%d"), "python": platform.python_version(),
        "machine": f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPUs",
        "kb_load_seconds": round(load_s, 1),
    }
    if not args.smoke:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        previous = json.loads(args.out.read_text()) if args.out.exists() else {}
        args.out.write_text(json.dumps(merged(previous, results), indent=2) + "\n")
    print(report(results))
    return 0


def merged(previous: dict[str, Any], results: dict[str, Any]) -> dict[str, Any]:
    """The results file after a run: what the run measured replaces what it held, and a
    partial run (``--skip-peers``, ``--skip-ablation``) keeps the rest, named in
    ``meta.kept``, instead of dropping it.

    >>> merged({"systems": {"peer": 1, "kb": 1}, "ablation": [1], "meta": {}},
    ...        {"systems": {"kb": 2}, "meta": {"date": "d"}})
    {'systems': {'peer': 1, 'kb': 2}, 'ablation': [1], 'meta': {'date': 'd', 'kept': ['ablation', 'peer']}}
    """
    systems = {**previous.get("systems", {}), **results["systems"]}
    kept = sorted([k for k in previous if k not in results and k not in ("systems", "meta")]
                  + [k for k in previous.get("systems", {}) if k not in results["systems"]])
    meta = {**results.get("meta", {}), **({"kept": kept} if kept else {})}
    return {**previous, **results, "systems": systems, "meta": meta}


# --- ablation -------------------------------------------------------------------------------

# Each variant is a real search() run with Settings() plus the update (no recombination:
# every number below is what the library returns).
VARIANTS: list[tuple[str, dict[str, Any]]] = [
    ("defaults", {}),
    ("reference ranking (coverage keyword, no IDF, min-max vector, 0.55/0.25)",
     {"keyword_scoring": "coverage", "keyword_idf": False, "normalize_scores": True,
      "keyword_weight": 0.25}),
    ("keyword_scoring=coverage (pool IDF)", {"keyword_scoring": "coverage"}),
    ("keyword_scoring=coverage, keyword_weight=0.25, normalize on",
     {"keyword_scoring": "coverage", "keyword_weight": 0.25, "normalize_scores": True}),
    ("normalize_scores=True (min-max vector)", {"normalize_scores": True}),
    ("keyword_weight=0", {"keyword_weight": 0.0}),
    ("keyword_weight=0.25", {"keyword_weight": 0.25}),
    ("keyword_weight=0.55", {"keyword_weight": 0.55}),
    ("keyword_weight=0.85", {"keyword_weight": 0.85}),
    ("vector_weight=0", {"vector_weight": 0.0}),
    ("heading_weight=0", {"heading_weight": 0.0}),
    ("hybrid off (vector candidates only)", {"hybrid_search_enabled": False}),
    ("rerank off (RRF order)", {"reranking_enabled": False}),
    ("fts_query_mode=websearch", {"fts_query_mode": "websearch"}),
    ("fts_query_mode=plain", {"fts_query_mode": "plain"}),
    ("candidate_multiplier=1", {"candidate_multiplier": 1}),
    ("candidate_multiplier=5", {"candidate_multiplier": 5}),
]


def ablation(kb: KnowledgeBase, base: Settings, ds: dict[str, Any],
             qvecs: np.ndarray) -> list[dict[str, Any]]:
    queries = ds["queries"]
    rows: list[dict[str, Any]] = []
    for name, update in VARIANTS:
        s = base.model_copy(update=update)
        with KnowledgeBase(s, embedder=kb.embedder, database_url=kb.url,
                           project=_kb.PROJECT) as kbv:
            runs, _ = run(_kb.kb_search(kbv), queries, qvecs, timed=False)
        row = {"variant": name, "settings": update, **score(ds["qrels"], runs)}
        rows.append(row)
        logger.info("ablation %s", row)
    for rank in _kb.FTS_RANKS:
        for mode in ("or", "websearch") if rank == "ts_rank_cd" else ("or",):
            search, close = _kb.fts_search(kb.url, base, rank=rank, mode=mode)
            runs, _ = run(search, queries, qvecs, timed=False)
            close()
            rows.append({"variant": f"FTS only: {rank}, {mode}", "settings": {},
                         **score(ds["qrels"], runs)})
    return rows


# --- report ---------------------------------------------------------------------------------

# KB_FTS_MATCH_CAP at the k users ask for (10) and at the harness's k: how many FTS matches
# the leg may rank, which is also the budget of the OR query's lexemes.
CAPS = (150, 300, 500, 2000)


def cap_sweep(kb: KnowledgeBase, base: Settings, ds: dict[str, Any],
              qvecs: np.ndarray) -> list[dict[str, Any]]:
    rows = []
    for k in (10, K):
        for cap in CAPS:
            s = base.model_copy(update={"fts_match_cap": cap})
            with KnowledgeBase(s, embedder=kb.embedder, database_url=kb.url,
                               project=_kb.PROJECT) as kbv:
                runs, lat = run(_kb.kb_search(kbv), ds["queries"], qvecs, k=k)
            row = {"k": k, "fts_match_cap": cap, **score(ds["qrels"], runs), **latency(lat)}
            rows.append(row)
            logger.info("cap sweep %s", row)
    return rows


def report(results: dict[str, Any]) -> str:
    lines = ["| system | nDCG@10 | MRR@10 | Recall@100 | p50 ms | p95 ms |",
             "|---|---|---|---|---|---|"]
    for name, r in results["systems"].items():
        if "not_run" in r:
            lines.append(f"| {name} | not run ({r['not_run']}) | | | | |")
            continue
        lines.append(f"| {name} | {r['ndcg@10']:.4f} | {r['mrr@10']:.4f} | "
                     f"{r['recall@100']:.4f} | {r.get('p50_ms', '')} | {r.get('p95_ms', '')} |")
    if results.get("ablation"):
        lines += ["", "| variant | nDCG@10 | MRR@10 | Recall@100 |", "|---|---|---|---|"]
        for r in results["ablation"]:
            recall = f"{r['recall@100']:.4f}" if r.get("limit", K) == K else "n/a"
            lines.append(f"| {r['variant']} | {r['ndcg@10']:.4f} | {r['mrr@10']:.4f} | "
                         f"{recall} |")
    if results.get("fts_match_cap"):
        lines += ["", "| k | KB_FTS_MATCH_CAP | nDCG@10 | MRR@10 | p50 ms | p95 ms |",
                  "|---|---|---|---|---|---|"]
        for r in results["fts_match_cap"]:
            lines.append(f"| {r['k']} | {r['fts_match_cap']} | {r['ndcg@10']:.4f} | "
                         f"{r['mrr@10']:.4f} | {r.get('p50_ms', '')} | {r.get('p95_ms', '')} |")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
