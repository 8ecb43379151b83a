"""Placement by role (issue 27; decision 0014): what each kind of record may do in the context.

The reranker orders chunks by evidence and trust; these rules then give each role its place,
so that the prompt spends its tokens on the answer:

* :func:`place_rejected`: a rejected approach the result warns about stands once, in the
  ``⚠`` block, and takes no primary slot for a question that is not about it; for a question
  about it (it ranks first, or the question names it), one chunk at most.
* :func:`successors_first`: a superseded record never ranks above its own successor (the
  history rule, :mod:`.history`, then puts it right after the successor when the question
  asks for it).
* :func:`cut_weak`: ``limit`` is the most the primary context holds; hits whose evidence is
  far below the best one's go to the runner-ups instead of padding the prompt (a document the
  answer's document links to needs less: decision 0016; any other needs some of the
  question's words too: decision 0020), and so does a project index that is not the first hit.

Pure functions of ranked items (:class:`~kb_retriever.ranking.rerank.Scored` or
:class:`~kb_retriever.models.Hit`); they return new lists and never drop a candidate: what
leaves the context is returned to the caller, which keeps it as a runner-up.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from functools import cache
from typing import TypeVar

from ..models import DocumentRef, Hit
from ..vocabulary import PROJECT_INDEX, is_rejected_approach
from .diversify import Ranked
from .history import Key, between, first_index, names_document

__all__ = ["cut_weak", "place_rejected", "successors_first"]

R = TypeVar("R", bound=Ranked)


def place_rejected(query: str, ranked: Sequence[R], *, warned: Callable[[DocumentRef], bool],
                   top: int, shared: Callable[[], Collection[str]] = frozenset
                   ) -> tuple[list[R], list[R]]:
    """``(ranked, moved)``: each rejected approach that ``warned`` says the ``⚠`` block shows
    leaves the ranked list unless the question is about it, when only its best chunk stays.

    The question is about a rejected record when its best chunk ranks first, or when the
    question names it (:func:`names_document`, against the titles of the other documents in
    the first ``top``, by a word not in ``shared()``: those most candidates hold, read only when
    a warned record's name is in question). ``moved`` holds the best chunk of each rejected
    record that left, so that the caller warns about it with that chunk, then the other chunks
    that left.
    """
    items = list(ranked)
    head_titles = {i.document.id: i.document.title for i in items[:top]}
    common = cache(shared)
    out: list[R] = []
    moved: list[R] = []
    extra: list[R] = []
    seen: set[int] = set()
    for pos, item in enumerate(items):
        doc = item.document
        if not is_rejected_approach(doc) or not warned(doc):
            out.append(item)
            continue
        if doc.id in seen:
            extra.append(item)  # one chunk at most
            continue
        seen.add(doc.id)
        others = [t for d, t in head_titles.items() if d != doc.id]
        if pos == 0 or names_document(query, doc.title, others, common()):
            out.append(item)
        else:
            moved.append(item)
    return out, moved + extra


def successors_first(ranked: Sequence[R], successors: Mapping[Key, Sequence[Key]]
                     ) -> list[R]:
    """``ranked`` with the best chunk of each successor moved just above its predecessor
    wherever the predecessor ranked higher. ``successors``: (project, successor slug) -> its
    predecessors' keys (``store.rows.successor_map``)."""
    out = list(ranked)
    for s_key, preds in successors.items():
        for p_key in preds:
            p_pos = first_index(out, p_key)
            s_pos = first_index(out, s_key)
            if p_pos is None or s_pos is None or s_pos < p_pos:
                continue
            item = out.pop(s_pos)
            out.insert(p_pos, between(item, out[p_pos - 1] if p_pos > 0 else None, out[p_pos]))
    return out


def cut_weak(hits: Sequence[Hit], evidence: Callable[[Hit], float], *, ratio: float,
             keep: Collection[int] = (), linked: Collection[int] = (),
             linked_ratio: float | None = None, lexical_ratio: float = 0.0,
             named: Collection[int] = ()) -> tuple[list[Hit], list[Hit]]:
    """``(kept, cut)`` by document: a document stays when its best hit's ``evidence``
    reaches ``ratio`` times the best hit's, or ``linked_ratio`` times it for the documents in
    ``linked`` (document ids: those the answer's document links to), with all its hits (the
    prompt is judged by the documents it carries); order is kept. A document not in
    ``linked`` also needs ``lexical_ratio`` times the best keyword signal (``scores.keyword``:
    the question's words in its text) when a document has one (decision 0020). A document in
    ``named`` (a superseded record that history promotion moved beside its successor) needs
    ``linked_ratio`` of the evidence, as its successor links to it, and the words as any
    other. The first hit's document and the hits whose chunk ids are in ``keep`` always
    stay; a project index (navigation, not evidence) stays only so, and the first document
    that is not one stands first in its place. Nothing is cut when ``ratio`` is 0 or the best
    evidence is not positive (a refused query: the gate decides).

    >>> from types import SimpleNamespace as H
    >>> def hit(chunk, doc, e):
    ...     return H(chunk_id=chunk, document=H(id=doc, canonical_type=None), e=e)
    >>> hits = [hit(1, 7, 0.9), hit(2, 8, 0.3), hit(3, 7, 0.1), hit(4, 9, 0.6)]
    >>> kept, cut = cut_weak(hits, lambda h: h.e, ratio=0.5)
    >>> [h.chunk_id for h in kept], [h.chunk_id for h in cut]
    ([1, 3, 4], [2])
    >>> [h.chunk_id for h in cut_weak(hits, lambda h: h.e, ratio=0.5, linked={8},
    ...                               linked_ratio=0.3)[0]]
    [1, 2, 3, 4]
    """
    if not hits or ratio <= 0:
        return list(hits), []
    best_of = _best_by_document(hits, evidence)
    # the first document anchors the context and the best evidence is the measure; a project
    # index lists what exists and is navigation, not evidence: it counts only alone
    evident = [h for h in hits if h.document.canonical_type != PROJECT_INDEX] or list(hits)
    best = max(best_of[h.document.id] for h in evident)
    if best <= 0:
        return list(hits), []
    first = evident[0].document.id
    low = ratio if linked_ratio is None else min(ratio, linked_ratio)
    words = _best_by_document(hits, lambda h: h.scores.keyword) if lexical_ratio > 0 else {}
    enough_words = lexical_ratio * max(words[h.document.id] for h in evident) if words else 0.0
    kept: list[Hit] = []
    cut: list[Hit] = []
    for h in hits:
        doc = h.document.id
        share = low if doc in linked or doc in named else ratio
        stays = doc == first or h.chunk_id in keep or (
            h.document.canonical_type != PROJECT_INDEX and best_of[doc] >= share * best
            and (doc in linked or not words or words[doc] >= enough_words))
        (kept if stays else cut).append(h)
    return kept, cut


def _best_by_document(hits: Sequence[Hit], value: Callable[[Hit], float]) -> dict[int, float]:
    """Each document's best ``value`` among ``hits`` (its evidence, its keyword signal)."""
    best: dict[int, float] = {}
    for h in hits:
        v = value(h)
        best[h.document.id] = max(best.get(h.document.id, v), v)
    return best
