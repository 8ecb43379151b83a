"""Speed benchmark: bulk load, search latency vs the SQL floor and peers, filtered recall.

    .venv/bin/python benchmarks/perf.py [--sizes 10000,100000] [--with-1m] [--queries 500]
                                        [--rounds 3]

One embedded PostgreSQL, one database per size. Each system searches in its own child
process (so peak RSS is the search process's own), with the query vector given (no
embedding time), in rounds taken in turn (kb, langchain, llamaindex, kb, ...): each figure
is the median of the rounds. Results: benchmarks/results/perf-<size>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

K, TENANT, KC = 10, "perf", 30  # kc = limit x candidate_multiplier (3), as the library uses
PROJECTS = [f"p{t}" for t in range(10)]

# The bare one-statement hybrid of reference/postgres-performance.md §3.1 on our tables.
FLOOR_SQL = """
WITH q AS (SELECT websearch_to_tsquery('english', %(text)s) AS query),
vec AS MATERIALIZED (
  SELECT id, {vexpr} <=> %(qvec)b::{vtype} AS dist FROM kb_chunks
  WHERE tenant_id = %(tenant)s AND model = {model} {filt} ORDER BY dist LIMIT %(kc)s),
vec_r AS (SELECT id, row_number() OVER (ORDER BY dist + 0, id) AS r FROM vec),
fts_m AS MATERIALIZED (
  SELECT c.id, c.tsv FROM kb_chunks c, q
  WHERE c.tsv @@ q.query AND c.tenant_id = %(tenant)s {cfilt} LIMIT %(cap)s),
fts AS (SELECT m.id, row_number() OVER (ORDER BY ts_rank_cd(m.tsv, q.query) DESC, m.id) AS r
  FROM fts_m m, q ORDER BY r LIMIT %(kc)s),
fused AS (SELECT id, coalesce(0.7 / (60 + vec_r.r), 0) + coalesce(0.3 / (60 + fts.r), 0) AS score
  FROM vec_r FULL OUTER JOIN fts USING (id) ORDER BY score DESC LIMIT %(n_out)s)
