"""The search pipeline as a sans-I/O plan (``plan.py``).

:func:`search_plan` is a generator that *yields* what it needs (an SQL fetch or a query
embedding) and receives the answer, so the sync and async entry points share every line of
logic and differ only in how they perform I/O (``plan.run_plan`` / ``plan.arun_plan``).

embed → candidates (two independent SQL legs, HNSW and FTS, fused by weighted RRF) → rerank
→ diversify → graph → rejected → result
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from .errors import InputError
from .graph import expand_graph
from .models import DocumentRef, Hit, Origin, SearchResult
from .plan import Embed, Fetch, Parallel, Plan, SearchRequest
from .ranking import (
    diversify,
    expand_query_text,
    expansion_phrases,
    fuse_rrf,
    should_refuse,
)
from .ranking.bm25 import CorpusLexemes
from .ranking.calibration import Calibration
from .ranking.history import promote_predecessors
from .ranking.rerank import rank
from .rejected import (
    RejectedChannel,
    RejectedVectors,
    best_rejected,
    decide_rejected,
    unit_vectors,
    yield_to_accepted,
)
from .settings import Settings
from .store import sql as q
from .store.rows import candidate_from_row

__all__ = ["best_rejected", "fuse_legs", "leg_shape", "search_plan", "unit_vectors",
           "validate_limit", "validate_query"]


def validate_query(query: Any, settings: Settings) -> str:
    if not isinstance(query, str):
        raise InputError(f"query must be a string, got {type(query).__name__}")
    if "\x00" in query:
        raise InputError("query contains a NUL byte")
    text = query.strip()
    if not text:
        raise InputError("query is empty")
    if len(text) > settings.max_query_chars:
        raise InputError(
            f"query is {len(text)} characters; the maximum is {settings.max_query_chars} "
            "(KB_MAX_QUERY_CHARS)"
        )
    return text


def validate_limit(limit: Any, settings: Settings) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int):
        raise InputError(f"limit must be an integer, got {limit!r}")
    if not 1 <= limit <= settings.max_limit:
        raise InputError(f"limit must be between 1 and {settings.max_limit}, got {limit}")
    return limit


def leg_shape(req: SearchRequest, settings: Settings, corpus: CorpusLexemes | None = None,
              fts_configs: Sequence[str] = ()) -> q.LegShape:
    """The legs' literal scope and sizes: ``limit x candidate_multiplier`` candidates per leg
    when reranking (just ``limit`` without it), the similarity threshold, the match cap, the
    edges graph expansion walks, and the lexeme statistics (``corpus``) by which the full-text
    leg chooses its OR lexemes."""
    kc = req.limit * settings.candidate_multiplier if settings.reranking_enabled else req.limit
    edges = tuple(settings.graph_expansion_edge_types) if settings.graph_expansion_enabled else ()
    estimates = corpus.estimates if corpus is not None else None
    return q.LegShape(req.scope, kc=kc, min_sim=settings.default_min_similarity,
                      fts_cap=settings.fts_match_cap, edge_types=edges,
                      edge_direction=settings.graph_expansion_direction,
                      lexemes=q.LexemeBudget(*estimates) if estimates else None,
                      fts_configs=tuple(fts_configs) if len(fts_configs) > 1 else ())


def _kept(read: Fetch, req: SearchRequest, ttl: float) -> Fetch:
    """``read``, declared cacheable per scope for ``ttl`` seconds (0: never cached)."""
    return replace(read, cache_key=(read.stage, req.scope.tenant, req.scope.projects),
                   cache_ttl=ttl)


def search_plan(req: SearchRequest, settings: Settings) -> Plan:
    """The whole search as a generator of I/O requests (see module docstring)."""
    timings: dict[str, float] = {}
    t_start = time.perf_counter()
    scope_p = q.scope_params(req.scope)

    groups: list[list[str]] = []
    if settings.synonyms_enabled:
        t = time.perf_counter()
        rows = yield _kept(Fetch(q.synonyms_sql(), scope_p, "synonyms"), req,
                           settings.synonyms_cache_ttl_seconds)
        groups = [[r["term"], *r["synonyms"]] for r in rows]
        timings["synonyms"] = _ms(t)
    phrases = expansion_phrases(req.query, groups) if groups else []
    embed_text = expand_query_text(req.query, groups) if groups else req.query

    t = time.perf_counter()
    qvec = req.query_embedding if req.query_embedding is not None else (yield Embed(embed_text))
    timings["embed"] = _ms(t)

    # What only a write changes is read through the cache (KB_CATALOG_CACHE_TTL_SECONDS).
    catalog = settings.catalog_cache_ttl_seconds
    # The scope's lexeme statistics (BM25 idf, the OR lexemes' budget).
    corpus: CorpusLexemes = yield _kept(Fetch(q.lexeme_stats_sql(), scope_p, "lexeme_stats",
                                              parse=CorpusLexemes.from_rows), req, catalog)

    # The full-text configurations of the scope's documents (their languages'): one stems the
    # query through the fts_lang parameter, several through the legs' CTE ql.
    configs: list[str] = yield _kept(Fetch(
        q.fts_configs_sql(), {**scope_p, "default": settings.fts_language}, "fts_configs",
        parse=lambda rows: [r["config"] for r in rows]), req, catalog)
    fts_lang = configs[0] if len(configs) == 1 else settings.fts_language

    # The scope's null similarity (the refusal gate's and rejected channel's calibration).
    calibration: Calibration = yield _kept(Fetch(q.scope_stats_sql(), scope_p, "scope_stats",
                                                 parse=Calibration.from_rows), req, catalog)

    with_doc_ids = settings.mentions_mode == "filter"
    hybrid = settings.hybrid_search_enabled
    mode = settings.fts_query_mode
    # In boost mode @mentioned doc ids (the argument, or filters.doc_ids as in the reference) boost
    # instead of filtering.
    mentions = (req.mention_doc_ids | frozenset(req.filters.doc_ids)
                if settings.mentions_mode == "boost" else frozenset())
    t = time.perf_counter()
    fts_text = " ".join([req.query, *phrases]) if mode == "or" else req.query
    shape = leg_shape(req, settings, corpus, configs)
    vec_sql, fparams = q.vector_leg_sql(shape, filters=req.filters, with_doc_ids=with_doc_ids,
                                        with_mentions=bool(mentions))
    params = {
        **fparams, "qvec": qvec,
        "fts_lang": fts_lang,
        "fts_text": fts_text,
        **{f"phrase{i}": p for i, p in enumerate(phrases)},
        "mention_ids": sorted(mentions),
    }

    # Independent: the caller may run them at once on two connections, the full-text leg (the
    # longer one) on the search's own. Each statement stems the query itself (CTE ql) and the
    # full-text leg chooses the lexemes it ORs together (store.sql.lexeme_selection_sql), so
    # nothing needs a round trip first.
    legs: tuple[Fetch, ...] = (Fetch(vec_sql, params, "vector_leg"),)
    if hybrid:
        fts_sql, _ = q.keyword_leg_sql(
            shape, fts_mode=mode, n_phrases=0 if mode == "or" else len(phrases),
            filters=req.filters, with_doc_ids=with_doc_ids)
        legs = (Fetch(fts_sql, params, "keyword_leg"), *legs)
    answers = yield Parallel(legs)
    vector_rows, keyword_rows = answers[-1], answers[0] if hybrid else None
    # the query's lexemes as the statements stemmed them, sorted (the vector leg returns them,
    # on every row, and always returns a row)
    lexemes = list(vector_rows[0]["query_lexemes"] or ()) if vector_rows else []
    rows, n_pre = fuse_legs(vector_rows, keyword_rows, settings)
    timings["candidates"] = _ms(t)
    documents: dict[int, DocumentRef] = {}  # one per document: the rows of a search share it
    candidates = [candidate_from_row(r, documents) for r in rows]

    t = time.perf_counter()
    lexeme_stats = corpus.for_query(lexemes) if rows else None
    ranked = rank(req.query, candidates, settings, mention_doc_ids=mentions, now=req.now,
                  lexeme_stats=lexeme_stats)
    # History questions: a superseded decision the query names goes next to its successor.
    edges = yield _kept(Fetch(q.supersessions_sql(), scope_p, "supersessions",
                              parse=successor_map), req, catalog)
    ranked, promoted = promote_predecessors(req.query, ranked, edges, top=req.limit)
    timings["rerank"] = _ms(t)

    channel: RejectedChannel | None = None
    pool: RejectedVectors | None = None
    if settings.rejected_injection_enabled:
        t = time.perf_counter()
        # The scope's rejected-approach chunks with their vectors, cached: scoring and reading
        # them takes no round trip per search.
        pool = yield _kept(Fetch(q.rejected_chunks_sql(), scope_p, "rejected_vectors",
                                 parse=unit_vectors), req, catalog)
        channel = decide_rejected(pool, qvec, ranked, calibration, settings)
        # a rejected idea that does not correlate is no context either (rejected.py)
        ranked = yield_to_accepted([s for s in ranked if channel.keeps(s.document)], pool,
                                   ratio=settings.rejected_yield_ratio)
        timings["rejected"] = _ms(t)

    kept, rest = diversify(ranked, req.limit, settings.max_chunks_per_doc)
    top = [s.hit() for s in kept]  # hits for what the result keeps, not for every candidate
    runner_up = tuple(s.hit(Origin.RUNNER_UP) for s in rest[: settings.runner_up_limit])

    expanded: list[Hit] = []
    if settings.graph_expansion_enabled:
        t = time.perf_counter()
        # documents the legs found without an edge to walk: no seeds (store.sql.LegShape)
        unlinked = frozenset(r["doc_pk"] for r in rows if r.get("linked") is False)
        expanded = yield from expand_graph(top, req, settings, qvec, unlinked=unlinked)
        if channel is not None:
            expanded = [h for h in expanded if channel.keeps(h.document)]
        timings["graph"] = _ms(t)

    refuse = should_refuse(top, settings, calibration)
    rejected: list[Hit] = []
    if channel is not None and pool is not None:
        rejected = channel.inject(pool, qvec, [*top, *expanded], refused=refuse,
                                  settings=settings)

    total_ms = _ms(t_start)
    sims = [h.similarity for h in top if h.similarity is not None]
    meta = {
        "primary_count": len(top),
        "expanded_count": len(expanded),
        "rejected_count": len(rejected),
        "runner_up_count": len(runner_up),
        "project_key": req.scope.projects[0] if len(req.scope.projects) == 1 else None,
        "projects": list(req.scope.projects),
        "tenant": req.scope.tenant,
        "retrieval_ms": round(total_ms, 3),
        "timings_ms": {k: round(v, 3) for k, v in timings.items()},
        "search_strategy": {
            "semantic_enabled": True,
            "fts_enabled": hybrid,
            "fusion_method": (
                "rerank_weighted_sum" if settings.reranking_enabled
                else "rrf" if hybrid else "semantic_only"
            ),
            "candidate_fusion": "rrf" if hybrid else "semantic_only",
            "fts_query_mode": mode if hybrid else None,
            "graph_expansion_enabled": settings.graph_expansion_enabled,
            "rejected_injection_enabled": settings.rejected_injection_enabled,
            "filters_applied": req.filters.count(),
            "synonym_phrases": phrases,
        },
        "retrieval_stats": {
            "candidates_pre_threshold": n_pre,
            "candidates_post_threshold": len(candidates),
            "min_score_used": min(sims) if sims else None,
            "max_score_used": max(sims) if sims else None,
        },
        "should_refuse": refuse,
        "calibration": {"calibrated": calibration.calibrated,
                        "null_ceiling": round(calibration.ceiling, 4)},
        "history_promoted": [slug for _, slug in promoted],
        "rejected_evidence": [e.to_dict() for e in channel.evidence] if channel else [],
        # the scope's frequencies of the query's lexemes (the BM25 idf inputs), for --explain
        "lexeme_stats": lexeme_stats,
    }
    return SearchResult(
        primary=tuple(top), expanded=tuple(expanded), rejected=tuple(rejected),
        runner_up=runner_up, meta=meta, query=req.query,
    )


def fuse_legs(vector_rows: Sequence[dict[str, Any]], keyword_rows: Sequence[dict[str, Any]] | None,
              settings: Settings) -> tuple[list[dict[str, Any]], int]:
    """Weighted reciprocal rank fusion of the two legs' rows (reference §8), best first.

    Returns the candidate rows, each with ``vector_rank``, ``fts_rank``, ``fts_score`` and
    ``fused`` set, and the matches both legs saw before the threshold (``n_pre``). A chunk found
    by both legs sums ``w / (rrf_k + rank)`` over them; an @mentioned chunk neither found
    (``mention``) joins with 0. Ties: lower chunk id first. Without ``keyword_rows`` (semantic
    only) the vector rank alone scores.

    >>> from kb_retriever import Settings
    >>> vec = [{"n_pre": 2, "chunk_id": 5, "vector_rank": 1}, {"n_pre": 2, "chunk_id": 7,
    ...        "vector_rank": 2}]
    >>> kw = [{"n_pre": 9, "chunk_id": 7, "fts_rank": 1, "fts_score": 0.5}]
    >>> rows, n_pre = fuse_legs(vec, kw, Settings())
    >>> [(r["chunk_id"], round(r["fused"], 5)) for r in rows], n_pre
    ([(7, 0.01621), (5, 0.01148)], 11)
    """
    legs = [vector_rows] if keyword_rows is None else [vector_rows, keyword_rows]
    n_pre = sum(int(rows[0]["n_pre"]) for rows in legs if rows)  # on every row of a leg
    # The legs' ranks are 1..n (row_number over what the leg returns), so rank order is list
    # order for fuse_rrf; an empty leg's one row carries only its count (chunk_id NULL).
    vec = sorted((r for r in vector_rows if r["chunk_id"] is not None and not r.get("mention")),
                 key=lambda r: r["vector_rank"])
    kw = sorted((r for r in keyword_rows or () if r["chunk_id"] is not None),
                key=lambda r: r["fts_rank"])
    by_id: dict[int, dict[str, Any]] = {}
    for row in vec:
        row["fts_rank"] = row["fts_score"] = None
        by_id[row["chunk_id"]] = row
    for row in kw:
        have = by_id.get(row["chunk_id"])
        if have is None:
            row["vector_rank"] = None
            by_id[row["chunk_id"]] = row
        else:
            have["fts_rank"], have["fts_score"] = row["fts_rank"], row["fts_score"]
    lists, weights = [[r["chunk_id"] for r in vec]], [float(settings.hybrid_semantic_weight)]
    if keyword_rows is not None:
        lists.append([r["chunk_id"] for r in kw])
        weights.append(float(settings.hybrid_fts_weight))
    for chunk_id, score in fuse_rrf(lists, weights, k=settings.rrf_k):
        by_id[chunk_id]["fused"] = score
    for row in vector_rows:
        if row.get("mention") and row["chunk_id"] not in by_id:
            row["vector_rank"] = row["fts_rank"] = row["fts_score"] = None
            row["fused"] = 0.0
            by_id[row["chunk_id"]] = row
    rows = sorted(by_id.values(), key=lambda r: (-r["fused"], r["chunk_id"]))
    return rows, n_pre


def successor_map(rows: Sequence[dict[str, Any]]) -> dict[tuple[str, str], list[tuple[str, str]]]:
    """(project, successor) -> its predecessors, from :func:`~kb_retriever.store.sql.
    supersessions_sql` rows.

    >>> successor_map([{"project_key": "p", "from_slug": "v2", "to_slug": "v1",
    ...                 "edge_type": "supersedes"},
    ...                {"project_key": "p", "from_slug": "v1", "to_slug": "v2",
    ...                 "edge_type": "invalidated_by"}])
    {('p', 'v2'): [('p', 'v1')]}
    """
    out: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for r in rows:
        p = r["project_key"]
        new, old = ((r["from_slug"], r["to_slug"]) if r["edge_type"] == "supersedes"
                    else (r["to_slug"], r["from_slug"]))
        preds = out.setdefault((p, new), [])
        if (p, old) not in preds:
            preds.append((p, old))
    return out


def _ms(t: float) -> float:
    return (time.perf_counter() - t) * 1000.0
