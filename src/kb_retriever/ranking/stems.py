"""The query's stemmed lexemes, remembered per word so a search rarely asks the database.

PostgreSQL's text-search parser joins characters across ASCII whitespace only inside an XML
tag, so the lexemes of a text are the union of the lexemes of its whitespace-separated words
(stop words give none), each read in the context it has in the text (:func:`words_of`). A
knowledge base keeps one :class:`StemCache`: a word is stemmed by the database once (in the
configured language, so the lexemes match the stored ``tsvector`` exactly), and a query whose
words are all known needs no round trip. ``tests/db/test_stems.py`` checks the union against
``to_tsvector`` of the whole text on a real server, for hand-picked and generated texts.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

__all__ = ["StemCache", "union_of", "words_of"]

_ASCII_SPACE = re.compile(r"[ \t\n\r\f\v]+")


def words_of(text: str) -> list[str]:
    """The distinct whitespace-separated words of ``text`` as the database must stem them.

    Only ASCII whitespace separates: the database's parser may treat other space-like
    characters as part of a token, and a split finer than the parser's would change lexemes.
    Every word but a leading one keeps one space before it: the parser reads some tokens
    differently at the very start of a text (``~/notes.md`` is a path there, and ``/notes.md``
    after a space), so each word is stemmed in the context it has in the whole text.

    >>> words_of("Rotate  the\tkey, rotate the key")
    ['Rotate', ' the', ' key,', ' rotate', ' key']
    >>> words_of(" leading")
    [' leading']

    A ``<`` may open an XML tag, the one token that spans whitespace (``<a href="x y">``):
    such a text is stemmed whole, as one word.

    >>> words_of("x<y z>w")
    ['x<y z>w']
    """
    if "<" in text:
        return [text]
    pieces = _ASCII_SPACE.split(text)
    words = [w if i == 0 else " " + w for i, w in enumerate(pieces) if w]
    return list(dict.fromkeys(words))


class StemCache:
    """Lexemes per (text-search configuration, word); bounded, thread-safe, oldest out first.

    >>> stems = StemCache(max_words=2)
    >>> stems.lookup("english", ["keys", "rotated"])
    ({}, ['keys', 'rotated'])
    >>> stems.add("english", [{"word": "keys", "lexemes": ["key"]},
    ...                       {"word": "rotated", "lexemes": ["rotat"]}])
    {'keys': ('key',), 'rotated': ('rotat',)}
    >>> union_of(stems.lookup("english", ["rotated", "keys"])[0])
    ['key', 'rotat']
    >>> _ = stems.add("english", [{"word": "the", "lexemes": []}])  # evicts "keys"
    >>> stems.lookup("english", ["keys", "the"])
    ({'the': ()}, ['keys'])
    """

    def __init__(self, max_words: int = 50_000) -> None:
        self._max = max_words
        self._lexemes: dict[tuple[str, str], tuple[str, ...]] = {}
        self._lock = threading.Lock()

    def lookup(self, config: str, words: Iterable[str]
               ) -> tuple[dict[str, tuple[str, ...]], list[str]]:
        """(the cached words with their lexemes, the words still to stem) for ``config``."""
        found: dict[str, tuple[str, ...]] = {}
        missing: list[str] = []
        with self._lock:
            for w in words:
                hit = self._lexemes.get((config, w))
                if hit is None:
                    missing.append(w)
                else:
                    found[w] = hit
        return found, missing

    def add(self, config: str, rows: Iterable[Mapping[str, Any]]
            ) -> dict[str, tuple[str, ...]]:
        """Remember the database's answer (rows of ``word`` and its ``lexemes``); returns it."""
        fresh = {row["word"]: tuple(row["lexemes"] or ()) for row in rows}
        with self._lock:
            for w, lexemes in fresh.items():
                self._lexemes[(config, w)] = lexemes
            while len(self._lexemes) > self._max:
                del self._lexemes[next(iter(self._lexemes))]
        return fresh

    def clear(self) -> None:
        with self._lock:
            self._lexemes.clear()

    def __len__(self) -> int:
        return len(self._lexemes)


def union_of(lexemes: Mapping[str, Sequence[str]]) -> list[str]:
    """The sorted distinct lexemes of every word: the order ``tsvector_to_array`` gives for the
    whole text (PostgreSQL sorts lexemes bytewise, which for UTF-8 is code-point order)."""
    return sorted({lex for per_word in lexemes.values() for lex in per_word})
