"""Run a benchmark: ingest the corpus, search every query, score (reference §20 steps 1–4)."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kb_retriever.errors import InputError
from kb_retriever.kb import KnowledgeBase
from kb_retriever.models import Hit, SearchResult
from kb_retriever.search.pipeline import CUT
from kb_retriever.write.from_files import IngestReport, discover

from .dataset import BenchQuery
from .metrics import answer_contained, mean_or_one, percentile, ranking_metrics, unique_keys

__all__ = ["AGGREGATE_KEYS", "BenchReport", "QueryRun", "context_scores", "rejected_precision",
           "run_benchmark", "score"]

AGGREGATE_KEYS = (
    "ndcg_at_k", "mrr", "precision_at_k", "recall_at_k", "answer_containment_at_k",
    "citation_precision", "refusal_accuracy", "graph_recall", "rejected_recall",
    "rejected_precision", "context_precision", "context_recall", "latency_p50_ms",
    "latency_p95_ms",
)
Progress = Callable[[int, int, str], None]


@dataclass(frozen=True)
class QueryRun:
    """What one search returned, reduced to what the metrics need (plus the raw result)."""

    query: BenchQuery
    result: SearchResult
    latency_ms: float

    @property
    def ranked(self) -> list[str]:
        """The ranking's top ``limit`` by document: primary and the hits the adaptive cutoff
        moved to the runner-ups, by score (the cutoff trims the prompt, not the ranking)."""
        top = [*self.result.primary, *(h for h in self.result.runner_up if h.metadata.get(CUT))]
        return unique_keys(h.document.doc_key for h in sorted(top, key=lambda h: -h.score))

    @property
    def context(self) -> list[str]:
        """The documents of the Context block (primary), in order."""
        return unique_keys(h.document.doc_key for h in self.result.primary)

    @property
    def expanded(self) -> list[str]:
        return unique_keys(h.document.doc_key for h in self.result.expanded)

    @property
    def rejected(self) -> list[str]:
        return unique_keys(h.document.doc_key for h in self.result.rejected)

    @property
    def refused(self) -> bool:
        return bool(self.result.meta.get("should_refuse", not self.result.primary))


@dataclass(frozen=True)
class BenchReport:
    """Aggregates (the ``--json`` keys), per-query rows, and the ingest report."""

    k: int
    aggregates: dict[str, float | None]  # None: no query labels what the metric needs
    per_query: list[dict[str, Any]]
    runs: list[QueryRun] = field(repr=False)
    ingest: IngestReport | None = None

    def to_dict(self) -> dict[str, Any]:
        return {**self.aggregates, "k": self.k, "queries": len(self.per_query),
                "per_query": self.per_query}


def corpus_keys(corpus: str | Path) -> set[str]:
    """Doc keys (file names without extension) of the files the ingestor would read."""
    path = Path(corpus)
    if not path.is_dir():
        raise InputError(f"corpus must be a directory: {corpus}")
    return {f.stem for f, _ in discover([path])}


def corpus_project(corpus: str | Path) -> str:
    """The project ``bench`` uses for ``corpus`` when none is named: one per folder, so two
    corpora never share one, and a corpus benched again finds its documents unchanged.

    >>> corpus_project("/data/a") == corpus_project("/data/b/../a") != corpus_project("/data/b")
    True
    """
    path = str(Path(corpus).resolve())
    return "bench-" + hashlib.sha256(path.encode("utf-8")).hexdigest()[:12]


def check_labels(queries: Sequence[BenchQuery], keys: set[str]) -> None:
    """A label naming a missing document silently caps the score; refuse to run instead."""
    missing = {q.id: sorted(q.doc_keys() - keys) for q in queries if q.doc_keys() - keys}
    if missing:
        sample = "; ".join(f"{qid}: {', '.join(ks)}" for qid, ks in list(missing.items())[:5])
        raise InputError(
            f"{len(missing)} queries name doc keys that are not in the corpus ({sample})"
        )


def run_benchmark(kb: KnowledgeBase, corpus: str | Path, queries: Sequence[BenchQuery], *,
                  k: int = 5, project: str | None = None, tenant: str | None = None,
                  progress: Progress | None = None) -> BenchReport:
    """Ingest ``corpus`` into (tenant, project) and score every query with ``limit = k``.

    Re-ingesting an unchanged corpus is a no-op (content hash), so repeated runs are cheap;
    the documents of files removed from the corpus are deleted (``prune``). A project that
    holds documents of anything else is refused: they would be searched with the corpus.
    """
    if not 1 <= k <= kb.settings.max_limit:
        raise InputError(f"k must be between 1 and {kb.settings.max_limit} (KB_MAX_LIMIT), "
                         f"got {k}")
    check_labels(queries, corpus_keys(corpus))
    report = kb.ingest([corpus], project=project, tenant=tenant, progress=progress, prune=True)
    if report.failed:
        path, msg = report.failed[0]
        raise InputError(f"{len(report.failed)} corpus files failed to ingest ({path}: {msg})")
    _check_alone(kb, report, project, tenant)
    # One untimed search loads the embedding model and warms the pool, so p50/p95 measure
    # steady-state queries rather than start-up.
    kb.search(queries[0].query, limit=k, project=project, tenant=tenant)
    runs = []
    for i, q in enumerate(queries):
        if progress:
            progress(i, len(queries), q.id)
        t = time.perf_counter()
        result = kb.search(q.query, limit=k, project=project, tenant=tenant)
        runs.append(QueryRun(q, result, (time.perf_counter() - t) * 1000.0))
    if progress:
        progress(len(queries), len(queries), "")
    return score(runs, k, ingest=report)


def _check_alone(kb: KnowledgeBase, report: IngestReport, project: str | None,
                 tenant: str | None) -> None:
    """Refuse a project that holds documents besides the corpus's."""
    ours = {*report.added, *report.updated, *report.unchanged}
    others = [d.id for d in kb.list_documents(project=project, tenant=tenant) if d.id not in ours]
    if others:
        name = project or kb.project
        raise InputError(
            f"project {name!r} holds {len(others)} document{'s' * (len(others) > 1)} that "
            f"{'are' if len(others) > 1 else 'is'} not in this corpus ({', '.join(others[:3])}"
            f"{', …' if len(others) > 3 else ''}): they would be searched with it; bench each "
            "corpus in a project of its own (--project), or empty this one")


