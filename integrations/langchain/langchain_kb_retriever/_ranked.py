"""What :class:`~langchain_kb_retriever.KBVectorStore`'s searches share: their arguments, the
documents a result ranks (one per stored document or part, k when k exist) and MMR's pick."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from langchain_core.documents import Document

from kb_retriever import ConfigError, FilterError, Hit, InputError, KnowledgeBase, SearchResult
from kb_retriever.interop.vectors import hit_vectors
from kb_retriever.ranking.mmr import mmr_order
from kb_retriever.search.modes import Legs

from . import _units

__all__ = ["ak_units", "and_metadata", "best_hits", "check_mmr", "filter_arg", "k_units",
           "mmr_hits", "ranked_hits", "relevance", "search_args", "wider", "with_scores"]

# A search asks for this many chunks per document it returns: the per-document cap keeps up to
# a few chunks of one document in the top-k, and the store returns each document once.
_CHUNKS_PER_DOCUMENT = 3


def filter_arg(name: str, value: Any) -> Mapping[str, Any] | None:
    """``value`` if it is a mapping or None (no filter), else :class:`FilterError`."""
    if value is not None and not isinstance(value, Mapping):
        raise FilterError(f"{name} must be a mapping, got {type(value).__name__}")
    return value


def and_metadata(filters: Mapping[str, Any] | None,
                 expression: Mapping[str, Any]) -> dict[str, Any]:
    """``filters`` with ``expression`` AND-ed into its ``metadata`` filter: a key that both
    name must hold both conditions (a merged mapping kept the expression's alone)."""
    out = dict(filters or {})
    held = out.get("metadata")
    out["metadata"] = {"$and": [dict(held), dict(expression)]} if held else dict(expression)
    return out


def search_args(kb: KnowledgeBase, k: int, filter: Mapping[str, Any] | None,
                filters: Mapping[str, Any] | None, legs: Legs) -> dict[str, Any]:
    """``KnowledgeBase.search`` arguments for the top ``k`` documents (scope apart)."""
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ConfigError(f"k must be a positive integer, got {k!r}")
    if k > kb.settings.max_limit:  # never silently fewer than k
        raise InputError(f"k is {k}, above the {kb.settings.max_limit} hits one search returns "
                         "at most (KB_MAX_LIMIT, Settings.max_limit, up to 10000): ask for "
                         "fewer, or raise KB_MAX_LIMIT")
    merged = dict(filter_arg("filters", filters) or {})
    filter = filter_arg("filter", filter)
    if filter:
        merged = and_metadata(merged, filter)
    limit = min(k * _CHUNKS_PER_DOCUMENT, kb.settings.max_limit)
    return {"limit": limit, "filters": merged or None, "legs": legs}


def ranked_hits(result: SearchResult) -> tuple[Hit, ...]:
    """Every hit a store ranks, best first: primary, runner-ups, then the ⚠ block's."""
    return (*result.primary, *result.runner_up, *result.rejected)


def best_hits(result: SearchResult, k: int | None) -> list[Hit]:
    """The best chunk of each of the first ``k`` documents (or parts; all with None): the
    primary hits, then the runner-ups, then the rejected records the ⚠ block shows, so the
    store returns k when k exist (a search keeps its weakest hits as runner-ups)."""
    best: dict[str, Hit] = {}
    for hit in ranked_hits(result):
        best.setdefault(_units.unit_id(hit), hit)
    return list(best.values())[:k]


def wider(result: SearchResult, k: int, limit: int, most: int) -> int | None:
    """The ``limit`` to search again with when ``result`` holds fewer than ``k`` documents (or
    parts) though its hits belong to fewer documents than they are: a long document whose
    chunks fill the pool hides the others (four times wider, up to ``most``); None when it
    holds k, or every hit is a document of its own (the scope holds no more)."""
    hits = ranked_hits(result)
    units = len(best_hits(result, None))
    if units >= k or units == len(hits) or limit >= most:
        return None
    return min(limit * 4, most)


def k_units(kb: KnowledgeBase, query: str | None, embedding: Sequence[float] | None, k: int,
            args: dict[str, Any]) -> SearchResult:
    """The search of ``args`` (:func:`search_args`), widened while a long document's chunks
    hide the others (:func:`wider`): k documents when k exist."""
    result = kb.search(query, query_embedding=embedding, **args)
    while (limit := wider(result, k, args["limit"], kb.settings.max_limit)):
        args["limit"] = limit
        result = kb.search(query, query_embedding=embedding, **args)
    return result


async def ak_units(kb: KnowledgeBase, query: str | None, embedding: Sequence[float] | None,
                   k: int, args: dict[str, Any]) -> SearchResult:
    """The async twin of :func:`k_units`."""
    result = await kb.asearch(query, query_embedding=embedding, **args)
    while (limit := wider(result, k, args["limit"], kb.settings.max_limit)):
        args["limit"] = limit
        result = await kb.asearch(query, query_embedding=embedding, **args)
    return result


def with_scores(hits: Sequence[Hit], stored: list[Document]) -> list[tuple[Document, float]]:
    """The ``stored`` documents in the order of ``hits``, each with its hit's final score."""
    by_id = {d.id: d for d in stored}
    pairs = ((_units.unit_id(h), h.score) for h in hits)
    return [(by_id[i], score) for i, score in pairs if i in by_id]


def stored(result: SearchResult, k: int, fetch: Callable[[list[str]], list[Document]]
           ) -> list[tuple[Document, float]]:
    """The first ``k`` of the result's documents (or parts) that ``fetch`` still finds, with
    their scores. The search and the read are two reads: a document deleted in between gave
    k - 1 while k existed; the hits after the first ``k`` are read only then."""
    hits, found = best_hits(result, None), []
    for some in (hits[:k], hits[k:]):
        if some and len(found) < k:
            found += with_scores(some, fetch([_units.unit_id(h) for h in some]))
    return found[:k]


async def astored(result: SearchResult, k: int,
                  fetch: Callable[[list[str]], Awaitable[list[Document]]]
                  ) -> list[tuple[Document, float]]:
    """The async twin of :func:`stored`."""
    hits, found = best_hits(result, None), []
    for some in (hits[:k], hits[k:]):
        if some and len(found) < k:
            found += with_scores(some, await fetch([_units.unit_id(h) for h in some]))
    return found[:k]


def relevance(score: float) -> float:
    """A final score as LangChain's relevance score, in [0, 1]: the score is relevance
    already (higher is better, not a distance), but the trust gradient's penalties take weak
    or superseded chunks below 0 and strong matches reach above 1, so it is clipped (the order
    of the results stays the score's).

    >>> relevance(-0.3), relevance(0.42), relevance(1.3)
    (0.0, 0.42, 1.0)
    """
    return min(1.0, max(0.0, score))


def check_mmr(fetch_k: int, lambda_mult: float) -> None:
    if isinstance(fetch_k, bool) or not isinstance(fetch_k, int) or fetch_k < 1:
        raise ConfigError(f"fetch_k must be a positive integer, got {fetch_k!r}")
    if isinstance(lambda_mult, bool) or not isinstance(lambda_mult, int | float) \
            or not 0.0 <= lambda_mult <= 1.0:
        raise ConfigError(f"lambda_mult must be between 0 and 1, got {lambda_mult!r}")


def mmr_hits(kb: KnowledgeBase, result: SearchResult, k: int, fetch_k: int,
             lambda_mult: float) -> list[Hit]:
    """``k`` of the first ``fetch_k`` documents in MMR order: relevance is the pipeline's final
    score, similarity the cosine between the documents' best chunks' stored vectors, as
    LangChain's stores read theirs."""
    hits = best_hits(result, fetch_k)
    if not hits:
        return []
    return [hits[i] for i in mmr_order([h.score for h in hits], hit_vectors(kb, hits), k,
                                       lambda_mult)]
