"""The rejected-approach stage: which rejected documents the result shows, and where.

The scope's rejected-approach chunks come cached with their vectors (:class:`RejectedVectors`),
so scoring them costs no round trip. On a calibrated scope the decision is
:func:`~kb_retriever.ranking.rejected_evidence.correlate_rejected`'s evidence (decision 0009): correlated
documents are injected unless the query is refused, the others leave every list; with the
adaptive cutoff on, a rejected document also needs the cutoff's share of the best evidence of
the top, as a primary document does (decision 0016), and the question must be about it
(:func:`about_question`: it names the record, or the record's evidence clearly beats the other
documents'; decision 0009, amendment of 2026-12-05).
``KB_REJECTED_RULE=absolute``, or a scope never calibrated, keeps the absolute cosine rule
(``KB_REJECTED_MIN_SIMILARITY``); either way a rejected document that stands in ``primary`` or
``expanded`` is also injected, so it never shows as ordinary context without its warning.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache, cached_property
from typing import Any, Literal, NamedTuple

import numpy as np

from ..models import DocumentRef, Hit, Origin, ScoreBreakdown
from ..ranking.calibration import Calibration
from ..ranking.grounding import calibrated_evidence
from ..ranking.history import between, names_document
from ..ranking.placement import place_rejected
from ..ranking.rejected_evidence import EDGE_SEEDS, RejectedEvidence, correlate_rejected
from ..ranking.rerank import Scored
from ..ranking.text import acronyms, tokenize_query
from ..settings import Settings
from ..store.rows import document_from_row, vector_array
from ..vocabulary import ACCEPTED, PROJECT_INDEX, is_rejected_approach

__all__ = ["QueryCosines", "RejectedChannel", "RejectedChunk", "RejectedVectors",
           "about_question", "decide_rejected", "place_by_channel", "query_cosines",
           "rejected_hit", "unit_vectors", "yield_to_accepted"]


class RejectedChunk(NamedTuple):
    """A rejected-approach chunk as the ``⚠`` block shows it (its embedding is in
    :attr:`RejectedVectors.unit`)."""

    chunk_id: int
    text: str
    heading_path: str
    chunk_order: int
    chunk_uid: str | None
    document: DocumentRef


@dataclass(frozen=True)
class RejectedVectors:
    """The scope's rejected-approach chunks, parsed once per cache period."""

    ids: list[tuple[int, int]]  # (doc, chunk) per row of ``unit``
    unit: np.ndarray  # the embeddings scaled to unit length; zero vectors stay 0
    chunks: dict[int, RejectedChunk]  # chunk id -> the chunk
    # doc -> the (project, slug) pairs it has an edge with, either way
    links: dict[int, set[tuple[str, str]]]

    @cached_property
    def keys(self) -> tuple[np.ndarray, np.ndarray]:
        """The document and the chunk id of each row of ``unit``, as arrays."""
        pairs = np.asarray(self.ids, dtype=np.int64).reshape(-1, 2)
        return pairs[:, 0], pairs[:, 1]

    @cached_property
    def rows(self) -> dict[int, int]:
        """Chunk id -> its row of ``unit``."""
        return {chunk: i for i, (_, chunk) in enumerate(self.ids)}

    @property
    def documents(self) -> list[int]:
        """The rejected documents' ids, each once."""
        return list(dict.fromkeys(doc for doc, _ in self.ids))

    def only(self, chunks: Collection[int]) -> RejectedVectors:
        """These chunks alone (those a search's filters pass), and their documents'."""
        keep = [i for i, (_, chunk) in enumerate(self.ids) if chunk in chunks]
        if len(keep) == len(self.ids):
            return self
        docs = {self.ids[i][0] for i in keep}
        return RejectedVectors([self.ids[i] for i in keep], self.unit[keep],
                               {c: ch for c, ch in self.chunks.items() if c in chunks},
                               {d: links for d, links in self.links.items() if d in docs})


def unit_vectors(rows: Sequence[Mapping[str, Any]]) -> RejectedVectors:
    """Parse the rows of :func:`~kb_retriever.store.catalog_sql.rejected_chunks_sql`."""
    if not rows:
        return RejectedVectors([], np.zeros((0, 0)), {}, {})
    vecs = np.asarray([vector_array(r["embedding"], np.float64) for r in rows])
    norms = np.linalg.norm(vecs, axis=1, keepdims=True)
    unit = np.divide(vecs, norms, out=np.zeros_like(vecs), where=norms > 0)
    links: dict[int, set[tuple[str, str]]] = {}
    for r in rows:
        links.setdefault(int(r["doc_pk"]), set()).update(
            (r["project_key"], slug) for slug in r.get("linked_slugs") or ())
    chunks = {int(r["chunk_id"]): RejectedChunk(
        int(r["chunk_id"]), r["text"], r["heading_path"] or "", int(r["chunk_order"]),
        r.get("chunk_uid"), document_from_row(r)) for r in rows}
    return RejectedVectors([(int(r["doc_pk"]), int(r["chunk_id"])) for r in rows], unit,
                           chunks, links)


