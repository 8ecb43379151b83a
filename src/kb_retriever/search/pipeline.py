"""The search pipeline as a sans-I/O plan (``search.plan``).

:func:`search_plan` is a generator that *yields* what it needs (an SQL fetch or a query
embedding) and receives the answer, so the sync and async entry points share every line of
logic and differ only in how they perform I/O (``plan.run_plan`` / ``plan.arun_plan``).

synonyms → embed → scope catalog → candidates (two independent SQL legs, HNSW and FTS, fused
by weighted RRF) → rank → history → rejected → cap → graph → cutoff → refusal → meta. Each
stage is a function of its own (a sub-generator when it reads); :func:`search_plan` only calls
them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Generator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cache
from itertools import chain, islice
from typing import Any, NamedTuple

from ..models import Candidate, Hit, Origin, SearchResult
from ..models.legs import LegResult, Neighbour
from ..models.results import CONTEXT_CUTOFF
from ..ranking import diversify, expand_query_text, expansion_phrases, should_refuse
from ..ranking.bm25 import CorpusLexemes
from ..ranking.calibration import Calibration
from ..ranking.fusion import fuse_legs
from ..ranking.grounding import calibrated_evidence, evidence_score, uses_calibration
from ..ranking.history import key_of, promote_predecessors, shared_words
from ..ranking.placement import cut_weak, successors_first
from ..ranking.rerank import Scored, rank
from ..ranking.text import prefixed_query, segment_cjk, tokenize_query, without_stop_words
from ..settings import Settings
from ..store import reads
from ..store import sql as q
from ..store.fulltext import LexemeBudget
from .graph import Expansion, Floors, expand_graph, graph_seed
from .meta import RetrievalStats, SearchMeta, SearchStrategy, Stopwatch
from .plan import Embed, Fetch, Parallel, Plan, SearchRequest, leg_weights, text_leg
from .rejected_channel import (
    RejectedChannel,
    RejectedVectors,
    decide_rejected,
    place_by_channel,
    unit_vectors,
)

__all__ = ["CUT", "candidates", "context_evidence", "first_hop", "leg_shape", "neighbour_floor",
           "runner_ups", "scope_catalog", "search_plan", "synonym_groups"]

#: How many chunks of a superseded record a history question brings next to its successor.
HISTORY_CHUNKS = 2
#: ``Hit.metadata`` key of a runner-up that the adaptive cutoff moved out of the top ``limit``.
CUT = CONTEXT_CUTOFF
#: The longest the trust channels' reads (supersession edges, rejected-approach chunks) and the
#: scope's full-text configurations are reused, whatever ``KB_CATALOG_CACHE_TTL_SECONDS`` says:
#: another process's (or knowledge base's) writes change which record outranks which, what the
#: ⚠ block warns about (a deleted rejected record's text included) and by which languages the
#: query is stemmed within this long. Each is one small read per scope every few seconds:
#: nothing under load.
TRUST_TTL_S = 5.0


def leg_shape(req: SearchRequest, settings: Settings, corpus: CorpusLexemes | None = None,
              fts_configs: Sequence[str] = ()) -> q.LegShape:
    """The legs' literal scope and sizes: ``limit x candidate_multiplier`` candidates per leg
    when reranking (just ``limit`` without it), the similarity threshold, the match cap, the
    lexeme statistics (``corpus``) by which the full-text leg chooses its OR lexemes, and the
    rerank pool (``KB_RERANK_POOL_FACTOR`` x the candidates per leg, when reranking) with the
    fusion's weights, and whether the scores will be the fused ones (a question without a word
    to rerank by: :func:`~kb_retriever.ranking.rerank.rank`)."""
    kc = req.limit * settings.candidate_multiplier if settings.reranking_enabled else req.limit
    estimates = corpus.estimates if corpus is not None else None
    return q.LegShape(req.scope, kc=kc, min_sim=req.legs.floor(settings.default_min_similarity),
                      fts_cap=settings.fts_match_cap,
                      lexemes=LexemeBudget(*estimates) if estimates else None,
                      fts_configs=tuple(fts_configs) if len(fts_configs) > 1 else (),
                      pool=math.ceil(settings.rerank_pool_factor * kc)
                      if settings.reranking_enabled else 0,
                      weights=leg_weights(req, settings),
                      rrf_k=settings.rrf_k, fused_scores=not tokenize_query(req.query))


def search_plan(req: SearchRequest, settings: Settings) -> Plan:
    """The whole search as a generator of I/O requests (see module docstring)."""
    leg_weights(req, settings)  # (before any read: both legs weighed 0 is bad input)
    watch = Stopwatch()
    groups = yield from synonym_groups(req, settings, watch)
    with watch.lap("embed"):
        qvec = req.query_embedding
        if qvec is None:
            qvec = yield Embed(expand_query_text(req.query, groups) if groups else req.query)
    with watch.lap("catalog"):  # read again only after its TTL: rarely a search's own cost
        catalog = yield from scope_catalog(req, settings)
    with watch.lap("candidates"):
        found = yield from candidates(req, settings, catalog, groups, qvec)
    with watch.lap("rerank"):
        ranked = rank(req.query, found.candidates, settings, mention_doc_ids=found.mentions,
                      now=req.now, lexeme_stats=found.lexeme_stats, cosine=req.embedder_reads)
        # A superseded record never above its successor; for a history question (the query
        # names the predecessor, or is closer to it) its best chunks go right after the successor.
        edges = yield reads.supersessions(req.scope, catalog.trust_ttl)
        ranked = successors_first(ranked, edges)
        ranked, promoted = promote_predecessors(req.query, ranked, edges, top=req.limit,
                                                chunks=HISTORY_CHUNKS)
    placed = Placed(promoted={s.document.id for s in ranked if key_of(s) in promoted})
    ratio = req.legs.cutoff(settings.context_cutoff)  # the adaptive cutoff's share of the best
    channel = pool = None
    if settings.rejected_injection_enabled:
        with watch.lap("rejected"):
            ranked, channel, pool = yield from rejected_stage(req, settings, catalog, ranked,
                                                              qvec, ratio, placed)
    kept, rest = diversify(ranked, req.limit, settings.max_chunks_per_doc)
    shown = [s.hit() for s in kept]  # hits for what is kept, not every candidate: the cutoff's input
    # what the question @mentions, or placement put there on purpose, is never cut; a
    # predecessor moved beside its successor needs some evidence (placement.cut_weak's named)
    mentioned = found.mentions | req.mention_doc_ids  # (filter mode boosts none, keeps all)
    keep = placed.yielded | {h.chunk_id for h in shown if h.document.id in mentioned}
    evidence = context_evidence(shown, settings, catalog.calibration)
    linked_ratio = min(ratio, settings.context_cutoff_linked)  # for what the answer links to

    def cutoff(linked: Collection[int] = ()) -> tuple[list[Hit], list[Hit]]:
        return cut_weak(shown, evidence, ratio=ratio, keep=keep, linked=linked,
                        linked_ratio=linked_ratio, lexical_ratio=settings.context_cutoff_lexical,
                        named=placed.promoted)

    # the gate judges what was found; the cutoff only trims what the prompt carries
    refuse = should_refuse(shown, settings, catalog.calibration)
    expansion = Expansion([], frozenset())
    if settings.graph_expansion_enabled and not refuse:  # no related context for a non-answer
        with watch.lap("graph"):
            # the seed is the answer's document, unless the cutoff drops it on its own
            expansion = yield from expand_graph(
                shown, graph_seed(cutoff()[0]), req, settings, qvec,
                staying=lambda linked: {h.document.id for h in cutoff(linked)[0]},
                floors=Floors(neighbour_floor(shown, ratio, settings, catalog.calibration),
                              neighbour_floor(shown, linked_ratio, settings, catalog.calibration)),
                read_ahead=found.seed_neighbours)
    top, cut = cutoff(expansion.linked)
    expanded = expansion.hits
    if channel is not None:
        expanded = [h for h in expanded if channel.keeps(h.document)]
    rejected: list[Hit] = []
    if channel is not None and pool is not None:
        rejected = channel.inject(pool, [*top, *expanded,
                                         *(s.hit(Origin.REJECTED) for s in placed.warned)],
                                  refused=refuse, settings=settings)
        # a rejected record the ⚠ block warns about is not related context as well
        warned_ids = {h.document.id for h in rejected}
        expanded = [h for h in expanded if h.document.id not in warned_ids]
    # a chunk used as related context, or a record the ⚠ block shows, is no runner-up as well
    warning = {h.document.id for h in rejected}
    left = [s for s in placed.left if s.document.id not in warning]
    runner_up = runner_ups(cut, rest, settings.runner_up_limit,
                           {h.chunk_id for h in (*expanded, *rejected)}, left=left)
    meta = search_meta(req, settings, watch, found=found, top=top, counts=(
        len(expanded), len(rejected), len(runner_up)), refuse=refuse, catalog=catalog,
        promoted=promoted, channel=channel, cut=len(cut))
    return SearchResult(primary=tuple(top), expanded=tuple(expanded), rejected=tuple(rejected),
                        runner_up=runner_up, meta=meta, query=req.query)


def rejected_stage(req: SearchRequest, settings: Settings, catalog: ScopeCatalog,
                   ranked: list[Scored], qvec: Any, ratio: float, placed: Placed
                   ) -> Generator[Any, Any, tuple[list[Scored], RejectedChannel,
                                                  RejectedVectors]]:
    """The rejected channel: the scope's rejected records (those the filters let through, as
    graph expansion does), its decision, and ``ranked`` placed by it; ``placed`` takes the
    records that left primary for the ⚠ block and the chunks a yield moved."""
    pool = yield reads.rejected_chunks(req.scope, catalog.trust_ttl, unit_vectors)
    if pool.ids and req.filters.narrows_documents():
        pool = pool.only((yield reads.rejected_passing(req.scope, req.filters, pool.documents)))
    common = common_words(req.query, ranked)
    channel = decide_rejected(pool, qvec, ranked, catalog.calibration, settings,
                              top=req.limit, ratio=ratio, query=req.query, shared=common)
    # what would have stood in primary, where a record the ⚠ block warns about left
    head = {s.document.id for s in ranked[:req.limit]}
    before = ranked
    ranked, warned, placed.yielded = place_by_channel(
        req.query, ranked, channel, pool, settings, top=req.limit, shared=common)
    staying = {s.candidate.chunk_id for s in ranked}
    placed.left = [s for s in before if s.candidate.chunk_id not in staying]
    # the ⚠ block shows those past its cap (decision 0009), not the pool's others
    placed.warned = [s for s in warned if s.document.id in head]
    return ranked, channel, pool


def common_words(query: str, ranked: Sequence[Scored]) -> Callable[[], frozenset[str]]:
    """The question's words that most candidate documents hold (``history.shared_words``),
    read once, when a rule first asks: they name no document."""
    return cache(lambda: shared_words(query, candidate_texts(ranked)))


def candidate_texts(ranked: Sequence[Scored]) -> dict[int, list[str]]:
    """Each document's candidate texts, by document id (what ``shared_words`` reads)."""
    texts: dict[int, list[str]] = {}
    for s in ranked:
        texts.setdefault(s.document.id, []).append(s.candidate.text)
    return texts


