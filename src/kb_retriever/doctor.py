"""``kb-retriever doctor``: is the approximate index returning what exact search would?

For ``samples`` chunk embeddings drawn from the scope, compare HNSW top-k (the library's
GUCs: ``hnsw.ef_search``, ``iterative_scan = relaxed_order``) with exact top-k (a transaction
with ``SET LOCAL enable_indexscan = off``, same tenant/project filter) — pgvector README,
"Monitoring". Also reports the scope's embedding model and the index its vector leg uses
(as the planner picks it), index validity, sizes and the ef_search in force; ``--reindex``
builds the model's index again with the settings' ``KB_HNSW_M``, ``KB_HNSW_EF_CONSTRUCTION``
and ``KB_HNSW_TYPE`` first.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .checks import valid_name
from .errors import InputError
from .settings import Settings, load_settings, refuse_blank_location
from .store import diagnostics
from .store.diagnostics import Diagnostics
from .store.spaces import HNSW_MAX_HALFVEC, Space, index_type_for

__all__ = ["DoctorReport", "check_index", "diagnose", "format_report"]

RECALL_HINT_BELOW = 0.95  # below this, more ef_search usually buys recall cheaply (§2.4)

@dataclass
class DoctorReport:
    tenant: str
    project: str
    k: int
    samples: int
    chunks_in_scope: int
    ef_search: int
    recall_at_k: float | None
    min_recall: float | None
    approx_rows_mean: float | None
    approx_ms_p50: float | None
    exact_ms_p50: float | None
    indexes: list[dict[str, Any]] = field(default_factory=list)
    sizes_mb: dict[str, float] = field(default_factory=dict)
    distribution: dict[str, Any] = field(default_factory=dict)
    model: dict[str, Any] = field(default_factory=dict)
    vector_index: str | None = None  # the index the scope's vector leg uses (None: exact scan)
    reindexed: bool = False
    shared_buffers_mb: float | None = None
    hints: list[str] = field(default_factory=list)


def _model(store: Diagnostics, report: DoctorReport, space: Space | None,
           settings: Settings | None) -> None:
    """The scope's embedding model, its index, and whether the settings ask for another."""
    if space is None:
        return
    report.model = {"model_id": space.model_id, "dimension": space.dimension,
                    "index_type": space.index_type, "index_name": space.index_name,
                    "hnsw_m": space.m, "hnsw_ef_construction": space.ef_construction}
    if space.index_type == "none":
        report.hints.append(f"{space.dimension}-d embeddings exceed HNSW's limit "
                            f"({HNSW_MAX_HALFVEC} with halfvec): vector searches scan exactly")
    if settings is not None:
        wanted = (index_type_for(space.dimension, settings), settings.hnsw_m,
                  settings.hnsw_ef_construction)
        if wanted[0] != "none" and wanted != (space.index_type, space.m, space.ef_construction):
            report.hints.append(
                f"the settings ask for HNSW on {wanted[0]} with m={wanted[1]}, "
                f"ef_construction={wanted[2]}; the index is {space.index_type} with "
                f"m={space.m}, ef_construction={space.ef_construction}: run doctor --reindex")


def buffers_hint(index: dict[str, Any] | None, shared_buffers_mb: float) -> str | None:
    """A hint when the model's HNSW index is larger than the server's buffers: a vector search
    then copies the graph's pages in from the OS cache (decision 0017, "the server's buffers":
    at 1M chunks, 9.2 ms a search against 3.2 with the graph in the buffers).

    >>> buffers_hint({"name": "kb_chunks_hnsw_1", "size_mb": 1953.0}, 512.0)[:67]
    'kb_chunks_hnsw_1 (1953.0 MB) is larger than shared_buffers (512 MB)'
    >>> buffers_hint({"name": "kb_chunks_hnsw_1", "size_mb": 195.0}, 512.0) is None
    True
    """
    if index is None or index["size_mb"] <= shared_buffers_mb:
        return None
    return (f"{index['name']} ({index['size_mb']} MB) is larger than shared_buffers "
            f"({shared_buffers_mb:g} MB): each vector search copies the graph's pages in from the "
            "OS cache; give the server about a quarter of the memory (docs/scaling.md, section 0)")


def _buffers(store: Diagnostics, report: DoctorReport, space: Space | None) -> None:
    """The server's shared_buffers, and the hint when the model's index is larger."""
    report.shared_buffers_mb = round(store.shared_buffers() / 2**20, 2)
    name = space.index_name if space is not None else None
    model_index = next((i for i in report.indexes if i["name"] == name), None)
    hint = buffers_hint(model_index, report.shared_buffers_mb)
    if hint:
        report.hints.append(hint)


