"""Synonym expansion of the query (reference §5).

A group is a list of interchangeable phrases. When the query mentions any member of a group,
the other members are appended to the text that gets embedded (and OR-ed into the FTS query).
Keyword scoring in the reranker keeps using the original query.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from functools import lru_cache

__all__ = ["expand_query_text", "expansion_phrases", "normalize_phrase", "normalize_groups"]

# Groups with a single member cannot expand anything.
_MIN_GROUP_SIZE = 2


def normalize_phrase(text: str) -> str:
    """Lowercase, trim, collapse whitespace runs to one space (punctuation is kept)."""
    return " ".join(text.lower().split())


def normalize_groups(groups: Iterable[Sequence[str]]) -> list[list[str]]:
    """Normalised, deduplicated groups; empty members and groups of fewer than 2 dropped."""
    out = []
    for group in groups:
        members = list(dict.fromkeys(m for m in (normalize_phrase(str(x)) for x in group) if m))
        if len(members) >= _MIN_GROUP_SIZE:
            out.append(members)
    return out


@lru_cache(maxsize=1024)
def _phrase_pattern(member: str) -> re.Pattern[str]:
    # Phrase boundaries: not preceded/followed by a letter or digit ([^\W_] == [\p{L}\p{N}]).
    return re.compile(r"(?<![^\W_])" + re.escape(member) + r"(?![^\W_])")


def _mentioned(member: str, normalized_query: str) -> bool:
    return _phrase_pattern(member).search(normalized_query) is not None


def expansion_phrases(query: str, groups: Iterable[Sequence[str]]) -> list[str]:
    """Members of every group the query mentions, minus those the query already contains.

    Ordered by group then member, deduplicated.

    >>> expansion_phrases("How do we use k8s?", [["kubernetes", "k8s", "K8S "]])
    ['kubernetes']
    """
    normalized = normalize_phrase(query)
    if not normalized:
        return []
    phrases: dict[str, None] = {}
    for members in normalize_groups(groups):
        hits = {m for m in members if _mentioned(m, normalized)}
        if hits:
            for m in members:
                if m not in hits and not _mentioned(m, normalized):
                    phrases.setdefault(m)
    return list(phrases)


def expand_query_text(query: str, groups: Iterable[Sequence[str]]) -> str:
    """The text to embed: the query followed by its expansion phrases, or the query verbatim.

    >>> expand_query_text("k8s rollout", [["k8s", "kubernetes"]])
    'k8s rollout kubernetes'
    """
    phrases = expansion_phrases(query, groups)
    if not phrases:
        return query
    return (query + " " + " ".join(phrases)).strip()