SELECT c.id, c.document_id, c.text, f.score FROM fused f
JOIN kb_chunks c ON c.tenant_id = %(tenant)s AND c.id = f.id ORDER BY f.score DESC
"""


def pct(xs: list[float]) -> dict[str, float]:
    a = np.asarray(xs)
    return {"p50": round(float(np.percentile(a, 50)), 3),
            "p95": round(float(np.percentile(a, 95)), 3),
            "mean": round(float(a.mean()), 3), "n": len(xs)}


def timed(fn: Any, args: list[Any], warmup: int) -> list[float]:
    for a in args[:warmup]:
        fn(*a)
    out = []
    for a in args:
        t = time.perf_counter()
        fn(*a)
        out.append((time.perf_counter() - t) * 1000)
    return out


def rss_mb() -> float:
    """Peak RSS of this process. VmHWM, because Linux's ru_maxrss keeps the parent's peak
    across fork + exec (every child would report the parent's corpus-sized peak)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


# ---------------------------------------------------------------- child: kb + floor
def vector_space(url: str) -> dict[str, str]:
    """The model's indexed expression (``kb_models``, decision 0013): a raw query must order by
    ``(embedding::vector(d))`` (or ``::halfvec(d)``) and name the model to use its index."""
    import psycopg

    with psycopg.connect(url) as conn:
        space_id, dim, kind = conn.execute(
            "SELECT id, dimension, index_type FROM kb_models ORDER BY id LIMIT 1").fetchone()
    vtype = f"{'vector' if kind == 'none' else kind}({dim})"
    return {"vexpr": f"(embedding::{vtype})", "vtype": vtype, "model": str(space_id)}


def child_kb(url: str, data: Path, warmup: int) -> dict[str, Any]:
    import psycopg
    from pgvector.psycopg import register_vector

    from kb_retriever import HashingEmbedder, KnowledgeBase, Settings

    qv = np.load(data / "qvec.npy")
    meta = json.loads((data / "queries.json").read_text())
    texts, tenants, broad = meta["texts"], meta["tenants"], meta["broad"]
    out: dict[str, Any] = {"rss_mb_start": rss_mb()}
    settings = Settings()
    with psycopg.connect(url, autocommit=True) as conn:
        register_vector(conn)
        for k, v in (("hnsw.ef_search", settings.hnsw_ef_search),
                     ("hnsw.iterative_scan", "relaxed_order")):
            conn.execute("SELECT set_config(%s, %s, false)", [k, str(v)])
        for name, filt in (("unfiltered", False), ("tenant", True)):
            sql = FLOOR_SQL.format(filt="AND project_key = %(p)s" if filt else "",
                                   cfilt="AND c.project_key = %(p)s" if filt else "",
                                   **vector_space(url))

            def floor(vec: np.ndarray, text: str, t: int, sql: str = sql) -> None:
                conn.execute(sql, {"text": " or ".join(text.split()), "qvec": vec,
                                   "tenant": TENANT, "p": PROJECTS[t], "kc": KC,
                                   "cap": settings.fts_match_cap, "n_out": K}).fetchall()

            out[f"floor_{name}"] = pct(timed(floor, [(qv[i], texts[i], tenants[i])
                                                     for i in range(len(texts))], warmup))
    kb = KnowledgeBase(settings, embedder=HashingEmbedder(384), database_url=url, tenant=TENANT)
    with kb:
        for name, scope in (("unfiltered", None), ("tenant", True)):
            stages: dict[str, list[float]] = {}

            def search(vec: np.ndarray, text: str, t: int, scope: Any = scope,
                       stages: dict[str, list[float]] = stages) -> None:
                r = kb.search(text, limit=K, project=PROJECTS if scope is None else PROJECTS[t],
                              query_embedding=vec)
                for s, ms in r.meta["timings_ms"].items():
                    stages.setdefault(s, []).append(ms)
                stages.setdefault("retrieval_ms", []).append(r.meta["retrieval_ms"])
                stages.setdefault("expanded", []).append(len(r.expanded))
                stages.setdefault("rejected_n", []).append(len(r.rejected))

            out[f"kb_{name}"] = pct(timed(search, [(qv[i], texts[i], tenants[i])
                                                   for i in range(len(texts))], warmup))
            for pc in (50, 95):
                out[f"kb_{name}_stages_p{pc}"] = {s: round(float(np.percentile(v, pc)), 3)
                                                  for s, v in stages.items()}
        # Bounded worst case: the 20 most common words, tenant-scoped and not.
        for name, scope in (("unfiltered", PROJECTS), ("tenant", PROJECTS[0])):
            lat = timed(lambda v, s=scope: kb.search(broad, limit=K, project=s, query_embedding=v),
                        [(qv[i],) for i in range(min(20, len(qv)))], 3)
            out[f"kb_broad_{name}"] = pct(lat)
    # The same search with the peers' full-text semantics (an AND of every word, which matches
    # a handful of chunks): how much of the gap to langchain-postgres is the OR leg's work.
    and_settings = settings.model_copy(update={"fts_query_mode": "plain"})
    with KnowledgeBase(and_settings, embedder=HashingEmbedder(384), database_url=url,
                       tenant=TENANT) as kb_and:
        out["kb_and_query_unfiltered"] = pct(timed(
            lambda v, x: kb_and.search(x, limit=K, project=PROJECTS, query_embedding=v),
            [(qv[i], texts[i]) for i in range(len(texts))], warmup))
    out["rss_mb_peak"] = rss_mb()
    return out


# ---------------------------------------------------------------- child: peers
def _sa_urls(url: str) -> tuple[str, str]:
    from peers import sqlalchemy_url

    return sqlalchemy_url(url, "psycopg"), sqlalchemy_url(url, "asyncpg")


def _llamaindex_store(url: str) -> Any:
    """LlamaIndex's PGVectorStore on our server: hybrid, HNSW m16/efc64 like ours."""
    from llama_index.vector_stores.postgres import PGVectorStore

    sync_url, async_url = _sa_urls(url)
    return PGVectorStore(connection_string=sync_url.replace("+psycopg", "+psycopg2"),
                         async_connection_string=async_url, table_name="perf", embed_dim=384,
                         hybrid_search=True, text_search_config="english",
                         hnsw_kwargs={"hnsw_m": 16, "hnsw_ef_construction": 64,
                                      "hnsw_ef_search": 40,
                                      "hnsw_dist_method": "vector_cosine_ops"})


def child_langchain(url: str, data: Path, warmup: int) -> dict[str, Any]:
    from dataclasses import replace

    from langchain_core.embeddings import FakeEmbeddings
    from langchain_postgres import PGEngine, PGVectorStore
    from langchain_postgres.v2.hybrid_search_config import (
        HybridSearchConfig,
        reciprocal_rank_fusion,
    )

    qv = np.load(data / "qvec.npy")
    texts = json.loads((data / "queries.json").read_text())["texts"]
    engine = PGEngine.from_connection_string(url=_sa_urls(url)[0])
    cfg = HybridSearchConfig(tsv_column="content_tsv", primary_top_k=KC, secondary_top_k=KC,
                             fusion_function=reciprocal_rank_fusion)
    store = PGVectorStore.create_sync(engine, table_name="lc_perf",
                                      embedding_service=FakeEmbeddings(size=384),
                                      hybrid_search_config=cfg)

    def search(vec: np.ndarray, text: str) -> None:
        docs = store.similarity_search_by_vector(vec.tolist(), k=K,
                                                 hybrid_search_config=replace(cfg, fts_query=text))
        assert docs

    lat = timed(search, [(qv[i], texts[i]) for i in range(len(texts))], warmup)
    return {"hybrid": pct(lat), "rss_mb_peak": rss_mb(),
            "config": "HybridSearchConfig(primary_top_k=30, secondary_top_k=30, "
                      "reciprocal_rank_fusion), plainto_tsquery (library default)"}


def child_llama(url: str, data: Path, warmup: int) -> dict[str, Any]:
    from llama_index.core.vector_stores.types import VectorStoreQuery, VectorStoreQueryMode

    qv = np.load(data / "qvec.npy")
    texts = json.loads((data / "queries.json").read_text())["texts"]
    store = _llamaindex_store(url)

    def search(vec: np.ndarray, text: str) -> None:
        r = store.query(VectorStoreQuery(query_embedding=vec.tolist(), similarity_top_k=K,
                                         sparse_top_k=K, query_str=text,
                                         mode=VectorStoreQueryMode.HYBRID))
        assert r.nodes

    lat = timed(search, [(qv[i], texts[i]) for i in range(len(texts))], warmup)
    return {"hybrid": pct(lat), "rss_mb_peak": rss_mb(),
            "config": "hybrid_search=True, similarity_top_k=10, sparse_top_k=10, hnsw ef_search 40 "
                      "(its dense and sparse lists are concatenated, not fused)"}


CHILDREN = {"kb": child_kb, "langchain": child_langchain, "llamaindex": child_llama}


# ---------------------------------------------------------------- parent
def run_child(kind: str, url: str, data: Path, warmup: int) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, __file__, "--child", kind, "--url", url,
                           "--data", str(data), "--warmup", str(warmup)],
                          capture_output=True, text=True, timeout=1800)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        return {"error": " | ".join(tail)}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def load_kb(url: str, corpus: Any) -> dict[str, Any]:
    import _synth

    from kb_retriever import HashingEmbedder, KnowledgeBase, Settings
    from kb_retriever.write.bulk import bulk_load

    with KnowledgeBase(Settings(), embedder=HashingEmbedder(384), database_url=url, tenant=TENANT):
        pass  # migrations + fixed choices (dimension, language, empty indexes)
    items = ((PROJECTS[t], d, v) for t in range(10) for d, v in _synth.documents(corpus, t))
    rep = bulk_load(url, items, tenant=TENANT, defer_indexes=True)
    return {"documents": rep.documents, "chunks": rep.chunks, "load_s": round(rep.load_s, 2),
            "chunks_per_s": round(rep.chunks_per_second), "index_build_s": rep.index_build_s,
            "chunks_per_s_incl_indexes": round(rep.chunks / (rep.load_s + sum(
                rep.index_build_s.values())))}


