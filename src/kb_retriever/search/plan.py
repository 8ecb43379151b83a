"""The sans-I/O plan of a search: what a stage asks for, and the drivers that answer it.

A plan is a generator that *yields* a :class:`~kb_retriever.store.reads.Fetch` (a read of the
store, complete with its values and the parser of its rows), a
:class:`~kb_retriever.store.reads.Parallel` (reads that may run at once) or an :class:`Embed` (a
query embedding) and receives the answer, so the
sync and async entry points share every line of logic and differ only in how they perform I/O
(:func:`run_plan` / :func:`arun_plan`). ``search.pipeline`` and ``search.graph`` build on it.
Also the request's checks (:func:`validate_query`, :func:`validate_limit`, :func:`mention_ids`,
:func:`moment`) and which legs it runs
(:func:`text_leg`, :func:`leg_weights`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ..checks import check_text
from ..errors import InputError
from ..filters import SearchFilters
from ..filters.expressions import is_row_id
from ..models import SearchResult
from ..settings import Settings
from ..store import sql as q
from ..store.reads import Fetch, Parallel
from .modes import Legs

__all__ = ["Embed", "Fetch", "Parallel", "Plan", "SearchRequest", "arun_plan", "leg_weights",
           "mention_ids", "moment", "run_plan", "text_leg", "validate_limit", "validate_query"]


@dataclass(frozen=True)
class Embed:
    """Embed ``text`` as a query; send back the vector."""

    text: str


@dataclass(frozen=True)
class SearchRequest:
    query: str  # "" for a search by ``query_embedding`` alone: the vector leg only
    scope: q.Scope
    limit: int
    filters: SearchFilters
    mention_doc_ids: frozenset[int] = frozenset()
    query_embedding: Any = None  # a vector (sequence of floats or numpy array)
    now: datetime | None = None
    legs: Legs = Legs()
    # whether the embedder reads the query's script (``embedding.reads``): else the reranker
    # does not weigh the query's cosine
    embedder_reads: bool = True


Plan = Generator[Fetch | Parallel | Embed, Any, SearchResult]


def _one_by_one(fetch: Callable[[Fetch], Any]) -> Callable[[Parallel], tuple[Any, ...]]:
    """A :class:`Parallel` answered on one connection: in one statement when it has one."""
    def answer(request: Parallel) -> tuple[Any, ...]:
        if request.together is not None:
            return fetch(request.together)  # type: ignore[no-any-return]
        return tuple(fetch(f) for f in request.fetches)
    return answer


def run_plan(plan: Plan, fetch: Callable[[Fetch], Any], embed: Callable[[str], Any],
             fetch_all: Callable[[Parallel], tuple[Any, ...]] | None = None
             ) -> SearchResult:
    """Drive a plan with blocking I/O. ``fetch_all`` answers a :class:`Parallel` (default: on
    one connection, in one statement when the request has one)."""
    many = fetch_all or _one_by_one(fetch)
    try:
        request = next(plan)
        while True:
            if isinstance(request, Fetch):
                answer = fetch(request)
            elif isinstance(request, Parallel):
                answer = many(request)
            else:
                answer = embed(request.text)
            request = plan.send(answer)
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]


async def arun_plan(plan: Plan, fetch: Callable[[Fetch], Awaitable[Any]],
                    embed: Callable[[str], Awaitable[Any]],
                    fetch_all: Callable[[Parallel], Awaitable[tuple[Any, ...]]] | None
                    = None) -> SearchResult:
    """Drive a plan with async I/O (``fetch_all`` as in :func:`run_plan`)."""
    try:
        request = next(plan)
        while True:
            answer: Any
            if isinstance(request, Fetch):
                answer = await fetch(request)
            elif isinstance(request, Parallel):
                if fetch_all is not None:
                    answer = await fetch_all(request)
                elif request.together is not None:
                    answer = await fetch(request.together)
                else:
                    answer = tuple([await fetch(f) for f in request.fetches])
            else:
                answer = await embed(request.text)
            request = plan.send(answer)
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]


def mention_ids(values: Any) -> frozenset[int]:
    """``mention_doc_ids`` as given to a search, checked."""
    if values is None:
        return frozenset()
    if isinstance(values, str | bytes) or not isinstance(values, Iterable):
        raise InputError("mention_doc_ids takes a list of document ids (integers)")
    ids = tuple(values)
    if bad := [v for v in ids if not is_row_id(v)]:
        raise InputError(f"mention_doc_ids takes positive integer document ids, not {bad[0]!r:.40}")
    return frozenset(ids)


def moment(value: Any) -> datetime | None:
    """``now`` as given to a search, checked."""
    if value is not None and not isinstance(value, datetime):
        raise InputError(f"now takes a datetime, not {type(value).__name__}")
    return value


def text_leg(req: SearchRequest, settings: Settings) -> bool:
    """Whether the full-text leg runs: there is query text, its weight is not 0 (the
    request's, else ``KB_HYBRID_FTS_WEIGHT``), and hybrid search is on or the request asks
    for the leg itself (a ``Legs.text_weight``, or ``Legs.vector_weight=0``: full-text only)."""
    explicit = req.legs.text_weight is not None or req.legs.vector_weight == 0
    weight = leg_weights(req, settings)[1]
    return bool(req.query) and weight > 0 and (settings.hybrid_search_enabled or explicit)


def leg_weights(req: SearchRequest, settings: Settings) -> tuple[float, float]:
    """The (vector, full-text) RRF weights of the search: its ``Legs``' over the settings';
    an :class:`InputError` when both are 0 (every fused score 0), as the settings refuse."""
    weights = req.legs.weights((float(settings.hybrid_semantic_weight),
                                float(settings.hybrid_fts_weight)))
    if weights == (0.0, 0.0):
        raise InputError("this search weighs both legs 0 (its Legs over KB_HYBRID_SEMANTIC_"
                         "WEIGHT and KB_HYBRID_FTS_WEIGHT): every fused score would be 0; give "
                         "the leg it runs a weight above 0")
    return weights


def validate_query(query: Any, settings: Settings) -> str:
    if not isinstance(query, str):
        raise InputError(f"query must be a string, got {type(query).__name__}")
    text = check_text(query, "query").strip()
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