def score(runs: Sequence[QueryRun], k: int, ingest: IngestReport | None = None) -> BenchReport:
    """Per-query rows and aggregates for finished searches (pure: no I/O). The ranking
    metrics are over the queries that grade a document relevant (``relevance`` above 0): a
    refusal query, one that labels only warnings or related documents, or only grades of 0,
    has none (n/a), instead of zeros."""
    ranked = [r for r in runs if not r.query.expect_refusal and r.query.relevant]
    rank = ranking_metrics({r.query.id: r.ranked for r in ranked},
                           {r.query.id: r.query.relevance for r in ranked}, k)
    rows = [_row(r, rank.get(r.query.id), k) for r in runs]

    def share(key: str) -> float:
        return mean_or_one(float(row[key]) for row in rows if row[key] is not None)

    def labelled_mean(key: str) -> float | None:
        vals = [float(row[key]) for row in rows if row[key] is not None]
        return round(sum(vals) / len(vals), 4) if vals else None

    def mean_of(key: str) -> float:
        mean = labelled_mean(key)
        return 0.0 if mean is None else mean  # reference: 0 if none

    latencies = [r.latency_ms for r in runs]
    aggregates = {
        "ndcg_at_k": mean_of("ndcg"),
        "mrr": mean_of("rr"),
        "precision_at_k": mean_of("precision"),
        "recall_at_k": mean_of("recall"),
        "answer_containment_at_k": labelled_mean("answer_contained"),
        "citation_precision": share("citation_ok"),
        "refusal_accuracy": share("refusal_ok"),
        "graph_recall": share("related_ok"),
        "rejected_recall": share("rejected_ok"),
        "rejected_precision": rejected_precision(rows),
        "context_precision": labelled_mean("context_precision"),
        "context_recall": labelled_mean("context_recall"),
        "latency_p50_ms": percentile(latencies, 50),
        "latency_p95_ms": percentile(latencies, 95),
    }
    return BenchReport(k=k, aggregates=aggregates, per_query=rows, runs=list(runs), ingest=ingest)