def index_memory(rows: int, dim: int = 384) -> str:
    """``maintenance_work_mem`` for a peer's index build: what kb-retriever's bulk load gives
    its own (``store.spaces.graph_memory_mb``), so that at 1M chunks every system's HNSW graph
    is built in memory, not on disk for an hour."""
    from kb_retriever.store.spaces import graph_memory_mb

    return f"{graph_memory_mb(rows, dim)}MB"


def _copy_peer(conn: Any, table: str, cols: str, types: list[str], rows: Any,
               index_sql: list[str]) -> dict[str, float]:
    """Drop the table's secondary indexes, COPY the rows, build the indexes again."""
    defs = [r[0] for r in conn.execute(
        "SELECT indexdef FROM pg_indexes WHERE tablename = %s AND indexname NOT LIKE '%%pkey'",
        [table]).fetchall()]
    for (name,) in conn.execute(
            "SELECT indexname FROM pg_indexes WHERE tablename = %s AND indexname NOT LIKE '%%pkey'",
            [table]).fetchall():
        conn.execute(f'DROP INDEX "{name}"')
    t = time.perf_counter()
    copy_sql = f"COPY {table} ({cols}) FROM STDIN WITH (FORMAT BINARY)"
    copied = 0
    with conn.cursor() as cur, cur.copy(copy_sql) as cp:
        cp.set_types(types)
        for r in rows:
            cp.write_row(r)
            copied += 1
    load = time.perf_counter() - t
    t = time.perf_counter()
    conn.execute(f"SET maintenance_work_mem = '{index_memory(copied)}'")
    for d in defs + index_sql:
        conn.execute(d)
    conn.execute(f"ANALYZE {table}")
    return {"copy_s": round(load, 2), "index_build_s": round(time.perf_counter() - t, 2),
            "indexes": defs + index_sql}


