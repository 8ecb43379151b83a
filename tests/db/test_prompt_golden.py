"""Golden file: the composed prompt for the worked example on examples/kb/.

Regenerate after an intended change with ``UPDATE_GOLDEN=1 make test`` and review the diff.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

import pytest

from kb_retriever import compose_prompt

pytestmark = pytest.mark.db

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "worked_example_prompt.txt"
NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def test_worked_example_prompt_matches_golden_file(example_kb):
    result = example_kb.search("what cache layer did we standardise on?", now=NOW)
    prompt = compose_prompt(result, project="default", now=NOW, timezone="UTC")
    if os.environ.get("UPDATE_GOLDEN"):
        GOLDEN.write_text(prompt, encoding="utf-8")
    assert prompt == GOLDEN.read_text(encoding="utf-8")
