"""Pure ranking stages: plain functions over plain data, no database and no I/O.

One verb per module: :func:`fuse_rrf` (fusion), :func:`rerank`, :func:`diversify`,
:func:`should_refuse` (grounding), plus the text, glob and synonym helpers they share with the
store.
"""

from __future__ import annotations

from .diversify import diversify
from .fusion import fuse_rrf
from .globs import glob_to_sql_regex, matches_any_glob
from .grounding import evidence_score, is_grounded, should_refuse
from .rerank import rerank
from .synonyms import expand_query_text, expansion_phrases
from .text import keyword_score, query_tags, tokenize_query

__all__ = [
    "diversify",
    "evidence_score",
    "expand_query_text",
    "expansion_phrases",
    "fuse_rrf",
    "glob_to_sql_regex",
    "is_grounded",
    "keyword_score",
    "matches_any_glob",
    "query_tags",
    "rerank",
    "should_refuse",
    "tokenize_query",
]