def load_peers(url: str, corpus: Any,
               peers: tuple[str, ...] = ("langchain", "llamaindex")) -> dict[str, Any]:
    """Load ``corpus`` into the own table of each of ``peers``: their load and index times
    (or the error of a peer that cannot load: reported, not fatal)."""
    loaders = {"langchain": _load_langchain, "llamaindex": _load_llamaindex}
    out: dict[str, Any] = {}
    for name in peers:
        try:
            out[name] = loaders[name](url, corpus)
        except Exception as exc:
            out[name] = {"error": f"{type(exc).__name__}: {exc}"[:400]}
    return out


def _load_langchain(url: str, corpus: Any) -> dict[str, Any]:
    import uuid

    import psycopg
    from langchain_postgres import PGEngine
    from langchain_postgres.v2.hybrid_search_config import HybridSearchConfig
    from pgvector.psycopg import register_vector

    engine = PGEngine.from_connection_string(url=_sa_urls(url)[0])
    engine.init_vectorstore_table("lc_perf", 384, hybrid_search_config=HybridSearchConfig(
        tsv_column="content_tsv"))
    with psycopg.connect(url, autocommit=True) as conn:
        register_vector(conn)
        conn.execute("CREATE TEMP TABLE lc_stage (id uuid, content text, embedding vector(384))")
        t = time.perf_counter()
        with conn.cursor() as cur, cur.copy(
                "COPY lc_stage FROM STDIN WITH (FORMAT BINARY)") as cp:
            cp.set_types(["uuid", "text", "vector"])
            for i, txt in enumerate(corpus.texts):
                cp.write_row((uuid.UUID(int=i + 1), txt, corpus.vectors[i]))
        conn.execute("INSERT INTO lc_perf (langchain_id, content, embedding, content_tsv, "
                     "langchain_metadata) SELECT id, content, embedding, "
                     "to_tsvector('english', content), '{}' FROM lc_stage")
        load = time.perf_counter() - t
        t = time.perf_counter()
        conn.execute(f"SET maintenance_work_mem = '{index_memory(len(corpus.texts))}'")
        conn.execute("CREATE INDEX ON lc_perf USING hnsw (embedding vector_cosine_ops)")
        conn.execute("CREATE INDEX ON lc_perf USING gin (content_tsv)")
        conn.execute("ANALYZE lc_perf")
        return {"load_s": round(load, 2), "index_build_s": round(time.perf_counter() - t, 2)}


def _load_llamaindex(url: str, corpus: Any) -> dict[str, Any]:
    import psycopg
    from pgvector.psycopg import register_vector
    from psycopg.types.json import Json

    store = _llamaindex_store(url)
    store._initialize()  # its own CREATE TABLE and indexes (no public hook for this)
    with psycopg.connect(url, autocommit=True) as conn:
        register_vector(conn)
        rows = ((corpus.texts[i], Json({}), str(i), corpus.vectors[i])
                for i in range(len(corpus.texts)))
        return _copy_peer(conn, "data_perf", "text, metadata_, node_id, embedding",
                          ["varchar", "json", "varchar", "vector"], rows, [])