class QueryCosines(NamedTuple):
    """One query against the scope's rejected chunks, computed once per search."""

    sims: np.ndarray  # the cosine of each row of ``RejectedVectors.unit``
    rows: Mapping[int, int]  # chunk id -> its row (``RejectedVectors.rows``)
    per_doc: list[tuple[int, int, float]]  # (doc, chunk, cosine) of each document's best chunk,
    # best first (ties: lower chunk id)

    def of(self, chunk_id: int) -> float | None:
        """The cosine of chunk ``chunk_id``, None for a chunk that is no rejected one."""
        row = self.rows.get(chunk_id)
        return None if row is None else float(self.sims[row])


def query_cosines(vectors: RejectedVectors, qvec: Any) -> QueryCosines:
    """The query's cosine with every rejected chunk, and each document's best chunk: in numpy,
    whatever the number of chunks (a million-chunk corpus's 1,050 took 1.9 ms a search, under
    the profiler, by a Python loop over them).

    >>> vectors = RejectedVectors([(7, 1), (7, 2), (8, 3)],
    ...                           np.array([[1.0, 0.0], [0.6, 0.8], [0.0, 1.0]]), {}, {})
    >>> [(d, c, round(s, 6)) for d, c, s in query_cosines(vectors, [0.6, 0.8]).per_doc]
    [(7, 2, 1.0), (8, 3, 0.8)]
    >>> round(query_cosines(vectors, [0.6, 0.8]).of(1), 6), query_cosines(vectors, [1, 0]).of(9)
    (0.6, None)
    """
    if not vectors.ids:
        return QueryCosines(np.zeros(0), {}, [])
    q = np.asarray(qvec, dtype=np.float64)
    qn = float(np.linalg.norm(q))
    sims = vectors.unit @ (q / qn) if qn > 0 else np.zeros(len(vectors.ids))
    docs, chunks = vectors.keys
    # by document, best first, lower chunk id on a tie: the first row of each document is its best
    order = np.lexsort((chunks, -sims, docs))
    best = order[np.r_[True, docs[order][1:] != docs[order][:-1]]]
    ranked = best[np.lexsort((chunks[best], -sims[best]))]
    return QueryCosines(sims, vectors.rows, list(zip(
        docs[ranked].tolist(), chunks[ranked].tolist(), sims[ranked].tolist(), strict=True)))


def rejected_hit(chunk: RejectedChunk, sim: float) -> Hit:
    return Hit(
        chunk_id=chunk.chunk_id, text=chunk.text, heading_path=chunk.heading_path, score=sim,
        scores=ScoreBreakdown(total=sim, raw_similarity=sim), origin=Origin.REJECTED,
        document=chunk.document, chunk_order=chunk.chunk_order, similarity=sim,
        chunk_uid=chunk.chunk_uid,
    )


