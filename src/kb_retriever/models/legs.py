"""What the store's search reads return: frozen records, never rows.

A candidate leg answers a :class:`LegResult`: its hits in rank order, each already a
:class:`~kb_retriever.models.Candidate` (the fusion fields unset), and how many matches it saw
before its threshold. Graph expansion reads :class:`Neighbour` s.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

from .results import Candidate

__all__ = ["LegHit", "LegResult", "Neighbour"]


class LegHit(NamedTuple):
    """One chunk a leg found: its rank in the leg (None for an @mentioned chunk that joins
    without one), the full-text score when the full-text leg found it, and the candidate."""

    rank: int | None
    score: float | None
    mention: bool
    candidate: Candidate


class Neighbour(NamedTuple):
    """A document one hop from the frontier: its chunk most similar to the query, and the
    strongest edge that leads to it."""

    candidate: Candidate
    similarity: float
    edge_type: str
    edge_weight: float
    from_slug: str
    direction: str
    degree: int = 0  # the neighbour's edges, either way: a central page has many
    links_out: int = 0  # the edges from the neighbour: a hub (an index) links to everything


class LegResult(NamedTuple):
    """A candidate leg's answer: its hits best first, the matches it saw before its
    threshold, the query's lexemes as the statement stemmed them (sorted), and, when the
    statement that read it also read graph expansion's first hop from the likeliest seeds
    (decision 0017), each of those seeds' neighbours by (project, slug)."""

    hits: tuple[LegHit, ...]
    n_pre: int
    query_lexemes: tuple[str, ...] = ()
    seed_neighbours: Mapping[tuple[str, str], tuple[Neighbour, ...]] | None = None
