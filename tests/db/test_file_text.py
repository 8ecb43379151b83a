"""A file read back by id (``get_by_ids``, the MCP server's ``get_document``): its headings
and each paragraph once, though its chunks hold neither the one nor the other so."""

from __future__ import annotations

import pytest

from kb_retriever import Settings

pytestmark = pytest.mark.db

PARAGRAPHS = [f"Step {i}: run the rollback script for service {i} and watch its error rate."
              for i in range(40)]
RUNBOOK = ("# Deploys\n\nWe deploy with Argo.\n\n## Rollback\n\n" + "\n\n".join(PARAGRAPHS)
           + "\n\n## Freeze\n\nNo deploys on Fridays.\n\n# Incidents\n\nPage the on-call.\n")


def test_a_file_reads_back_with_its_headings_and_each_paragraph_once(make_kb, tmp_path) -> None:
    """The text was the chunks joined: no heading (they live in each chunk's heading path),
    and the paragraphs a long section's chunks repeat from the chunk before (the overlap)
    came twice."""
    kb = make_kb(settings=Settings(chunk_hard_cap_tokens=120, chunk_overlap_tokens=40))
    (tmp_path / "deploys.md").write_text(RUNBOOK, encoding="utf-8")
    assert not kb.ingest([tmp_path]).failed
    [doc] = kb.get_by_ids(["deploys.md"])
    assert len(doc.chunks) > 4  # the section was split, with overlap
    assert any(c.text.split("\n\n")[0] in doc.chunks[i - 1].text  # (the chunks overlap)
               for i, c in enumerate(doc.chunks) if i)
    assert doc.text == RUNBOOK.strip()
    assert all(doc.text.count(p) == 1 for p in PARAGRAPHS)
