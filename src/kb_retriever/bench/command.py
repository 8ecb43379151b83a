"""``kb-retriever bench``: the command-line shell over the benchmark package.

Exit codes: 0 ok, 2 bad input (raised as KbError, handled by the main CLI), 3 a gate missed.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from kb_retriever.kb import KnowledgeBase
from kb_retriever.settings import load_settings

from .dataset import load_queries
from .metrics import require_ranx
from .report import check_gates, render_report
from .runner import corpus_project, run_benchmark

__all__ = ["EXIT_GATE", "run_bench_command"]

EXIT_GATE = 3
RUNNER_UP_MAX = 1000  # the Settings upper bound of runner_up_limit


def run_bench_command(args: argparse.Namespace) -> int:
    """Run ``bench`` from parsed arguments; print the report; return the exit code."""
    from kb_retriever.write.progress import Progress

    require_ranx()  # before the corpus is ingested: say which extra to install at once
    queries = load_queries(args.queries)
    settings = load_settings()
    if args.tune:
        # The tuner rebuilds each query's whole candidate pool from primary + runner-up, so
        # the runner-up list must hold all of it: with hybrid search that is up to twice
        # k × multiplier (both legs), hence the maximum. It changes nothing else.
        settings = settings.model_copy(update={"runner_up_limit": RUNNER_UP_MAX})
    elif settings.runner_up_limit < args.k:
        # the ranking scored is the top k with the hits the adaptive cutoff moved to the
        # runner-ups (QueryRun.ranked): all of them, whatever the cap, or nDCG would depend
        # on KB_RUNNER_UP_LIMIT and on --tune
        settings = settings.model_copy(update={"runner_up_limit": args.k})
    kb = KnowledgeBase(settings, database_url=args.database_url, home=args.home,
                       tenant=args.tenant, project=args.project or corpus_project(args.corpus))
    with kb:
        report = run_benchmark(kb, args.corpus, queries, k=args.k,
                               progress=Progress("bench", unit="step"))
    gates = check_gates(report.aggregates, kb.settings) if args.gate else None
    tuning = _tune(report, kb, args.k) if args.tune else None

    if args.json:
        out: dict[str, Any] = report.to_dict()
        if gates is not None:
            out["gates"] = gates
        if tuning is not None:
            out["tuning"] = tuning
        print(json.dumps(out, indent=2, ensure_ascii=False))
    else:
        print(render_report(report, gates))
        if tuning is not None:
            print()
            print(_render_tuning(tuning))
    missed = [g for g in gates or () if not g["passed"]]
    if missed:
        names = ", ".join(f"{g['metric']} {g['value']:.4f} < {g['threshold']:.2f}" for g in missed)
        print(f"kb-retriever: benchmark gate missed: {names}", file=sys.stderr)
        return EXIT_GATE
    return 0


def _tune(report: Any, kb: KnowledgeBase, k: int) -> dict[str, Any]:
    from .tune import pool_check, pools_from_runs, tune

    pools = pools_from_runs(report.runs)
    result = tune(pools, kb.settings, k=k)
    matched = pool_check(report.runs, pools, kb.settings, k)
    result["pools_reproducing_live_ranking"] = f"{matched}/{len(pools)}"
    return result


def _metric(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.4f}"


def _render_tuning(t: dict[str, Any]) -> str:
    lines = [
        f"Tuning (coordinate ascent on {t['train_queries']} train queries, "
        f"{t['heldout_queries']} held out, seed {t['seed']}; pools reproduce live ranking for "
        f"{t['pools_reproducing_live_ranking']} queries):",
        f"  train    nDCG@{t['k']}  {_metric(t['train_ndcg_before'])} -> "
        f"{_metric(t['train_ndcg_after'])}",
        f"  held-out nDCG@{t['k']}  {_metric(t['heldout_ndcg_before'])} -> "
        f"{_metric(t['heldout_ndcg_after'])}",
        f"  refusal accuracy (all) {t['refusal_accuracy_before']:.4f} -> "
        f"{t['refusal_accuracy_after']:.4f}",
        "  weights:",
    ]
    for name, after in t["weights_after"].items():
        before = t["weights_before"][name]
        mark = "" if after == before else "   (changed)"
        lines.append(f"    {name:<20} {before:<8} -> {after}{mark}")
    if t["env"]:
        lines.append("  to apply:")
        lines.extend(f"    {line}" for line in t["env"])
    else:
        lines.append("  no change beats the current weights on train.")
    return "\n".join(lines)
