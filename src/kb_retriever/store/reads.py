"""The reads a search asks for: each a complete statement with all its values, and the parser
that turns its rows into records (``models.legs``, ``ranking`` values) before they leave the
store.

A search plan (``search.plan``) yields these requests and a session (``store.reader``) answers
them, so the plan holds no SQL and binds no placeholder. What may be cached, under which key and
for how long, each request says itself (:attr:`Fetch.cache_key`, :attr:`Fetch.cache_ttl`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

from ..filters import SearchFilters
from ..models.legs import LegResult
from ..ranking.bm25 import CorpusLexemes
from ..ranking.calibration import Calibration
from ..vocabulary import ACCEPTED, EXPANDABLE_STATUSES, REJECTED_APPROACH
from . import catalog_sql as catalog
from . import sql as q
from .filter_sql import rejected_passing_sql
from .rows import hybrid_result, leg_result, neighbours_from_rows, successor_map

__all__ = ["Fetch", "FirstHop", "LegQuery", "Parallel", "Prefixed", "TextConfigs", "calibration",
           "candidate_legs", "fts_configs", "keyword_leg", "lexeme_stats", "neighbours", "rejected_chunks",
           "supersessions", "synonyms", "vector_leg"]

Rows = list[dict[str, Any]]


@dataclass(frozen=True)
class Fetch:
    """Run ``query`` with ``params``; the answer is ``parse(rows)`` (the rows as dicts when
    ``parse`` is None). A read whose answer changes only when the knowledge base is written
    may be kept under ``cache_key`` for ``cache_ttl`` seconds (0: never cached). A ``binary``
    read's answer comes in PostgreSQL's binary format: a read of vectors, whose text form costs
    both ends (the 150 rejected chunks of the 100k load corpus: 30 ms as text, 4 as binary)."""

    query: Any  # a psycopg Composable
    params: dict[str, Any]
    stage: str
    parse: Callable[[Rows], Any] | None = None
    cache_key: tuple[Any, ...] | None = None
    cache_ttl: float = 0.0
    ann: bool = False  # an approximate-nearest-neighbour read (the HNSW settings apply)
    binary: bool = False


@dataclass(frozen=True)
class Parallel:
    """Independent reads; their answers come back in order, maybe read at once on several
    connections. ``together``, when set, answers all of them in one statement (its answer is
    the tuple of theirs): a session that does not read them at once runs it, one round trip
    on one connection instead of one per read."""

    fetches: tuple[Fetch, ...]
    together: Fetch | None = None


def _scoped(query: Any, scope: q.Scope, stage: str, ttl: float,
            parse: Callable[[Rows], Any] | None, *, binary: bool = False,
            **params: Any) -> Fetch:
    """A read of one scope, cached for ``ttl`` seconds per (stage, tenant, projects)."""
    return Fetch(query, {**q.scope_params(scope), **params}, stage, parse,
                 cache_key=(stage, scope.tenant, scope.projects, scope.space.id),
                 cache_ttl=ttl, binary=binary)


def _synonym_groups(rows: Rows) -> list[list[str]]:
    return [[r["term"], *r["synonyms"]] for r in rows]


def synonyms(scope: q.Scope, ttl: float) -> Fetch:
    """The scope's synonym groups, the term first."""
    return _scoped(catalog.synonyms_sql(), scope, "synonyms", ttl, _synonym_groups)


def lexeme_stats(scope: q.Scope, ttl: float) -> Fetch:
    """The scope's lexeme statistics (:class:`~kb_retriever.ranking.bm25.CorpusLexemes`)."""
    return _scoped(catalog.lexeme_stats_sql(), scope, "lexeme_stats", ttl, CorpusLexemes.from_rows)


#: Whether a scope's questions ask by their words' prefixes (decision 0022): alone ("all") when
#: most of its documents are in a language indexed by them too (``ranking.text.PREFIX_LANGUAGES``)
#: and none in another known language; beside the words ("some") when some are; "none".
Prefixed = Literal["none", "some", "all"]


class TextConfigs(NamedTuple):
    """How the scope's documents are indexed for full-text search."""

    configs: list[str]  # the configurations of their languages
    prefixes: Prefixed


def _configs(rows: Rows) -> TextConfigs:
    prefixed, other = sum(r["prefixed"] for r in rows), sum(r["other"] for r in rows)
    # a document of unknown language (a short note) does not stop a Polish scope from being
    # one, nor does one Polish document make a scope of them Polish
    most = 2 * prefixed > sum(r["documents"] for r in rows)
    prefixes: Prefixed = ("none" if not prefixed else "all" if most and not other else "some")
    return TextConfigs([r["config"] for r in rows], prefixes)


def fts_configs(scope: q.Scope, default: str, ttl: float) -> Fetch:
    """The full-text configurations of the scope's documents' languages (``default`` for the
    documents without one): :class:`TextConfigs`."""
    return _scoped(catalog.fts_configs_sql(), scope, "fts_configs", ttl, _configs, default=default)


def calibration(scope: q.Scope, ttl: float) -> Fetch:
    """The scope's null similarity (:class:`~kb_retriever.ranking.calibration.Calibration`)."""
    return _scoped(catalog.scope_stats_sql(), scope, "scope_stats", ttl, Calibration.from_rows)


def supersessions(scope: q.Scope, ttl: float) -> Fetch:
    """(project, successor) -> its predecessors, in the scope."""
    return _scoped(catalog.supersessions_sql(), scope, "supersessions", ttl, successor_map)