@dataclass(frozen=True)
class RejectedChannel:
    """The channel's decision for one query: its ``rule`` (``"absolute"``: the cosine
    threshold), the query's cosines with the rejected chunks, and on ``"calibrated"`` the
    evidence per rejected document (best first), the ids that correlate, and ``leads``: a
    record with the evidence that ranks first, though the question is not about it."""

    rule: Literal["calibrated", "absolute"]
    cosines: QueryCosines = QueryCosines(np.zeros(0), {}, [])
    evidence: tuple[RejectedEvidence, ...] = ()
    correlated: frozenset[int] = field(default_factory=frozenset)
    leads: int | None = None

    def warns(self, settings: Settings) -> frozenset[int]:
        """The rejected documents the ``⚠`` block shows on their own evidence: the correlated
        ones, or on the absolute rule those whose best chunk reaches
        ``rejected_min_similarity``."""
        if self.rule == "calibrated":
            return self.correlated
        return frozenset(doc for doc, _, sim in self.cosines.per_doc
                         if sim >= settings.rejected_min_similarity)

    def keeps(self, doc: DocumentRef) -> bool:
        """Whether ``doc`` may stand in primary, runner-up or expanded."""
        return (self.rule == "absolute" or not is_rejected_approach(doc)
                or doc.id in self.correlated)

    def inject(self, vectors: RejectedVectors, shown: Sequence[Hit], *, refused: bool,
               settings: Settings) -> list[Hit]:
        """The ``⚠`` block: every rejected document among ``shown`` (primary and expanded),
        then the best others up to ``rejected_injection_max_docs``. Nothing when a calibrated
        channel's query is refused."""
        if not vectors.ids:
            return []
        per_doc = self.cosines.per_doc
        best = {doc: (chunk, sim) for doc, chunk, sim in per_doc}
        reached = [h.document.id for h in shown if is_rejected_approach(h.document)]
        # a document the result shows is warned about with the chunk it shows
        for h in reversed(shown):
            sim = self.cosines.of(h.chunk_id) if is_rejected_approach(h.document) else None
            if sim is not None:
                best[h.document.id] = (h.chunk_id, sim)
        if self.rule == "absolute":
            ranked = [doc for doc, _, sim in per_doc
                      if sim >= settings.rejected_min_similarity]
        elif refused:
            return []
        else:
            ranked = [e.doc_id for e in self.evidence if e.doc_id in self.correlated]
        # every rejected document the result shows, then the best others up to the cap
        picked = [d for d in dict.fromkeys(reached) if d in best]
        for doc in ranked:
            if len(picked) >= settings.rejected_injection_max_docs:
                break
            if doc not in picked:
                picked.append(doc)
        order = {d: i for i, d in enumerate(ranked)}
        picked.sort(key=lambda d: order.get(d, len(order)))  # best evidence first
        return [rejected_hit(vectors.chunks[best[d][0]], best[d][1]) for d in picked]


def decide_rejected(vectors: RejectedVectors, qvec: Any, ranked: Sequence[Scored],
                    calibration: Calibration, settings: Settings, *, top: int = 0,
                    ratio: float = 0.0, query: str = "",
                    shared: Callable[[], Collection[str]] = frozenset) -> RejectedChannel:
    """Correlate the scope's rejected documents with the query (module docstring).

    A rejected document correlates when its evidence reaches ``rejected_min_evidence`` and,
    with ``ratio`` above 0 (the adaptive cutoff's), when its cosine margin and keyword
    signal reach ``ratio`` times the best of the first ``top`` ranked chunks' (the ⚠ block
    holds what bears on the question as much as the context does: decision 0016); and when
    the question is about it (:func:`about_question`)."""
    cosines = query_cosines(vectors, qvec)
    if settings.rejected_rule == "absolute" or not calibration.calibrated:
        return RejectedChannel("absolute", cosines)
    if not vectors.ids:
        return RejectedChannel("calibrated", cosines)
    keywords: dict[int, float] = {}
    seeds: list[tuple[str, str]] = []
    for s in ranked:
        doc = s.document
        if is_rejected_approach(doc):
            keywords[doc.id] = max(keywords.get(doc.id, 0.0), s.terms["keyword"])
        elif doc.slug and len(seeds) < EDGE_SEEDS and (doc.project_key, doc.slug) not in seeds:
            seeds.append((doc.project_key, doc.slug))
    evidence = correlate_rejected(
        cosines.per_doc, keywords=keywords, links=vectors.links, seed_slugs=seeds,
        calibration=calibration, keyword_weight=settings.evidence_lexical_weight,
        edge_bonus=settings.rejected_edge_bonus)
    head = [(s, calibrated_evidence(s.hit(), settings, calibration)) for s in ranked[:top]]
    floor = ratio * max((e for _, e in head), default=0.0)
    evident = [e for e in evidence
               if e.score >= settings.rejected_min_evidence and e.grounded >= floor]
    if not evident:
        return RejectedChannel("calibrated", cosines, evidence=tuple(evidence))
    about = about_question(query, head, vectors, settings, shared)
    correlated = frozenset(e.doc_id for e in evident if about(e))
    # a record first in the ranking marks its decision's topic, though the question is not
    # about it: the decision takes its place ("how do families pay the fees today?")
    first = ranked[0].document.id if ranked else None
    leads = first if first in {e.doc_id for e in evident} - correlated else None
    return RejectedChannel("calibrated", cosines, evidence=tuple(evidence),
                           correlated=correlated, leads=leads)