def _row(r: QueryRun, rank: dict[str, float] | None, k: int) -> dict[str, Any]:
    q = r.query
    cited = set(r.context) | set(r.expanded) | set(r.rejected)
    context = set(r.context) | set(r.expanded)
    row: dict[str, Any] = {
        "id": q.id,
        "query": q.query,
        "ranked_doc_keys": r.ranked,
        "context_doc_keys": r.context,
        "expanded_doc_keys": r.expanded,
        "rejected_doc_keys": r.rejected,
        "refused": r.refused,
        "expect_refusal": q.expect_refusal,
        "refusal_ok": r.refused == q.expect_refusal,
    }
    for name in ("ndcg", "rr", "precision", "recall"):
        row[name] = None if rank is None else round(rank[name], 4)
    row["answer_contained"] = (
        None if q.expect_answer is None
        else answer_contained(q.expect_answer, (_shown(h) for h in r.result.primary), k)
    )
    row["citation_ok"] = None if q.expect_citation is None else q.expect_citation in cited
    row["related_ok"] = (
        None if not q.expect_related else all(d in context for d in q.expect_related)
    )
    row["rejected_ok"] = (  # every warning expected, as related_ok wants every neighbour
        None if not q.expect_rejected else all(d in r.rejected for d in q.expect_rejected)
    )
    # An injected rejected approach is warranted when the query expects the warning; on an
    # off-topic query every injection is a false alarm.
    row["rejected_false"] = [d for d in r.rejected if d not in set(q.expect_rejected)]
    row["context_precision"], row["context_recall"] = context_scores(r)
    row["latency_ms"] = round(r.latency_ms, 1)
    return row


def context_scores(r: QueryRun) -> tuple[float | None, float | None]:
    """``(precision, recall)`` of what the prompt carries, by document (issue 27).

    Precision: the share of the documents in the Context and RELATED blocks (primary and
    expanded) that the query grades relevant or expects (related or cited); None for an
    off-topic query, an empty context, or a query that labels no such document (one that
    only expects an answer's words or a warning: nothing in its context could count).
    Recall: the share of the relevant and expected-related documents that reach the prompt
    in any block, the ⚠ block included; None when the query labels none.
    """
    q = r.query
    wanted = q.relevant | set(q.expect_related)
    context = unique_keys([*r.context, *r.expanded])
    precision = None
    good = wanted | ({q.expect_citation} if q.expect_citation else set())
    if not q.expect_refusal and context and good:
        precision = round(sum(d in good for d in context) / len(context), 4)
    reached = set(context) | set(r.rejected)
    recall = round(len(wanted & reached) / len(wanted), 4) if wanted else None
    return precision, recall


def rejected_precision(rows: Sequence[dict[str, Any]]) -> float:
    """Share of injected rejected approaches that the query expects (``expect_rejected``),
    over all queries; 1.0 when nothing was injected.

    >>> rejected_precision([{"rejected_doc_keys": ["a", "b"], "rejected_false": ["b"]},
    ...                     {"rejected_doc_keys": [], "rejected_false": []}])
    0.5
    """
    injected = sum(len(row["rejected_doc_keys"]) for row in rows)
    false = sum(len(row["rejected_false"]) for row in rows)
    return round((injected - false) / injected, 4) if injected else 1.0


def _shown(hit: Hit) -> str:
    """What the prompt shows of a context chunk (``prompt.compose``): its document's title,
    its heading path and its text. An answer in a heading ("## MRK-409: the code was already
    sold") reached the model and was counted missing."""
    return "\n".join((hit.document.title or "", hit.heading_path or "", hit.text))
