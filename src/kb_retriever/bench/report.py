"""Render a :class:`~kb_retriever.bench.runner.BenchReport` and check it against the gates."""

from __future__ import annotations

from typing import Any

from kb_retriever.settings import Settings

from .runner import AGGREGATE_KEYS, BenchReport

__all__ = ["check_gates", "render_report"]

# Aggregate key → Settings field holding its threshold (env KB_BENCHMARK_THRESHOLD_*).
GATES = {
    "ndcg_at_k": "benchmark_threshold_ndcg",
    "mrr": "benchmark_threshold_mrr",
    "citation_precision": "benchmark_threshold_citation_precision",
    "refusal_accuracy": "benchmark_threshold_refusal_accuracy",
}


def check_gates(aggregates: dict[str, float | None], settings: Settings
                ) -> list[dict[str, Any]]:
    """One entry per gate: ``{metric, value, threshold, passed}``."""
    out = []
    for metric, field_name in GATES.items():
        threshold = float(getattr(settings, field_name))
        value = float(aggregates[metric] or 0.0)
        out.append({"metric": metric, "value": value, "threshold": threshold,
                    "passed": value >= threshold})
    return out


def _misses(row: dict[str, Any]) -> list[str]:
    why = []
    if not row["refusal_ok"]:
        why.append("refused" if row["refused"] else "did not refuse")
    if row["rr"] is not None and row["rr"] < 1.0:
        why.append(f"first relevant at rank {round(1 / row['rr'])}" if row["rr"] else
                   "no relevant doc in top-k")
    if row["citation_ok"] is False:
        why.append("citation missing")
    if row["related_ok"] is False:
        why.append("related missing")
    if row["rejected_ok"] is False:
        why.append("rejected missing")
    if row.get("rejected_false"):
        why.append(f"rejected not warranted: {', '.join(row['rejected_false'])}")
    if row["answer_contained"] is False:
        why.append("answer not in top-k")
    return why


def render_report(report: BenchReport, gates: list[dict[str, Any]] | None = None) -> str:
    """The terminal report: per-query misses, then aggregates (and the gates when checked)."""
    k = report.k
    lines = [f"Benchmark: {len(report.per_query)} queries, k={k}"]
    if report.ingest is not None:
        lines.append(f"Corpus: {report.ingest.summary()}")
    misses = [(row, _misses(row)) for row in report.per_query]
    misses = [(row, why) for row, why in misses if why]
    lines.append("")
    if misses:
        lines.append(f"Queries with a miss ({len(misses)}):")
        lines.append(f"  {'id':<34} {'nDCG':>6} {'RR':>5}  why / top doc keys")
        for row, why in misses:
            ndcg = "-" if row["ndcg"] is None else f"{row['ndcg']:.3f}"
            rr = "-" if row["rr"] is None else f"{row['rr']:.2f}"
            lines.append(f"  {row['id'][:34]:<34} {ndcg:>6} {rr:>5}  {'; '.join(why)}")
            lines.append(f"  {'':<34} {'':>6} {'':>5}  top: {', '.join(row['ranked_doc_keys'])}")
    else:
        lines.append("No query missed anything.")
    lines.append("")
    lines.append("Aggregates:")
    labels = {
        "ndcg_at_k": f"nDCG@{k}", "mrr": "MRR", "precision_at_k": f"precision@{k}",
        "recall_at_k": f"recall@{k}", "answer_containment_at_k": f"answer containment@{k}",
    }
    for key in AGGREGATE_KEYS:
        value = report.aggregates[key]
        unit = " ms" if key.endswith("_ms") and value is not None else ""
        shown = "n/a" if value is None else value  # no query labels it
        lines.append(f"  {labels.get(key, key.replace('_', ' ')):<28} {shown:>8}{unit}")
    if gates is not None:
        lines.append("")
        lines.append("Gates:")
        for g in gates:
            mark = "ok  " if g["passed"] else "MISS"
            lines.append(f"  {mark} {g['metric']:<22} {g['value']:.4f} >= {g['threshold']:.2f}")
    return "\n".join(lines)
