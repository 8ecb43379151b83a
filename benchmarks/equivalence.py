"""The behaviour check of a refactoring: every result of 792 searches, before against after.

    .venv/bin/python benchmarks/equivalence.py dump before.json   # on the old code
    .venv/bin/python benchmarks/equivalence.py dump after.json    # on the new code
    .venv/bin/python benchmarks/equivalence.py compare before.json after.json

``dump FILE --queries N`` searches only each set's first N queries (CI's smoke run of the
script); a refactoring is checked on all of them.

The searches are the queries of ``examples/benchmark`` and both held-out sets (99 queries),
each under eight configurations: the defaults, a tag filter, the AND full-text mode, ``limit``
10, semantic only, without reranking, without graph expansion, and with an @mention. A dump
holds each search's whole result (``SearchResult.to_dict()``: every hit of primary, expanded,
rejected and runner-up with its scores and breakdown, and ``meta`` without its timings) and its
rendered prompt, so a compare fails on any score that moves in its last digit. The clock is
fixed, so recency is stable.
"""

from __future__ import annotations

import json
import sys
import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
SETS = {
    "benchmark": ROOT / "examples" / "benchmark",
    "dataplatform": ROOT / "examples" / "benchmark-heldout" / "dataplatform",
    "mobile-it": ROOT / "examples" / "benchmark-heldout" / "mobile-it",
}
NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
#: name -> (Settings overrides, search keyword arguments); "tag" filters by the first hit's
#: first tag, "last" @mentions the document of the first query's last hit
VARIANTS: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "defaults": ({}, {}),
    "tag": ({}, {"filters": "tag"}),
    "and-mode": ({"fts_query_mode": "plain"}, {}),
    "limit-10": ({}, {"limit": 10}),
    "semantic": ({"hybrid_search_enabled": False}, {}),
    "no-rerank": ({"reranking_enabled": False}, {}),
    "no-graph": ({"graph_expansion_enabled": False}, {}),
    "mention": ({}, {"mention_doc_ids": "last"}),
}


def _searches(home: Path, limit: int | None) -> Iterator[tuple[str, dict[str, Any]]]:
    from kb_retriever import KnowledgeBase, Settings, compose_prompt

    for name, path in SETS.items():
        queries = yaml.safe_load((path / "queries.yaml").read_text())["queries"][:limit]
        with KnowledgeBase(Settings(), home=home, project=name) as kb:
            kb.ingest([path / "corpus"])
            first = kb.search(queries[0]["query"], now=NOW).primary
            tag = next((t for h in first for t in h.document.tags), None)
            last = [first[-1].document.id] if first else []
        for variant, (overrides, kwargs) in VARIANTS.items():
            if kwargs.get("filters") == "tag":
                kwargs = {**kwargs, "filters": {"tags": [tag]} if tag else None}
            if kwargs.get("mention_doc_ids") == "last":
                kwargs = {**kwargs, "mention_doc_ids": last}
            with KnowledgeBase(Settings(**overrides), home=home, project=name) as kb:
                for q in queries:
                    result = kb.search(q["query"], now=NOW, **kwargs)
                    out = result.to_dict()
                    out["meta"].pop("retrieval_ms", None)
                    out["meta"].pop("timings_ms", None)
                    out["prompt"] = compose_prompt(result, now=NOW)
                    yield f"{name}/{variant}/{q['id']}", out


def dump(target: Path, limit: int | None = None) -> int:
    # The server may still be writing when the directory goes: that is no failure of the run.
    with tempfile.TemporaryDirectory(prefix="kb-eq-", ignore_cleanup_errors=True) as tmp:
        home = Path(tmp)
        home.chmod(0o755)  # as root the server's user must reach it
        results = dict(_searches(home, limit))
    target.write_text(json.dumps(results, indent=1, sort_keys=True, ensure_ascii=False) + "\n")
    print(f"{len(results)} searches -> {target}")
    return 0


def compare(before: Path, after: Path) -> int:
    a, b = json.loads(before.read_text()), json.loads(after.read_text())
    differ = sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))
    for key in differ[:20]:
        print(f"differs: {key}")
    print(f"{len(a)} searches before, {len(b)} after, {len(differ)} differ")
    return 1 if differ or not a else 0


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "dump":
        return dump(Path(argv[1]))
    if (len(argv) == 4 and argv[0] == "dump" and argv[2] == "--queries" and argv[3].isdigit()
            and int(argv[3]) > 0):
        return dump(Path(argv[1]), int(argv[3]))
    if len(argv) == 3 and argv[0] == "compare":
        return compare(Path(argv[1]), Path(argv[2]))
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