def _index_hints(indexes: list[dict[str, Any]]) -> list[str]:
    """What the indexes of ``kb_chunks`` call for: a missing kind, and each invalid index (an
    invalid one of a model beside a valid one of another) with a mend that does not block."""
    hints = []
    for method, what in (("hnsw", "vector"), ("gin", "full-text")):
        if not any(i["method"] == method for i in indexes):
            hints.append(f"no {method.upper()} index on kb_chunks: {what} search scans every "
                         "row (a bulk load with defer_indexes may have stopped early)")
    for name in (i["name"] for i in indexes if i["valid"] and i["name"].endswith("_new")):
        hints.append(f"{name} was left by a reindex that stopped before it was renamed (it "
                     "serves searches meanwhile): doctor --reindex finishes it")
    for index in (i for i in indexes if i.get("shards_without")):
        hints.append(f"{index['name']} is missing, INVALID or unreadable on "
                     f"{index['shards_without']} of {index['shards']} shards: their tenants' "
                     "searches scan every row; doctor --reindex builds it again on every shard")
    for name in (i["name"] for i in indexes if not i["valid"] and not i.get("shards_without")):
        if name.endswith("_new"):  # (spaces.reindex builds the new one under this name)
            hints.append(f"{name} is INVALID, left by an interrupted reindex: DROP INDEX "
                         f"CONCURRENTLY {name} (searches use the index it was to replace)")
        else:  # CONCURRENTLY: a plain REINDEX blocks the table's searches and writes meanwhile
            hints.append(f"{name} is INVALID (a failed CREATE INDEX CONCURRENTLY?): "
                         f"REINDEX INDEX CONCURRENTLY {name}")
    return hints


def check_index(store: Diagnostics, *, tenant: str, project: str, samples: int = 20,
                k: int = 10, ef_search: int = 100, settings: Settings | None = None,
                reindex: bool = False) -> DoctorReport:
    """Measure recall@k of HNSW against exact search on ``samples`` embeddings of the scope.
    With ``reindex``, first build the scope's model's index again with ``settings``."""
    if samples < 1 or k < 1:
        raise InputError("samples and k must be at least 1")
    space = store.project_space(tenant, project)
    reindexed = False
    if reindex:
        if space is None:
            raise InputError(f"tenant {tenant!r}, project {project!r} holds no chunks: "
                             "nothing to reindex")
        space = store.rebuild_index(space, settings or Settings())
        reindexed = True
    count = store.chunks_in_scope(tenant, project)
    dist = store.distribution()
    report = DoctorReport(tenant=tenant, project=project, k=k, samples=0, chunks_in_scope=count,
                          ef_search=ef_search, recall_at_k=None, min_recall=None,
                          approx_rows_mean=None, approx_ms_p50=None, exact_ms_p50=None,
                          reindexed=reindexed)
    _model(store, report, space, settings)
    report.distribution = {"citus": dist.citus, "workers": dist.workers,
                           "colocated": dist.colocated,
                           "tables": [{"table": t, "method": m, "shards": n}
                                      for t, m, n in dist.tables]} if dist.citus else {}
    report.indexes = [{"name": i.name, "method": i.method, "valid": i.valid, "ready": i.ready,
                       "size_mb": round(i.bytes / 2**20, 2),
                       **({"shards": i.shards, "shards_without": i.shards_without}
                          if i.shards else {})} for i in store.indexes()]
    for rel in ("kb_chunks", "kb_documents", "kb_edges"):
        report.sizes_mb[rel] = round(store.relation_size(rel) / 2**20, 2)
    if not dist.citus:  # on Citus the shards, and so the graph's pages, are on the workers
        _buffers(store, report, space)
    report.hints += _index_hints(report.indexes)
    if count == 0 or space is None:
        report.hints.append(f"no chunks in tenant {tenant!r}, project {project!r}")
        return report
    recalls, rows, t_approx, t_exact = [], [], [], []
    drawn = store.sample(tenant, project, samples)
    if drawn:
        report.vector_index = store.plan_index(tenant, project, space, drawn[0][1], k + 1)
        if report.vector_index is None and space.index_name is not None:
            report.hints.append(f"the planner scans this scope exactly instead of using "
                                f"{space.index_name} (a small project, or stale statistics)")
    for qid, vec in drawn:
        # k + 1 and drop the sample itself: it is trivially its own nearest neighbour.
        approx, ta = store.nearest(tenant, project, space, vec, k + 1, exact=False,
                                   ef_search=ef_search)
        exact, te = store.nearest(tenant, project, space, vec, k + 1, exact=True,
                                  ef_search=ef_search)
        approx = [i for i in approx if i != qid][:k]
        exact = [i for i in exact if i != qid][:k]
        if exact:
            recalls.append(len(set(approx) & set(exact)) / len(exact))
        rows.append(len(approx))
        t_approx.append(ta)
        t_exact.append(te)
    report.samples = len(rows)
    if recalls:
        report.recall_at_k = round(statistics.fmean(recalls), 4)
        report.min_recall = round(min(recalls), 4)
    report.approx_rows_mean = round(statistics.fmean(rows), 2)
    report.approx_ms_p50 = round(statistics.median(t_approx), 3)
    report.exact_ms_p50 = round(statistics.median(t_exact), 3)
    if report.recall_at_k is not None and report.recall_at_k < RECALL_HINT_BELOW:
        report.hints.append(
            f"recall@{k} {report.recall_at_k:.3f} < {RECALL_HINT_BELOW}: raise KB_HNSW_EF_SEARCH "
            f"(now {ef_search}, e.g. to {min(ef_search * 2, 1000)}) and run doctor again; each "
            "doubling costs roughly 1.5-2x vector-arm latency"
        )
    return report