def runner_ups(cut: Sequence[Hit], rest: Sequence[Scored], limit: int,
               related: Collection[int] = (), *, left: Sequence[Scored] = ()) -> tuple[Hit, ...]:
    """The runner-ups: every hit the adaptive cutoff moved out of the top (``top_k`` gives
    them back to a contract that promises k), then the pool's first ``limit`` others that are
    not ``related`` context (chunk ids), as hits (built only for those shown: most of the pool
    is never one); the last of them the rejected records' chunks the channel took out of the
    ranking (``left``), of origin ``rejected``."""
    moved = (replace(h, origin=Origin.RUNNER_UP, metadata={**h.metadata, CUT: True})
             for h in cut)
    others = chain((s.hit(Origin.RUNNER_UP) for s in rest), (s.hit(Origin.REJECTED) for s in left))
    return (*moved, *islice((h for h in others if h.chunk_id not in related), limit))


@dataclass
class Placed:
    """What placement by role did (what the cutoff weighs apart, and the rejected records that
    left primary for the ⚠ block)."""

    promoted: set[int] = field(default_factory=set)  # documents: a history question's predecessor
    yielded: set[int] = field(default_factory=set)  # chunks: accepted decisions above their rejected
    warned: list[Scored] = field(default_factory=list)
    # the rejected records' chunks the channel took out of the ranking: the last runner-ups
    # (a vector store that promises k, filtered to rejected records, still gets k)
    left: list[Scored] = field(default_factory=list)


