"""End-to-end demo: ingest examples/kb/, answer the worked example, print result and prompt.

Run it with ``make demo`` (or ``python examples/demo.py`` inside the project's venv). It uses the
embedded PostgreSQL under KB_HOME (default ~/.kb-retriever) unless KB_DATABASE_URL is set.
"""

from __future__ import annotations

import sys
from pathlib import Path

from kb_retriever import KnowledgeBase, compose_prompt
from kb_retriever.prompt.render import render_result

KB_DIR = Path(__file__).resolve().parent / "kb"
QUESTION = "what cache layer did we standardise on?"


def main() -> int:
    with KnowledgeBase(project="demo") as kb:
        report = kb.ingest([KB_DIR])
        print(f"ingest: {report.summary()}\n")
        result = kb.search(QUESTION)
        print(render_result(result, explain=True))
        print("\n" + "=" * 100 + "\ncomposed prompt:\n" + "=" * 100)
        print(compose_prompt(result, project="demo", timezone=kb.settings.prompt_timezone))
        top = result.primary[0].document.slug if result.primary else None
        print(f"\nanswer source: {top}")
    return 0 if top == "dec-cache-v2" else 1


if __name__ == "__main__":
    sys.exit(main())
