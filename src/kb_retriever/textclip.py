"""Cutting text to a width at a word boundary (headings, titles, terminal columns)."""

from __future__ import annotations

__all__ = ["MAX_HEADING_CHARS", "clip_words"]

# A heading is a label: longer ones are pasted prose (a 1.7 MB "heading" overflowed the chunk's
# tsvector, whose limit is 1 MB); they are cut at a word boundary.
MAX_HEADING_CHARS = 200


def clip_words(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` characters, at a word boundary where there is one.

    >>> clip_words("a rather long heading", 12)
    'a rather'
    """
    if len(text) <= limit:
        return text
    cut = text[:limit + 1].rsplit(None, 1)[0] if " " in text[:limit + 1] else text[:limit]
    return cut[:limit].rstrip()