def context_evidence(shown: Sequence[Hit], settings: Settings,
                     calibration: Calibration) -> Callable[[Hit], float]:
    """The evidence by which the adaptive cutoff compares the ``shown`` hits: against the
    scope's null when calibrated (as the refusal gate), else the score on raw evidence;
    computed once per hit (the cutoff runs up to three times per search)."""
    if uses_calibration(settings, calibration):
        by_chunk = {h.chunk_id: calibrated_evidence(h, settings, calibration) for h in shown}
    else:
        by_chunk = {h.chunk_id: evidence_score(h, settings) for h in shown}
    return lambda h: by_chunk[h.chunk_id]


def neighbour_floor(top: Sequence[Hit], ratio: float, settings: Settings,
                    calibration: Calibration) -> float | None:
    """The similarity a graph neighbour needs without a strong edge: ``ratio`` (the share a
    primary document needs, decision 0018) of the best primary similarity's margin over the
    null (of the similarity itself, uncalibrated); None (no floor) when the cutoff is off.
    The cutoff's lower share for what the answer links to is for documents that retrieval
    found as well; a neighbour that a generic link alone brings has one claim, not two."""
    sims = [h.similarity for h in top if h.similarity is not None]
    if not sims or ratio <= 0:
        return None
    best = max(sims)
    if uses_calibration(settings, calibration):
        ceiling = calibration.ceiling
        return ceiling + ratio * (best - ceiling)
    return ratio * best