def about_question(query: str, head: Sequence[tuple[Scored, float]], vectors: RejectedVectors,
                   settings: Settings, shared: Callable[[], Collection[str]]
                   ) -> Callable[[RejectedEvidence], bool]:
    """Whether the question is about a rejected record: it names the record
    (:func:`~kb_retriever.ranking.history.names_document`, against the titles of the other
    documents in ``head`` by a word not in ``shared()``, and of four letters or more unless
    written in capitals), or the record's evidence (cosine margin and keyword signal) is at
    least ``rejected_focus_ratio`` times the best evidence of a chunk in ``head`` that is no
    rejected record (``head``: the top's chunks with their evidence; when all of them are
    rejected records, every record is about it). "Should we run our own ELK stack?" and
    "couldn't we send the invoices to an LLM?" are about the rejected record; "how do riders
    pay now?" is about the accepted decision, which a rejected alternative of its topic matches
    nearly as well (decision 0009, amendment of 2026-12-05). ``rejected_focus_ratio`` 0 or an
    empty ``head``: every record is. ``shared`` is read only when a name decides."""
    if settings.rejected_focus_ratio <= 0 or not head:
        return lambda e: True
    best_other = max((e for s, e in head if not is_rejected_approach(s.document)), default=0.0)
    titles = {s.document.id: s.document.title for s, _ in head}
    # a word of three letters or fewer names a record only in capitals (ELK, EKS, MES): "our",
    # "por" and "do" are function words the query's stop words (Italian and English) miss;
    # scripts without case (Chinese, Korean) keep their short words
    caps = acronyms(query)
    short = {t for t in tokenize_query(query) if len(t) <= 3 and t != t.upper() and t not in caps}
    common = cache(lambda: frozenset(shared()) | short)

    def about(e: RejectedEvidence) -> bool:
        if e.grounded >= settings.rejected_focus_ratio * best_other:
            return True
        doc = vectors.chunks[e.chunk_id].document
        others = [t for d, t in titles.items() if d != doc.id]
        return names_document(query, doc.title, others, common())

    return about


def place_by_channel(query: str, ranked: Sequence[Scored], channel: RejectedChannel,
                     vectors: RejectedVectors, settings: Settings, *, top: int,
                     shared: Callable[[], Collection[str]]
                     ) -> tuple[list[Scored], list[Scored], set[int]]:
    """``ranked`` placed by the channel's decision: a rejected record that does not correlate
    leaves (it is no context either); one the ⚠ block warns about stands there, not in
    primary (``placement.place_rejected``); an accepted decision linked to a rejected record
    ranks above it (:func:`yield_to_accepted`); and ``channel.leads``, first in ``ranked``
    though the question is not about it, lets its decision take its place, then leaves (it
    takes no part in the placement of the others). Returns ``(ranked, the warned records'
    chunks that left primary, the chunk ids a yield moved)``."""
    warned = channel.warns(settings)
    lead = [s for s in ranked[:1] if s.document.id == channel.leads]
    placed, moved = place_rejected(query, [s for s in ranked if channel.keeps(s.document)],
                                   warned=lambda d: d.id in warned, top=top, shared=shared)
    out, yielded = yield_to_accepted([*lead, *placed], vectors,
                                     ratio=settings.rejected_yield_ratio)
    return [s for s in out if channel.keeps(s.document)], moved, yielded


def yield_to_accepted(ranked: Sequence[Scored], vectors: RejectedVectors, *,
                      ratio: float) -> tuple[list[Scored], set[int]]:
    """``ranked`` with each accepted canonical document moved just above a rejected approach it
    is linked with (an edge either way) when its score is at least ``ratio`` times the rejected
    one's, and the chunk ids moved: for "how long does the access token last?" and for "can we
    use 90-day tokens?" alike, the accepted decision answers and the rejected record beside it
    is the warning. A project index, which links to every record, is no such decision and
    stays put (decision 0020). ``ratio`` 0 (the default, issue 27) moves every linked accepted
    decision the candidates hold; a higher ratio lets a rejected record with clearly stronger
    evidence keep its place."""
    out = list(ranked)
    done: set[int] = set()
    moved_ids: set[int] = set()
    i = 0
    while i < len(out):
        r = out[i]
        rdoc = r.document
        if not is_rejected_approach(rdoc) or rdoc.id in done:
            i += 1
            continue
        done.add(rdoc.id)
        linked = vectors.links.get(rdoc.id, set())
        seen: set[int] = set()
        moved = False
        for j in range(i + 1, len(out)):
            d = out[j].document
            if d.id in seen:
                continue
            seen.add(d.id)
            if (d.is_canonical and d.canonical_status == ACCEPTED and not is_rejected_approach(d)
                    and d.canonical_type != PROJECT_INDEX  # it links to everything: no answer
                    and d.slug and (d.project_key, d.slug) in linked
                    and out[j].score >= ratio * r.score):
                out.insert(i, between(out.pop(j), out[i - 1] if i > 0 else None, out[i]))
                moved_ids.add(out[i].candidate.chunk_id)
                moved = True
                break
        i += 2 if moved else 1
    return out, moved_ids
