"""End-to-end demo: ingest examples/kb/, answer the worked example, print result and prompt,
then a question that proposes the rejected approach, which the ⚠ block warns about.

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
# a question about the rejected approach: the accepted decision first, the rejected record
# below it, and the warning (a question about the current state gets none: decision 0009)
PROPOSAL = "can we use memcached for sessions?"


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
        proposal = kb.search(PROPOSAL)
        print("\n" + "=" * 100 + f"\n{PROPOSAL}\n" + "=" * 100)
        print(render_result(proposal))
        warned = [h.document.slug for h in proposal.rejected]
        print(f"\nwarned about: {', '.join(warned) or 'nothing'}")
    return 0 if top == "dec-cache-v2" and "rej-memcached-2023" in warned else 1


if __name__ == "__main__":
    sys.exit(main())