def synonym_groups(req: SearchRequest, settings: Settings,
                   watch: Stopwatch) -> Generator[Fetch, Any, list[list[str]]]:
    """The scope's synonym groups (term first), or none when synonyms are off."""
    if not settings.synonyms_enabled or not req.query:
        return []
    with watch.lap("synonyms"):
        groups: list[list[str]] = yield reads.synonyms(req.scope,
                                                       settings.synonyms_cache_ttl_seconds)
    return groups


class ScopeCatalog(NamedTuple):
    """What only a write changes in a scope, read through the cache for ``ttl`` seconds
    (``KB_CATALOG_CACHE_TTL_SECONDS``)."""

    corpus: CorpusLexemes  # the lexeme statistics: BM25 idf, the OR lexemes' budget
    configs: list[str]  # the full-text configurations of the scope's documents' languages
    calibration: Calibration  # the null similarity: the refusal gate's and rejected channel's
    ttl: float
    prefixes: reads.Prefixed = "none"  # whether questions ask by their words' prefixes

    @property
    def trust_ttl(self) -> float:
        """How long a read of the scope's trust records (supersessions, rejected approaches)
        is reused: ``ttl``, at most :data:`TRUST_TTL_S`."""
        return min(self.ttl, TRUST_TTL_S)


def scope_catalog(req: SearchRequest, settings: Settings) -> Generator[Fetch, Any, ScopeCatalog]:
    ttl = settings.catalog_cache_ttl_seconds
    corpus = yield reads.lexeme_stats(req.scope, ttl)
    # a language another process brings changes how the query is stemmed: not 300 s stale
    text = yield reads.fts_configs(req.scope, settings.fts_language, min(ttl, TRUST_TTL_S))
    calibration = yield reads.calibration(req.scope, ttl)
    return ScopeCatalog(corpus, text.configs, calibration, ttl, text.prefixes)


class Found(NamedTuple):
    """The candidates of the two legs, fused, and what the later stages need of the legs."""

    candidates: list[Candidate]
    n_pre: int  # matches both legs saw before the similarity threshold
    mentions: frozenset[int]  # the @mentioned documents that boost (KB_MENTIONS_MODE=boost)
    phrases: list[str]  # the synonym phrases the query matched
    lexeme_stats: dict[str, Any] | None  # the scope's frequencies of the query's lexemes
    # graph expansion's first hop from the likeliest seeds, when the candidates' statement read it
    seed_neighbours: Mapping[tuple[str, str], tuple[Neighbour, ...]] | None = None