def filtered_recall(url: str, corpus: Any, qv: np.ndarray, tenants: np.ndarray) -> dict[str, Any]:
    """Recall@10 of the library's filtered vector leg vs numpy brute force inside the tenant."""
    import psycopg
    from pgvector.psycopg import register_vector

    from kb_retriever import Settings

    s = Settings()
    space = vector_space(url)
    hits, rows_back = [], []
    with psycopg.connect(url, autocommit=True) as conn:
        register_vector(conn)
        conn.execute("SELECT set_config('hnsw.ef_search', %s, false)", [str(s.hnsw_ef_search)])
        conn.execute("SET hnsw.iterative_scan = relaxed_order")
        for i in range(len(qv)):
            t = int(tenants[i])
            got = [r[0] for r in conn.execute(
                f"WITH v AS MATERIALIZED (SELECT metadata, {space['vexpr']} <=> "
                f"%(q)b::{space['vtype']} AS d FROM kb_chunks WHERE tenant_id = %(ten)s "
                f"AND model = {space['model']} AND project_key = %(p)s ORDER BY d LIMIT %(k)s) "
                "SELECT (metadata->>'i')::int FROM v ORDER BY d + 0",
                {"q": qv[i], "ten": TENANT, "p": PROJECTS[t], "k": K}).fetchall()]
            idx = np.flatnonzero(corpus.tenant == t)
            exact = idx[np.argsort(-(corpus.vectors[idx] @ qv[i]))[:K]]
            hits.append(len(set(got) & set(exact.tolist())) / K)
            rows_back.append(len(got))
    return {"recall_at_10": round(float(np.mean(hits)), 4), "rows_mean": float(np.mean(rows_back)),
            "ef_search": s.hnsw_ef_search, "iterative_scan": "relaxed_order",
            "index": space["vexpr"]}


def sizes_mb(url: str) -> dict[str, float]:
    import psycopg

    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT c.relname, pg_total_relation_size(c.oid) FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'public' "
            "AND c.relname IN ('kb_chunks', 'kb_chunks_hnsw_1', 'kb_chunks_tsv_ix', "
            "'lc_perf', 'data_perf')").fetchall()
    return {name: round(b / 2**20, 1) for name, b in rows}


def machine() -> dict[str, Any]:
    mem = ""
    try:
        mem = next(line for line in Path("/proc/meminfo").read_text().splitlines()
                   if line.startswith("MemTotal"))
    except (OSError, StopIteration):
        pass
    return {"cpus": os.cpu_count(), "platform": platform.platform(), "python":
            platform.python_version(), "memory": mem.split(":", 1)[-1].strip()}


def median_of_rounds(outs: list[dict[str, Any]]) -> dict[str, Any]:
    """Each number's median over the rounds' outputs (nested dicts alike); a round that
    failed gives its error.

    >>> median_of_rounds([{"a": {"p50": 1.0}, "c": "x"}, {"a": {"p50": 3.0}, "c": "x"},
    ...                   {"a": {"p50": 2.0}, "c": "x"}])
    {'a': {'p50': 2.0}, 'c': 'x'}
    """
    for out in outs:
        if "error" in out:
            return out
    merged: dict[str, Any] = {}
    for key, first in outs[0].items():
        values = [o.get(key) for o in outs]
        if isinstance(first, dict):
            merged[key] = median_of_rounds(values)
        elif isinstance(first, (int, float)) and not isinstance(first, bool):
            m = float(np.median(values))
            ints = all(isinstance(v, int) for v in values) and m.is_integer()
            merged[key] = int(m) if ints else round(m, 3)
        else:
            merged[key] = first
    return merged


