from __future__ import annotations

import re

import pytest

from kb_retriever.ranking import glob_to_sql_regex, matches_any_glob

CASES = [
    ("hr/**", "hr/leave.md", True),
    ("hr/**", "hr/policies/2024/leave.md", True),
    ("hr/**", "finance/hr/leave.md", False),
    ("hr/**/x.md", "hr/x.md", False),  # "**" between slashes needs >= 1 directory
    ("hr/**/x.md", "hr/a/x.md", True),
    ("hr/**/x.md", "hr/a/b/x.md", True),
    ("docs/*.md", "docs/a.md", True),
    ("docs/*.md", "docs/sub/a.md", False),  # "*" does not cross "/"
    ("docs/?.md", "docs/a.md", True),
    ("docs/?.md", "docs/ab.md", False),
    ("docs/?.md", "docs//.md", False),
    ("docs/a.md", "docs/aXmd", False),  # "." is literal
    ("Docs/*.md", "docs/a.md", False),  # case-sensitive
    ("docs/*.md", "docs/a.md.bak", False),  # anchored at the end
    ("*.md", "sub/a.md", False),  # anchored at the start
    ("**.md", "sub/a.md", True),
    ("a+b/(c)[d]{e}$^|.md", "a+b/(c)[d]{e}$^|.md", True),  # regex operators are literal
    ("a+b/*.md", "aab/x.md", False),
    ("back\\slash/*", "back\\slash/x", True),
]


@pytest.mark.parametrize(("glob", "path", "expected"), CASES)
def test_matches_any_glob(glob: str, path: str, expected: bool) -> None:
    assert matches_any_glob(path, [glob]) is expected


@pytest.mark.parametrize(("glob", "path", "expected"), CASES)
def test_sql_regex_has_the_same_semantics(glob: str, path: str, expected: bool) -> None:
    # The constructs we emit (^ $ .* [^/] and backslash-escaped punctuation) mean the same in
    # PostgreSQL's ARE flavour and in Python's re, so Python can check the SQL form.
    pattern = glob_to_sql_regex(glob)
    assert (re.search(pattern, path, re.DOTALL) is not None) is expected


def test_sql_regex_shape() -> None:
    assert glob_to_sql_regex("hr/**/*.md") == r"^hr/.*/[^/]*\.md$"
    assert glob_to_sql_regex("a1_b-c") == "^a1_b-c$"  # no backslash before letters, digits


def test_any_of_several_globs() -> None:
    assert matches_any_glob("ops/run.md", ["hr/**", "ops/*"])
    assert not matches_any_glob("ops/run.md", ["hr/**", "dev/*"])


def test_no_globs_or_no_path() -> None:
    assert not matches_any_glob("a.md", [])
    assert not matches_any_glob(None, ["**"])