def format_report(r: DoctorReport) -> str:
    lines = [f"scope: tenant {r.tenant!r}, project {r.project!r}: {r.chunks_in_scope} chunks"]
    d = r.distribution
    if d:
        hashed = [f"{t['table']} {t['shards']} shards" for t in d["tables"]
                  if t["method"] != "reference"]
        reference = [t["table"] for t in d["tables"] if t["method"] == "reference"]
        together = "co-located" if d["colocated"] else "NOT co-located"
        lines.append(f"distributed by Citus {d['citus']} over {d['workers']} node(s) holding "
                     f"shards: {len(hashed)} tables hashed by tenant_id, {together} "
                     f"({', '.join(hashed)}); reference tables: {', '.join(reference)}")
    else:
        lines.append("one PostgreSQL server (not distributed)")
    m = r.model
    if m:
        index = ("no approximate index" if m["index_type"] == "none" else
                 f"HNSW on {m['index_type']}({m['dimension']}) {m['index_name']}, m={m['hnsw_m']}, "
                 f"ef_construction={m['hnsw_ef_construction']}")
        lines.append(f"embedding model: {m['model_id']} ({m['dimension']}-d); {index}"
                     + (" (rebuilt now)" if r.reindexed else ""))
        lines.append(f"the vector leg uses: {r.vector_index or 'an exact scan'}")
    if r.recall_at_k is not None:
        lines.append(
            f"recall@{r.k}: {r.recall_at_k:.3f} (min {r.min_recall:.3f}) over {r.samples} "
            f"sampled chunks, hnsw.ef_search={r.ef_search}, iterative_scan=relaxed_order; "
            f"approx {r.approx_ms_p50} ms vs exact {r.exact_ms_p50} ms (p50), "
            f"{r.approx_rows_mean} rows per approximate query"
        )
    for i in r.indexes:
        state = "valid" if i["valid"] else "INVALID"
        where = f" over {i['shards']} shards" if i.get("shards") else ""
        lines.append(f"index {i['name']} ({i['method']}): {state}, {i['size_mb']} MB{where}")
    lines.append("sizes (MB, incl. indexes and TOAST): "
                 + ", ".join(f"{k} {v}" for k, v in r.sizes_mb.items()))
    if r.shared_buffers_mb is not None:
        lines.append(f"server: shared_buffers {r.shared_buffers_mb:g} MB")
    lines += [f"hint: {h}" for h in r.hints]
    return "\n".join(lines)


def diagnose(*, database_url: str | None = None, home: str | Path | None = None,
             tenant: str = "default", project: str = "default", samples: int = 20,
             k: int = 10, reindex: bool = False) -> DoctorReport:
    """Connect (by URL, ``KB_DATABASE_URL``, else the embedded server of ``home``/``KB_HOME``)
    and :func:`check_index` the scope (``reindex``: rebuild its model's index first)."""
    tenant, project = valid_name("tenant", tenant), valid_name("project", project)
    refuse_blank_location(database_url, home)  # (not the defaults, as `or` took them)
    settings: Settings = load_settings()
    url = database_url if database_url is not None else settings.database_url
    if not url:
        from .store.embedded import start_embedded

        url = start_embedded(Path(home) if home is not None else settings.home)
    with diagnostics.connect(url, settings) as store:
        return check_index(store, tenant=tenant, project=project, samples=samples, k=k,
                           ef_search=settings.hnsw_ef_search, settings=settings, reindex=reindex)