def run_size(server_url: str, n: int, args: argparse.Namespace) -> dict[str, Any]:
    import _synth
    import psycopg
    from psycopg import sql
    from psycopg.conninfo import make_conninfo

    db = f"perf_{n}"
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(db)))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(db)))
    url = make_conninfo(server_url, dbname=db)
    res: dict[str, Any] = {"size": n, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                           "machine": machine(), "loadavg_start": os.getloadavg(), "k": K,
                           "candidates_per_arm": KC}
    t = time.perf_counter()
    corpus = _synth.make_corpus(n)
    res["generate_s"] = round(time.perf_counter() - t, 1)
    print(f"[{n}] corpus generated in {res['generate_s']} s; loading", file=sys.stderr)
    res["ingest"] = load_kb(url, corpus)
    with psycopg.connect(url) as conn:  # the server-side ceiling: to_tsvector alone
        sample = corpus.texts[:5000]
        t = time.perf_counter()
        conn.execute("SELECT count(to_tsvector('english', t)) FROM unnest(%s::text[]) t",
                     [sample]).fetchone()
        rate = len(sample) / (time.perf_counter() - t)
        res["ingest"]["to_tsvector_only_rows_per_s"] = round(rate)
    print(f"[{n}] kb loaded: {res['ingest']}", file=sys.stderr)
    if not args.skip_peers:
        res["peer_load"] = load_peers(url, corpus)
        print(f"[{n}] peers loaded: {res['peer_load']}", file=sys.stderr)
    res["sizes_mb"] = sizes_mb(url)
    qv, texts, tenants = _synth.queries(corpus, args.queries)
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp)
        np.save(data / "qvec.npy", qv)
        (data / "queries.json").write_text(json.dumps({
            "texts": texts, "tenants": tenants.tolist(), "broad": " ".join(corpus.vocab[:20])}))
        # Rounds of every system in turn, so that a slow minute on the VM hits all of them:
        # each figure is the median of its rounds (the rounds' own values are kept).
        systems = ["kb"] + ([] if args.skip_peers else ["langchain", "llamaindex"])
        rounds: dict[str, list[dict[str, Any]]] = {s: [] for s in systems}
        for r in range(args.rounds):
            for system in systems:
                rounds[system].append(run_child(system, url, data, args.warmup))
                out = rounds[system][-1]
                print(f"[{n}] round {r + 1} {system}: "
                      f"{out.get('hybrid', out.get('kb_unfiltered', out))}", file=sys.stderr)
        for system in systems:
            res[system] = median_of_rounds(rounds[system])
            res[system]["rounds"] = rounds[system]
    res["filtered_recall"] = filtered_recall(url, corpus, qv, tenants)
    res["loadavg_end"] = os.getloadavg()
    kb = res["kb"]
    if "error" not in kb:
        res["ratios_p95"] = {
            f"kb_over_floor_{v}": round(kb[f"kb_{v}"]["p95"] / kb[f"floor_{v}"]["p95"], 2)
            for v in ("unfiltered", "tenant")
        }
        for peer in ("langchain", "llamaindex"):
            if "hybrid" in res.get(peer, {}):
                res["ratios_p95"][f"{peer}_over_kb"] = round(
                    res[peer]["hybrid"]["p95"] / kb["kb_unfiltered"]["p95"], 2)
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(db)))
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="10000,100000")
    ap.add_argument("--with-1m", action="store_true", help="also run 1,000,000 chunks (slow)")
    ap.add_argument("--queries", type=int, default=500)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3,
                    help="search runs per system, taken in turn; figures are their medians")
    ap.add_argument("--skip-peers", action="store_true")
    ap.add_argument("--out-dir", default=str(HERE / "results"))
    ap.add_argument("--tag", default="", help="suffix of the result file (perf-<size><tag>.json)")
    ap.add_argument("--child", choices=sorted(CHILDREN))
    ap.add_argument("--url")
    ap.add_argument("--data")
    args = ap.parse_args()
    if args.child:
        print(json.dumps(CHILDREN[args.child](args.url, Path(args.data), args.warmup)))
        return 0
    from kb_retriever.store.embedded import start_embedded

    sizes = [int(s) for s in args.sizes.split(",") if s] + ([1_000_000] if args.with_1m else [])
    # The server may still be writing when the directory goes: that is no failure of the run.
    with tempfile.TemporaryDirectory(prefix="kb-perf-", ignore_cleanup_errors=True) as home:
        server_url = start_embedded(Path(home))
        for n in sizes:
            res = run_size(server_url, n, args)
            out = Path(args.out_dir) / f"perf-{n}{args.tag}.json"
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps(res, indent=2) + "\n")
            print(json.dumps({k: res.get(k) for k in ("size", "ingest", "ratios_p95",
                                                     "filtered_recall")}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
