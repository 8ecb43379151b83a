"""BM25 over the candidate pool: the keyword signal with term frequency and length norms.

The pool (the few dozen candidates of one query) stands in for the corpus statistics, as in
:func:`~kb_retriever.ranking.text.pool_idf`. Scores are divided by the score a document
would get if every query term saturated (``Σ idf·(k1+1)``), so they sit in ``[0, 1]`` and
keep an absolute meaning (a weak lexical match stays low even when it is the pool's best).
"""

from __future__ import annotations

import functools
import json
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .text import words

__all__ = ["CorpusLexemes", "lexeme_bm25", "lexeme_idf", "pool_bm25"]

# Robertson & Zaragoza (2009) defaults; k1 saturates repeated terms, b normalises length.
K1 = 1.2
B = 0.75
# A 4+-letter token that starts a longer word ("deploy" -> "deployment") counts half,
# as in the coverage keyword score (no stemmer in the pure core).
_PREFIX_LEN = 4
_PREFIX_CREDIT = 0.5


def _tf(token: str, counts: Counter[str]) -> float:
    tf = float(counts.get(token, 0))
    if len(token) >= _PREFIX_LEN:
        tf += _PREFIX_CREDIT * sum(
            n for w, n in counts.items() if w != token and w.startswith(token)
        )
    return tf


def pool_bm25(tokens: Sequence[str], texts: Sequence[str], *, k1: float = K1,
              b: float = B) -> list[float]:
    """Normalised BM25 of each text for the unique ``tokens``, with pool statistics.

    >>> s = pool_bm25(["quota"], ["quota quota limit", "limit reached", "quota"])
    >>> s[0] > 0 and s[1] == 0.0
    True
    """
    unique = list(dict.fromkeys(t.lower() for t in tokens if t))
    counts = [Counter(words(t)) for t in texts]
    if not unique or not counts:
        return [0.0] * len(texts)
    n = len(counts)
    lengths = [sum(c.values()) for c in counts]
    avgdl = (sum(lengths) / n) or 1.0
    tfs = [[_tf(t, c) for t in unique] for c in counts]
    idf = []
    for j in range(len(unique)):
        df = sum(1 for row in tfs if row[j] > 0)
        idf.append(math.log(1.0 + (n - df + 0.5) / (df + 0.5)))
    ceiling = sum(i * (k1 + 1.0) for i in idf) or 1.0
    out = []
    for row, dl in zip(tfs, lengths, strict=True):
        norm = k1 * (1.0 - b + b * dl / avgdl)
        score = sum(i * tf * (k1 + 1.0) / (tf + norm) for i, tf in zip(idf, row, strict=True) if tf)
        out.append(score / ceiling)
    return out


# A lexeme absent from the database's most-common list is rarer than the list's minimum; half
# of that minimum is its estimated frequency. With no statistics at all (a table never
# analysed), frequencies come from the pool itself.
_UNLISTED_SHARE = 0.5
_MIN_FREQ = 1e-4  # floor: ~1 in 10,000 chunks, so idf stays finite