def rejected_chunks(scope: q.Scope, ttl: float, parse: Callable[[Rows], Any]) -> Fetch:
    """The chunks of the scope's accepted rejected-approach documents with their embeddings,
    answered by ``parse``."""
    return _scoped(catalog.rejected_chunks_sql(), scope, "rejected_vectors", ttl, parse,
                   binary=True, rejected=REJECTED_APPROACH, accepted=ACCEPTED)


def rejected_passing(scope: q.Scope, filters: SearchFilters, docs: Sequence[int]) -> Fetch:
    """The ids of the chunks of the rejected-approach documents ``docs`` that pass ``filters``
    (``filter_sql.rejected_passing_sql``), a frozenset; read per search, as the filters vary."""
    stmt, fparams = rejected_passing_sql(filters)
    return Fetch(stmt, {**fparams, "tenant": scope.tenant, "docs": list(docs)}, "rejected",
                 lambda rows: frozenset(int(r["id"]) for r in rows))


class LegQuery(NamedTuple):
    """The query's values that both candidate legs bind: its vector, the full-text
    configuration and text, the synonym phrases (separate tsqueries outside ``or`` mode) and
    the @mentioned documents."""

    qvec: Any
    fts_lang: str
    fts_text: str
    phrases: tuple[str, ...] = ()
    mention_ids: tuple[int, ...] = ()

    def params(self) -> dict[str, Any]:
        return {"qvec": self.qvec, "fts_lang": self.fts_lang, "fts_text": self.fts_text,
                **{f"phrase{i}": p for i, p in enumerate(self.phrases)},
                "mention_ids": list(self.mention_ids)}


def vector_leg(shape: q.LegShape, query: LegQuery, *, filters: SearchFilters,
               with_doc_ids: bool) -> Fetch:
    """The vector leg (``store.sql.vector_leg_sql``), answered as a :class:`LegResult`."""
    stmt, fparams = q.vector_leg_sql(shape, filters=filters, with_doc_ids=with_doc_ids,
                                     with_mentions=bool(query.mention_ids))
    return Fetch(stmt, {**fparams, **query.params()}, "vector_leg", _vector_leg, ann=True)


def keyword_leg(shape: q.LegShape, query: LegQuery, *, mode: str, filters: SearchFilters,
                with_doc_ids: bool) -> Fetch:
    """The full-text leg (``store.sql.keyword_leg_sql``), answered as a :class:`LegResult`.
    In ``or`` mode the phrases are in ``fts_text`` already."""
    stmt, fparams = q.keyword_leg_sql(shape, fts_mode=mode,
                                      n_phrases=0 if mode == "or" else len(query.phrases),
                                      filters=filters, with_doc_ids=with_doc_ids)
    return Fetch(stmt, {**fparams, **query.params()}, "keyword_leg", _keyword_leg)


class FirstHop(NamedTuple):
    """Graph expansion's first hop as the one statement of both legs reads it ahead, from the
    likeliest seeds (``store.graph_sql.seed_neighbours_ctes``): the walk's direction and edge
    types."""

    direction: str
    types: tuple[str, ...]


def candidate_legs(shape: q.LegShape, query: LegQuery, *, mode: str, filters: SearchFilters,
                   with_doc_ids: bool, first_hop: FirstHop | None = None) -> Parallel:
    """The two candidate legs, answered as their :class:`LegResult` s (full-text first): on
    two connections at once, or both in one statement (``store.sql.hybrid_sql``; the
    session chooses, ``KB_PARALLEL_LEGS``). The one statement also reads ``first_hop``
    (the vector leg's ``seed_neighbours``); the legs at once leave it to its own read."""
    stmt, fparams = q.hybrid_sql(shape, fts_mode=mode,
                                 n_phrases=0 if mode == "or" else len(query.phrases),
                                 filters=filters, with_doc_ids=with_doc_ids,
                                 with_mentions=bool(query.mention_ids),
                                 graph_direction=first_hop.direction if first_hop else None)
    hop = _hop_params(first_hop.types) if first_hop else {}
    return Parallel(
        (keyword_leg(shape, query, mode=mode, filters=filters, with_doc_ids=with_doc_ids),
         vector_leg(shape, query, filters=filters, with_doc_ids=with_doc_ids)),
        together=Fetch(stmt, {**fparams, **query.params(), **hop}, "hybrid_legs", _both_legs,
                       ann=True))


def _both_legs(rows: Rows) -> tuple[LegResult, LegResult]:
    vector, keyword = hybrid_result(rows)
    return keyword, vector


def _vector_leg(rows: Rows) -> LegResult:
    return leg_result(rows, rank="vector_rank")


def _keyword_leg(rows: Rows) -> LegResult:
    return leg_result(rows, rank="fts_rank")


def neighbours(scope: q.Scope, *, direction: str, filters: SearchFilters,
               frontier: Sequence[tuple[str, str]], visited: Sequence[str],
               types: Sequence[str], qvec: Any, hop: int) -> Fetch:
    """One hop of graph expansion from the ``frontier`` (project, slug) pairs, answered as
    :class:`~kb_retriever.models.legs.Neighbour` s."""
    stmt, fparams = q.neighbours_sql(direction=direction, filters=filters)
    return Fetch(stmt, {**q.scope_params(scope), **fparams, "fp": [p for p, _ in frontier],
                        "fs": [s for _, s in frontier], "visited": list(visited), "qvec": qvec,
                        **_hop_params(types)}, f"graph_hop_{hop}", neighbours_from_rows)


def _hop_params(types: Sequence[str]) -> dict[str, Any]:
    """What a graph hop's SQL binds besides its frontier and the query vector, in its own read
    and read ahead by the candidates' statement alike: the edge types, the statuses a
    neighbour may have."""
    return {"types": list(types), "expandable": list(EXPANDABLE_STATUSES)}

