"""Graph expansion along ``kb_edges`` from the answer's document.

Fixes of reference §24.1–2: honours the hop count with a per-hop decay, walks outgoing,
incoming or both directions, caps *nodes* (not edges), shows each neighbour's chunk most
similar to the query, scores it, and applies the user's filters.

Relevance-gated (issue 27; decisions 0014, 0016, 0018 and 0021): the walk starts from one
seed, the first canonical document of the top (:func:`graph_seed`), whose links are the related
context of the answer; the tail of the top brought its own unrelated neighbours. A neighbour
enters on evidence that it bears on the question (its chunk's similarity reaches the adaptive
cutoff's floor, :class:`Floors`, lower when a passage of the top names it, unless it is a
runbook, standard or concept that a decision links to; or its title names two of the query's
words, or its chunk half of them) or on a strong edge (``KB_GRAPH_STRONG_EDGE_WEIGHT``) from a
seed that is not a hub. A hub (a project index, or a document that links out to
``KB_GRAPH_HUB_MIN_DEGREE`` others) is never a neighbour; a central page (that many edges either
way) enters only on a strong edge. Each seed brings at most ``KB_GRAPH_EXPANSION_MAX_PER_SEED``
neighbours. The first hop also tells which documents of the top the seed links to
(:class:`Expansion`), for the adaptive cutoff.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Callable, Collection, Generator, Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from ..models import Hit, Origin, ScoreBreakdown
from ..models.legs import Neighbour
from ..ranking.text import tokenize_query, words
from ..settings import Settings
from ..store import reads
from ..store.reads import Fetch
from ..vocabulary import DECISION, PROJECT_INDEX, REFERENCE_TYPES, is_rejected_approach
from .plan import SearchRequest

_SEP = chr(31)  # unit separator: joins (project, slug) into one visited key, as the SQL does
_WIKILINK = re.compile(r"\[\[\s*([^\[\]|#]+?)\s*(?:[|#][^\[\]]*)?\]\]")


class Floors(NamedTuple):
    """The similarity a neighbour needs without a strong edge (None: none): ``cited`` when a
    chunk of the top links to it inline (``[[slug]]``: a passage the prompt shows names it),
    ``other`` otherwise (decision 0018). A ``reference`` (a runbook, standard or concept that
    a decision links to) needs ``other`` even when cited: a decision names its references
    inline as a matter of writing, not because they bear on the question (decision 0021)."""

    other: float | None
    cited: float | None

    def of(self, slug: str | None, cited: Collection[str], *, reference: bool = False
           ) -> float | None:
        return self.cited if slug in cited and not reference else self.other


NO_FLOORS = Floors(None, None)


class Expansion(NamedTuple):
    """What graph expansion found: the related hits, and the documents of the top that the
    seed links to (by an edge of the expansion's types and direction), which the adaptive
    cutoff holds to its lower, linked ratio (decision 0016), a decision's references aside
    (decision 0021)."""

    hits: list[Hit]
    linked: frozenset[int]


def graph_seed(top: Sequence[Hit]) -> Hit | None:
    """The document graph expansion starts from: the first canonical document with a slug
    (the answer's document; decision 0016) that is neither a project index (navigation) nor
    a rejected approach (a warning), else the first canonical one."""
    seeds = [h for h in top if h.document.is_canonical and h.document.slug]
    return next((h for h in seeds if h.document.canonical_type != PROJECT_INDEX
                 and not is_rejected_approach(h.document)), seeds[0] if seeds else None)


def expand_graph(top: Sequence[Hit], seed: Hit | None, req: SearchRequest, settings: Settings,
                 qvec: Any, *, staying: Callable[[frozenset[int]], Collection[int]],
                 floors: Floors = NO_FLOORS,
                 read_ahead: Mapping[tuple[str, str], Sequence[Neighbour]] | None = None
                 ) -> Generator[Fetch, Any, Expansion]:
    """Yield one fetch per hop from ``seed``; return the expanded hits, ordered by score (at
    most max_nodes), and the documents of ``top`` that the seed links to. ``staying``: given
    those, the ids of the documents that stay in primary (the adaptive cutoff), which are
    never neighbours; a document of ``top`` that the cutoff moves out may come back as one.
    ``floors``: the similarity a neighbour needs without a strong edge.
    ``read_ahead``: the first hop from some documents, read with the candidates (decision
    0017): the seed's, when it is one of them, needs no fetch."""
    types = list(settings.graph_expansion_edge_types)
    if seed is None or not types:
        return Expansion([], frozenset())
    top_docs = {h.document.id for h in top}
    primary_docs: Collection[int] = top_docs  # never neighbours: what stays in primary
    project, slug = seed.document.project_key, seed.document.slug or ""
    # the seed's own links to the other top documents come back on the first hop
    visited = {f"{project}{_SEP}{slug}"}
    hubs: set[str | None] = {slug} if seed.document.canonical_type == PROJECT_INDEX else set()
    kinds = {slug: seed.document.canonical_type}  # the walk's documents' types, by slug
    frontier: list[tuple[str, str]] = [(project, slug)]
    out: list[Hit] = []
    linked: frozenset[int] = frozenset()
    # the links of the seed's project's passages (a slug names a document in its project)
    cited = cited_slugs(h.text for h in top if h.document.project_key == project)
    for hop in range(1, settings.graph_expansion_hops + 1):
        if not frontier or len(out) >= settings.graph_expansion_max_nodes:
            break
        found: Sequence[Neighbour]
        if hop == 1 and read_ahead is not None and (project, slug) in read_ahead:
            found = read_ahead[(project, slug)]
        else:
            found = yield reads.neighbours(
                req.scope, direction=settings.graph_expansion_direction, filters=req.filters,
                frontier=frontier, visited=sorted(visited), types=types, qvec=qvec, hop=hop)
        if hop == 1:
            linked = frozenset(n.candidate.document.id for n in found
                               if n.candidate.document.id in top_docs
                               and not _is_reference(n, kinds))
            primary_docs = staying(linked)
            visited |= {f"{h.document.project_key}{_SEP}{h.document.slug}"
                        for h in top if h.document.slug}
        decay = settings.graph_hop_decay ** (hop - 1)
        fan_out = Counter(n.from_slug for n in found)
        hubs |= {s for s, n in fan_out.items() if n >= settings.graph_hub_min_degree}
        hop_hits = [_graph_hit(n, hop, decay) for n in found
                    if n.candidate.document.id not in primary_docs
                    and _admitted(n, req.query, settings, hubs, floors.of(
                        n.candidate.document.slug, cited, reference=_is_reference(n, kinds)))]
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
        kinds |= {h.document.slug or "": h.document.canonical_type for h in hop_hits}
        visited |= {f"{p}{_SEP}{s}" for p, s in frontier}
    return Expansion(out, linked)


def _admitted(n: Neighbour, query: str, settings: Settings, hubs: set[str | None],
              min_similarity: float | None) -> bool:
    """Whether a neighbour may stand in the related block (module docstring)."""
    doc = n.candidate.document
    many = settings.graph_hub_min_degree
    if doc.canonical_type == PROJECT_INDEX or n.links_out >= many:
        return False  # a hub: it links to everything
    if n.edge_weight >= settings.graph_strong_edge_weight and n.from_slug not in hubs:
        return True
    if n.degree >= many:
        return False  # a central page: a generic link to it says nothing (decision 0014)
    if min_similarity is None or n.similarity >= min_similarity:
        return True
    return names_topic(query, doc.title or "", n.candidate.text)


def _is_reference(n: Neighbour, kinds: Mapping[str, str | None]) -> bool:
    """Whether ``n`` is a reference of the decision it is linked from: a runbook, standard or
    concept (:data:`~kb_retriever.vocabulary.REFERENCE_TYPES`)."""
    return (kinds.get(n.from_slug or "") == DECISION
            and n.candidate.document.canonical_type in REFERENCE_TYPES)


def cited_slugs(texts: Iterable[str]) -> frozenset[str]:
    """The slugs that ``[[slug]]`` links in ``texts`` name (an alias or a heading after ``|``
    or ``#`` aside), in Unicode's composed form, as slugs are stored.

    >>> sorted(cited_slugs(["Por ID ([[dc-id-paciente]]) y [[mod-portal|el portal]]."]))
    ['dc-id-paciente', 'mod-portal']
    >>> cited_slugs(["[[rozhodnuti\u0301-pacs]]"]) == {"rozhodnutí-pacs"}  # a combining accent
    True
    """
    return frozenset(unicodedata.normalize("NFC", m.group(1))
                     for text in texts for m in _WIKILINK.finditer(text))


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