@dataclass(frozen=True)
class CorpusLexemes:
    """The database's lexeme statistics (``store.catalog_sql.lexeme_stats_sql``): the most common
    lexemes of kb_chunks.tsv with the fraction of chunks holding each, the minimum listed
    fraction, and the chunk count estimate. Empty before the first ANALYZE.

    >>> s = CorpusLexemes.from_row({"reltuples": 1000.0, "elems": ["cach", "queue"],
    ...                             "freqs": [0.4, 0.02, 0.02, 0.4, 0.0]})
    >>> s.chunks_with("cach"), s.chunks_with("redi"), s.for_query(["redi"])["min_freq"]
    (400.0, 10.0, 0.02)
    """

    freqs: Mapping[str, float] = field(default_factory=dict)
    min_freq: float | None = None
    rows: float = 0.0

    @classmethod
    def from_rows(cls, rows: Sequence[Mapping[str, Any]]) -> CorpusLexemes:
        """From the statistics read's rows (one, or none on an unknown table)."""
        return cls.from_row(rows[0] if rows else None)

    @classmethod
    def from_row(cls, row: Mapping[str, Any] | None) -> CorpusLexemes:
        if not row or not row.get("elems") or not row.get("freqs"):
            return cls(rows=float((row or {}).get("reltuples") or 0.0))
        elems, freqs = list(row["elems"]), [float(f) for f in row["freqs"]]
        # freqs = one per element, then the minimum, maximum and null fraction
        return cls(freqs=dict(zip(elems, freqs[:len(elems)], strict=True)),
                   min_freq=freqs[len(elems)] if len(freqs) > len(elems) else None,
                   rows=float(row.get("reltuples") or 0.0))

    def chunks_with(self, lexeme: str) -> float | None:
        """Estimated number of chunks holding ``lexeme`` (None without statistics). A lexeme
        not listed is rarer than the listed minimum: half of it, as :func:`lexeme_idf` assumes."""
        if self.rows <= 0 or self.min_freq is None:
            return None
        f = self.freqs.get(lexeme)
        return (f if f is not None else self.min_freq * _UNLISTED_SHARE) * self.rows

    @functools.cached_property
    def estimates(self) -> tuple[str, float] | None:
        """What the full-text leg needs to choose its OR lexemes in the database: rarest first,
        while their estimated matches fit the match cap, at least the rarest one
        (``store.sql.LexemeBudget``): each listed lexeme's estimated chunk count as a JSON
        object, and the estimate of a lexeme not listed; None without statistics. Computed
        once, with the arithmetic of :meth:`chunks_with` (the tests' Python oracle chooses by
        it and must agree with the statement, tests/db/test_lexeme_selection.py).

        >>> CorpusLexemes({"cach": 0.4}, 0.02, 1000.0).estimates
        ('{"cach": 400.0}', 10.0)
        """
        if self.rows <= 0 or self.min_freq is None:
            return None
        listed = {lex: f * self.rows for lex, f in self.freqs.items()}
        return (json.dumps(listed, ensure_ascii=False, separators=(", ", ": ")),
                self.min_freq * _UNLISTED_SHARE * self.rows)

    def for_query(self, lexemes: Sequence[str]) -> dict[str, Any]:
        """``{"freqs": {lexeme: fraction or None}, "min_freq": ...}`` for :func:`lexeme_idf`."""
        return {"freqs": {lex: self.freqs.get(lex) for lex in lexemes},
                "min_freq": self.min_freq}


def lexeme_idf(query_lexemes: Sequence[str], stats: Mapping[str, Any] | None,
               pool_tfs: Sequence[Mapping[str, int]]) -> dict[str, float]:
    """BM25 idf per stemmed query lexeme from database statistics (:class:`CorpusLexemes`).

    ``stats`` = ``{"freqs": {lexeme: fraction or None}, "min_freq": fraction or None}``.
    """
    freqs = dict((stats or {}).get("freqs") or {})
    min_freq = (stats or {}).get("min_freq")
    n = len(pool_tfs) or 1
    out = {}
    for lex in query_lexemes:
        p = freqs.get(lex)
        if p is None:
            if min_freq is not None:
                p = float(min_freq) * _UNLISTED_SHARE
            else:
                df = sum(1 for tf in pool_tfs if tf.get(lex))
                p = (df + 0.5) / (n + 1.0)
        p = min(max(float(p), _MIN_FREQ), 1.0)
        out[lex] = math.log(1.0 + (1.0 - p + _MIN_FREQ) / (p + _MIN_FREQ))
    return out


def lexeme_bm25(tfs: Sequence[Mapping[str, int]], lengths: Sequence[int],
                idf: Mapping[str, float], *, k1: float = K1, b: float = B) -> list[float]:
    """Normalised BM25 from stemmed term counts (the database's tsvector) and global idf.

    >>> idf = {"quota": 3.0, "error": 0.2}
    >>> s = lexeme_bm25([{"quota": 1}, {"error": 3}], [20, 20], idf)
    >>> s[0] > s[1] > 0
    True
    """
    if not tfs:
        return []
    avgdl = (sum(lengths) / len(lengths)) or 1.0
    ceiling = sum(i * (k1 + 1.0) for i in idf.values()) or 1.0
    out = []
    for tf_map, dl in zip(tfs, lengths, strict=True):
        norm = k1 * (1.0 - b + b * (dl or avgdl) / avgdl)
        score = sum(idf.get(lex, 0.0) * tf * (k1 + 1.0) / (tf + norm)
                    for lex, tf in tf_map.items() if tf)
        out.append(score / ceiling)
    return out