def candidates(req: SearchRequest, settings: Settings, catalog: ScopeCatalog,
               groups: list[list[str]], qvec: Any) -> Generator[Fetch | Parallel, Any, Found]:
    """The vector and full-text legs and their weighted RRF.

    Each statement stems the query itself (CTE ``ql``) and the full-text leg chooses the
    lexemes it ORs together (``store.fulltext.tsvector.lexeme_selection_sql``), so nothing
    needs a round trip first. The legs are one :class:`Parallel` request: the session runs them
    at once on two connections (the full-text leg, the longer one, on the search's own) or
    both in one statement (``KB_PARALLEL_LEGS``, decision 0015); the answers are the same."""
    phrases = expansion_phrases(req.query, groups) if groups else []
    with_doc_ids = settings.mentions_mode == "filter"
    filters = req.filters
    if with_doc_ids and req.mention_doc_ids:  # mentioned ids join the filter's (reference §4.5)
        filters = replace(filters, doc_ids=tuple(dict.fromkeys(
            (*filters.doc_ids, *sorted(req.mention_doc_ids)))))
    mode = settings.fts_query_mode
    # In boost mode @mentioned doc ids (the argument, or filters.doc_ids as in the reference)
    # boost instead of filtering.
    mentions = (req.mention_doc_ids | frozenset(req.filters.doc_ids)
                if settings.mentions_mode == "boost" else frozenset())
    shape = leg_shape(req, settings, catalog.corpus, catalog.configs)
    text = " ".join([req.query, *phrases]) if mode == "or" else req.query
    text = without_stop_words(text, catalog.configs)  # where the configuration keeps them
    if mode == "or" and catalog.prefixes != "none":  # as Polish, Czech, Slovak chunks hold them
        text = prefixed_query(text, keep_words=catalog.prefixes == "some")
    # one configuration stems the query through fts_lang, several through the legs' CTE ql
    query = reads.LegQuery(
        qvec=qvec, fts_lang=catalog.configs[0] if len(catalog.configs) == 1
        else settings.fts_language, fts_text=segment_cjk(text),
        phrases=tuple(phrases), mention_ids=tuple(sorted(mentions)))
    keyword: LegResult | None = None
    if text_leg(req, settings):
        keyword, vector = yield reads.candidate_legs(shape, query, mode=mode,
                                                     filters=filters,
                                                     with_doc_ids=with_doc_ids,
                                                     first_hop=first_hop(settings))
    else:
        vector = yield reads.vector_leg(shape, query, filters=filters,
                                        with_doc_ids=with_doc_ids)
    fused, n_pre = fuse_legs(vector, keyword, k=shape.rrf_k, weights=shape.weights,
                             pool=shape.pool_for(keyword.n_pre if keyword else None))
    if keyword is not None and shape.weights[0] == 0:  # the full-text leg's candidates only
        fused = [c for c in fused if c.fts_rank is not None]
    return Found(fused, n_pre, mentions, phrases,
                 catalog.corpus.for_query(list(vector.query_lexemes)) if fused else None,
                 vector.seed_neighbours)


def first_hop(settings: Settings) -> reads.FirstHop | None:
    """Graph expansion's first hop, for the candidate statement to read ahead (None when
    the search expands no graph)."""
    types = tuple(settings.graph_expansion_edge_types)
    if not settings.graph_expansion_enabled or not types:
        return None
    return reads.FirstHop(settings.graph_expansion_direction, types)


def search_meta(req: SearchRequest, settings: Settings, watch: Stopwatch, *, found: Found,
                top: Sequence[Hit], counts: tuple[int, int, int], refuse: bool,
                catalog: ScopeCatalog, promoted: Sequence[tuple[Any, str]],
                channel: RejectedChannel | None, cut: int = 0) -> SearchMeta:
    """The search's report (``counts``: expanded, rejected and runner-up hits)."""
    hybrid = text_leg(req, settings)
    sims = [h.similarity for h in top if h.similarity is not None]
    return SearchMeta(
        primary_count=len(top), expanded_count=counts[0], rejected_count=counts[1],
        runner_up_count=counts[2], projects=tuple(req.scope.projects), tenant=req.scope.tenant,
        retrieval_ms=round(watch.total_ms(), 3), timings_ms=watch.rounded(),
        search_strategy=SearchStrategy(
            fts_enabled=hybrid,
            # a query without words to weigh is ranked by its fused scores (leg_shape)
            fusion_method=("rerank_weighted_sum"
                           if settings.reranking_enabled and tokenize_query(req.query)
                           else "rrf" if hybrid else "semantic_only"),
            fts_query_mode=settings.fts_query_mode if hybrid else None,
            graph_expansion_enabled=settings.graph_expansion_enabled,
            rejected_injection_enabled=settings.rejected_injection_enabled,
            filters_applied=req.filters.count(), synonym_phrases=tuple(found.phrases)),
        retrieval_stats=RetrievalStats(
            candidates_pre_threshold=found.n_pre,
            candidates_post_threshold=len(found.candidates),
            min_score_used=min(sims) if sims else None,
            max_score_used=max(sims) if sims else None,
            primary_count=len(top), expanded_count=counts[0], rejected_count=counts[1],
            cut_to_runner_up=cut),
        should_refuse=refuse, calibrated=catalog.calibration.calibrated,
        null_ceiling=catalog.calibration.ceiling,
        history_promoted=tuple(slug for _, slug in promoted),
        rejected_evidence=tuple(channel.evidence) if channel else (),
        lexeme_stats=found.lexeme_stats, warning_ceiling=catalog.calibration.warning_ceiling)
