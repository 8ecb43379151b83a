"""The transparent weighted-sum reranker (reference §10–11, with the fixes of §24.8/9/15).

score = base + additive + canonical, where

* ``base      = Wv·vector + Wk·keyword(text) + Wh·keyword(heading_path)``
* ``additive  = Wt·tag_overlap + Wp·preamble + Wr·recency + Ws·status_active + mention_boost``
* ``canonical = priority_weight·retrieval_priority − status_penalty − auto_tier_penalty``

Every term lands in the hit's :class:`~kb_retriever.models.ScoreBreakdown`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, NamedTuple

from kb_retriever.models import Candidate, DocumentRef, Hit, Origin, ScoreBreakdown, construct
from kb_retriever.settings import Settings

from .bm25 import lexeme_bm25, lexeme_idf, pool_bm25
from .signals import _PREAMBLE_PATTERNS, ADJUSTMENTS, RECENCY_BUCKETS, SIGNALS, Evidence, _aware
from .text import (
    normalize_tags,
    pool_idf,
    query_tags,
    score_folded,
    tokenize_query,
    unique_folded,
    words,
)

__all__ = ["RECENCY_BUCKETS", "Scored", "rank", "rerank"]

# A signal as one call scores it: name, in the base group?, weight (None: pre-weighted), function
_Row = tuple[str, bool, float | None, Callable[[Evidence], float]]


class _Query(NamedTuple):
    """What the reranker derives from the query once, before scoring each candidate."""

    tokens: list[str]
    tags: set[str]
    asks_property: bool  # a status/owner/date question (preamble signal)
    now: datetime
    mention_doc_ids: frozenset[int]
    idf: Mapping[str, float] | None  # token weights over the candidate pool, or None
    signals: tuple[_Row, ...]  # the signal table with this call's weights (_rows)


def _rows(settings: Settings, cosine: bool = True) -> tuple[_Row, ...]:
    """:data:`SIGNALS` with their weights read once per call, not once per candidate; without
    ``cosine``, the vector signal weighs nothing."""
    return tuple((sig.name, sig.group == "base",
                  None if sig.weight is None else
                  0.0 if sig.name == "vector" and not cosine else getattr(settings, sig.weight),
                  sig.value)
                 for sig in SIGNALS)


class Scored(NamedTuple):
    """A reranked candidate: its score and the terms of its :class:`ScoreBreakdown` by name
    (the keys are ``signals.TERMS``), with its :class:`Hit` built on demand."""

    score: float
    candidate: Candidate
    terms: Mapping[str, float]

    @property
    def document(self) -> DocumentRef:
        return self.candidate.document

    @property
    def uid(self) -> str:
        return str(self.candidate.chunk_id)  # a primary (or runner-up) hit's uid

    def rescored(self, total: float) -> Scored:
        """A copy whose total is ``total``, the difference booked as a canonical adjustment
        (a boost when it rises, a penalty when it falls), so ``total = base + additive +
        canonical`` still holds. For the trust-gradient reorderings that move an item next to
        another (history questions, an accepted decision above its rejected alternative)."""
        t = dict(self.terms)
        delta = total - t["total"]
        if delta >= 0:
            t["canonical_boost"] += delta
        else:
            t["canonical_penalty"] -= delta
        t["canonical"] += delta
        t["total"] = total
        return Scored(total, self.candidate, t)

    def hit(self, origin: Origin = Origin.PRIMARY) -> Hit:
        c = self.candidate
        breakdown = construct(ScoreBreakdown, {
            **self.terms,
            "hop_decay": None,  # not reached through the graph
            "raw_similarity": c.vector_similarity,
            "fused_score": c.fused_score,
            "vector_rank": c.vector_rank,
            "fts_rank": c.fts_rank,
            "lexeme_tf": c.lexeme_tf,
            "lexeme_count": c.lexeme_count,
        })
        return construct(Hit, {
            "chunk_id": c.chunk_id,
            "text": c.text,
            "heading_path": c.heading_path,
            "score": breakdown.total,
            "scores": breakdown,
            "origin": origin,
            "document": c.document,
            "chunk_order": c.chunk_order,
            "similarity": c.vector_similarity,
            "metadata": c.metadata,
            "chunk_uid": c.chunk_uid,
            "edge_type": None, "from_slug": None, "hop": None,  # not reached through the graph
        })


def rerank(
    query: str,
    candidates: Sequence[Candidate],
    settings: Settings,
    *,
    mention_doc_ids: frozenset[int] = frozenset(),
    now: datetime | None = None,
    lexeme_stats: Mapping[str, Any] | None = None,
) -> list[Hit]:
    """Score every candidate and return them all as primary hits, best first.

    The sort is stable: equal scores keep the input order (the store's fused order). Nothing is
    dropped; per-document capping is :func:`~kb_retriever.ranking.diversify`'s job.

    Pass-through path: with ``settings.reranking_enabled`` false, or when the query has no
    tokens left after stop-word removal, no signal is computed: ``base`` is the candidate's
    ``fused_score`` and ``total = fused_score + mention_boost + canonical``. Unlike the
    reference (§24.15), the canonical adjustment and the @mention boost still apply there,
    because the trust gradient and an explicit @mention are not relevance signals the user
    switched off. With no canonical or auto-generated docs and no mentions, the output is the
    input order whenever the input is in fused order (as the store returns it). Note that RRF
    scores are small (~0.01), so in this path a canonical priority boost (up to 0.1) outweighs
    the fused order: canonical docs come first.

    ``now`` (default: the current UTC time) ages ``document.doc_date`` into a recency bucket
    when the chunk carries no ``recency_bucket`` metadata.

    Example::

        hits = rerank("how do we rotate the oauth key?", candidates, Settings())
        best = hits[0]
        best.score == best.scores.base + best.scores.additive + best.scores.canonical  # True
    """
    return [s.hit() for s in rank(query, candidates, settings, mention_doc_ids=mention_doc_ids,
                                  now=now, lexeme_stats=lexeme_stats)]


def rank(
    query: str,
    candidates: Sequence[Candidate],
    settings: Settings,
    *,
    mention_doc_ids: frozenset[int] = frozenset(),
    now: datetime | None = None,
    lexeme_stats: Mapping[str, Any] | None = None,
    cosine: bool = True,
) -> list[Scored]:
    """:func:`rerank` without building the hits: each candidate's score and terms, best
    first, its :class:`Hit` built on demand (:meth:`Scored.hit`). A search keeps a third of
    its candidates (top-k and runner-ups), so it builds only those hits. ``cosine=False``
    (the embedder does not read the query's script, ``embedding.reads``): the vector signal
    weighs nothing, and the sum stands on the words (the term is still in the breakdown)."""
    if not candidates:
        return []
    tokens = tokenize_query(query)
    if not settings.reranking_enabled or not tokens:
        scored = [_passthrough(c, settings, mention_doc_ids) for c in candidates]
    else:
        q = _Query(
            tokens=unique_folded(tokens),  # once here, not once per candidate
            tags=normalize_tags(query_tags(query)),
            asks_property=any(p.search(query) for p in _PREAMBLE_PATTERNS),
            now=_aware(now) if now is not None else datetime.now(UTC),
            mention_doc_ids=mention_doc_ids,
            idf=None,
            signals=_rows(settings, cosine),
        )
        # Tokenise every candidate once: the IDF pool and both keyword signals share it. With
        # the database's lexemes (BM25 mode) the body text needs no Python tokenising at all.
        lexical = settings.keyword_scoring == "bm25" and all(
            c.lexeme_tf is not None for c in candidates)
        # Chunks of one section share their heading path: its words once per distinct path.
        head_words = {h: frozenset(words(h)) for h in {c.heading_path for c in candidates}}
        heads = [head_words[c.heading_path] for c in candidates]
        texts = ([frozenset()] * len(candidates) if lexical
                 else [frozenset(words(c.text)) for c in candidates])
        if settings.keyword_idf:
            q = q._replace(idf=pool_idf(tokens, [t | h for t, h in zip(texts, heads, strict=True)]))
        heading = {h: score_folded(q.tokens, w, q.idf) for h, w in head_words.items()}
        vectors = _vector_signals(candidates, settings.normalize_scores)
        keywords = _bm25_keywords(tokens, candidates, settings, lexeme_stats)
        scored = [
            _score(c, v, q, settings, text_words, heading[c.heading_path], kw)
            for c, v, text_words, kw in zip(candidates, vectors, texts, keywords, strict=True)
        ]
    return sorted(scored, key=lambda h: -h.score)  # sorted() is stable


def _bm25_keywords(tokens: list[str], candidates: Sequence[Candidate], settings: Settings,
                   stats: Mapping[str, Any] | None) -> list[float | None]:
    """The BM25 keyword signal per candidate, or None per candidate for the coverage score.

    Stemmed term counts from the database plus global idf when the candidates carry them
    (``lexeme_tf``); otherwise word-level BM25 over the pool (framework documents).
    """
    if settings.keyword_scoring != "bm25":
        return [None] * len(candidates)
    if all(c.lexeme_tf is not None for c in candidates):
        tfs = [c.lexeme_tf or {} for c in candidates]
        lexemes = list((stats or {}).get("freqs") or {}) or sorted({k for t in tfs for k in t})
        idf = lexeme_idf(lexemes, stats, tfs)
        lengths = [c.lexeme_count or 0 for c in candidates]
        return list(lexeme_bm25(tfs, lengths, idf))
    return list(pool_bm25(tokens, [c.text for c in candidates]))


def _score(c: Candidate, vector: float, q: _Query, s: Settings, text_words: frozenset[str],
           heading: float, bm25: float | None) -> Scored:
    keyword = score_folded(q.tokens, text_words, q.idf) if bm25 is None else bm25
    e = Evidence(c, vector, keyword, heading, q.tags, q.asks_property, q.now,
                 q.mention_doc_ids, s)
    terms: dict[str, float] = {}
    base = additive = 0.0
    for name, in_base, weight, value_of in q.signals:  # in table order: reproducible sums
        value = value_of(e)
        terms[name] = value
        contribution = value if weight is None else weight * value
        if in_base:
            base += contribution
        else:
            additive += contribution
    canonical = _canonical(c.document, s, terms)
    terms["base"] = base
    terms["additive"] = additive
    terms["canonical"] = canonical
    terms["total"] = total = base + additive + canonical
    return Scored(total, c, terms)


def _passthrough(c: Candidate, s: Settings, mention_doc_ids: frozenset[int]) -> Scored:
    base = _finite(c.fused_score)
    mention = s.mention_boost_weight if c.document.id in mention_doc_ids else 0.0
    # no relevance signal: those terms stay 0.0, as ScoreBreakdown's defaults
    terms = dict.fromkeys(_SIGNAL_NAMES, 0.0)
    terms["mention_boost"] = mention
    canonical = _canonical(c.document, s, terms)
    total = base + mention + canonical
    terms.update(base=base, additive=mention, canonical=canonical, total=total)
    return Scored(total, c, terms)


_SIGNAL_NAMES = tuple(signal.name for signal in SIGNALS)


def _canonical(doc: DocumentRef, s: Settings, terms: dict[str, float]) -> float:
    """The canonical adjustment: each of its terms into ``terms``, their sum returned."""
    canonical = 0.0
    for name, sign, value_of in _ADJUSTMENTS:
        value = value_of(doc, s)
        terms[name] = value
        canonical += sign * value
    return canonical


_ADJUSTMENTS = tuple((a.name, a.sign, a.value) for a in ADJUSTMENTS)  # unpacked once


def _vector_signals(candidates: Sequence[Candidate], normalize: bool) -> list[float]:
    raw = [_finite(c.vector_similarity) for c in candidates]
    if not normalize:
        return raw
    lo, hi = min(raw), max(raw)
    if hi == lo:  # one candidate, or all equal: nothing to separate, every signal is the max
        return [1.0] * len(raw)
    span = hi - lo
    return [(v - lo) / span for v in raw]


def _finite(value: float | None) -> float:
    # A missing or non-finite score must not poison min-max or the sort order.
    return value if value is not None and math.isfinite(value) else 0.0
