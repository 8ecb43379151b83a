"""Graph expansion along ``kb_edges`` from the canonical documents in the primary top-k.

Fixes of reference §24.1–2: honours the hop count with a per-hop decay, walks outgoing,
incoming or both directions, caps *nodes* (not edges), shows each neighbour's chunk most
similar to the query, scores it, and applies the user's filters.

Relevance-gated (issue 27; decision 0014): a neighbour enters on evidence that it bears on the
question (its chunk's similarity reaches ``min_similarity``, the adaptive cutoff's floor, or
its title names two of the query's words, or its chunk half of them) or on
a strong edge (``KB_GRAPH_STRONG_EDGE_WEIGHT``) from a seed that is not a hub; a hub (a project
index, or ``KB_GRAPH_HUB_MIN_DEGREE`` edges) is never a neighbour. Each seed brings at most
``KB_GRAPH_EXPANSION_MAX_PER_SEED`` neighbours.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Generator, Sequence
from typing import Any

from ..models import Hit, Origin, ScoreBreakdown
from ..models.legs import Neighbour
from ..ranking.text import tokenize_query, words
from ..settings import Settings
from ..store import reads
from ..store.reads import Fetch
from ..vocabulary import PROJECT_INDEX
from .plan import SearchRequest

_SEP = chr(31)  # unit separator: joins (project, slug) into one visited key, as the SQL does


def expand_graph(primary: Sequence[Hit], req: SearchRequest, settings: Settings,
                 qvec: Any, min_similarity: float | None = None
                 ) -> Generator[Fetch, Any, list[Hit]]:
    """Yield one fetch per hop; return expanded hits ordered by score (at most max_nodes).
    ``min_similarity``: the evidence a neighbour needs without a strong edge (None: none)."""
    # canonical documents of the primary list, in rank order, once each
    seeds = list(dict.fromkeys(
        (h.document.project_key, h.document.slug) for h in primary
        if h.document.is_canonical and h.document.slug
    ))
    types = list(settings.graph_expansion_edge_types)
    if not seeds or not types:
        return []
    primary_docs = {h.document.id for h in primary}
    # every primary document with a slug (the seeds included) is never a neighbour
    visited = {f"{h.document.project_key}{_SEP}{h.document.slug}" for h in primary if h.document.slug}
    hubs = {h.document.slug for h in primary if h.document.canonical_type == PROJECT_INDEX}
    frontier: list[tuple[str, str]] = [(p, s or "") for p, s in seeds]
    out: list[Hit] = []
    for hop in range(1, settings.graph_expansion_hops + 1):
        if not frontier or len(out) >= settings.graph_expansion_max_nodes:
            break
        found: list[Neighbour] = yield reads.neighbours(
            req.scope, direction=settings.graph_expansion_direction, filters=req.filters,
            frontier=frontier, visited=sorted(visited), types=types, qvec=qvec, hop=hop)
        decay = settings.graph_hop_decay ** (hop - 1)
        fan_out = Counter(n.from_slug for n in found)
        hubs |= {slug for slug, n in fan_out.items() if n >= settings.graph_hub_min_degree}
        hop_hits = [_graph_hit(n, hop, decay) for n in found
                    if n.candidate.document.id not in primary_docs
                    and _admitted(n, req.query, settings, hubs, min_similarity)]
        hop_hits.sort(key=lambda h: (-h.score, h.chunk_id))
        per_seed: dict[str | None, int] = {}
        capped = []
        for h in hop_hits:
            if per_seed.get(h.from_slug, 0) < settings.graph_expansion_max_per_seed:
                per_seed[h.from_slug] = per_seed.get(h.from_slug, 0) + 1
                capped.append(h)
        room = settings.graph_expansion_max_nodes - len(out)
        hop_hits = capped[:room]
        out.extend(hop_hits)
        frontier = [(h.document.project_key, h.document.slug or "") for h in hop_hits]
        visited |= {f"{p}{_SEP}{s}" for p, s in frontier}
    return out


def _admitted(n: Neighbour, query: str, settings: Settings, hubs: set[str | None],
              min_similarity: float | None) -> bool:
    """Whether a neighbour may stand in the related block (module docstring)."""
    doc = n.candidate.document
    if doc.canonical_type == PROJECT_INDEX or n.degree >= settings.graph_hub_min_degree:
        return False
    if n.edge_weight >= settings.graph_strong_edge_weight and n.from_slug not in hubs:
        return True
    if min_similarity is None or n.similarity >= min_similarity:
        return True
    return names_topic(query, doc.title or "", n.candidate.text)


def names_topic(query: str, title: str, text: str) -> bool:
    """Lexical evidence that a document bears on the question: two of the query's distinct
    words (stop words aside) in its title, or half of them in the chunk.

    >>> names_topic("Con quale servizio inviamo oggi le notifiche push?",
    ...             "Servizio notifiche", "Il servizio invia le notifiche agli utenti.")
    True
    >>> names_topic("Which table format do we use?", "Dagster backfills", "Backfill a partition.")
    False
    """
    wanted = set(tokenize_query(query))
    if not wanted:
        return False
    return (len(wanted & set(words(title))) >= 2
            or len(wanted & set(words(text))) >= 0.5 * len(wanted))


def _graph_hit(n: Neighbour, hop: int, decay: float) -> Hit:
    c = n.candidate
    # similarity to the query x edge strength x hop decay: comparable across neighbours, and
    # never presented as a primary relevance score.
    score = n.similarity * n.edge_weight * decay
    return Hit(
        chunk_id=c.chunk_id, text=c.text, heading_path=c.heading_path, score=score,
        scores=ScoreBreakdown(total=score, raw_similarity=n.similarity, hop_decay=decay),
        origin=Origin.GRAPH_EXPANSION, document=c.document, chunk_order=c.chunk_order,
        similarity=n.similarity, edge_type=n.edge_type, from_slug=n.from_slug, hop=hop,
        metadata={"edge_weight": n.edge_weight, "direction": n.direction},
        chunk_uid=c.chunk_uid,
    )
