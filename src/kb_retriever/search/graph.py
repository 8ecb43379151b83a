"""Graph expansion along ``kb_edges`` from the canonical documents in the primary top-k.

Fixes of reference §24.1–2: honours the hop count with a per-hop decay, walks outgoing,
incoming or both directions, caps *nodes* (not edges), shows each neighbour's chunk most
similar to the query, scores it, and applies the user's filters.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from typing import Any

from ..models import Hit, Origin, ScoreBreakdown
from ..settings import Settings
from ..store import sql as q
from ..store.rows import document_from_row
from .plan import Fetch, SearchRequest

_SEP = chr(31)  # unit separator: joins (project, slug) into one visited key, as the SQL does


def expand_graph(primary: Sequence[Hit], req: SearchRequest, settings: Settings,
                 qvec: Any) -> Generator[Fetch, Any, list[Hit]]:
    """Yield one fetch per hop; return expanded hits ordered by score (at most max_nodes)."""
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
    frontier: list[tuple[str, str]] = [(p, s or "") for p, s in seeds]
    out: list[Hit] = []
    query, fparams = q.neighbours_sql(direction=settings.graph_expansion_direction,
                                      filters=req.filters)
    for hop in range(1, settings.graph_expansion_hops + 1):
        if not frontier or len(out) >= settings.graph_expansion_max_nodes:
            break
        rows = yield Fetch(
            query,
            {**q.scope_params(req.scope), **fparams, "fp": [p for p, _ in frontier],
             "fs": [s for _, s in frontier], "visited": sorted(visited), "types": types,
             "qvec": qvec},
            f"graph_hop_{hop}",
        )
        decay = settings.graph_hop_decay ** (hop - 1)
        hop_hits = []
        for row in rows:
            if int(row["doc_pk"]) in primary_docs:
                continue
            hop_hits.append(_graph_hit(row, hop, decay))
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


def _graph_hit(row: dict[str, Any], hop: int, decay: float) -> Hit:
    sim = float(row["similarity"])
    weight = float(row["edge_weight"])
    # similarity to the query x edge strength x hop decay: comparable across neighbours, and
    # never presented as a primary relevance score.
    score = sim * weight * decay
    return Hit(
        chunk_id=int(row["chunk_id"]), text=row["text"], heading_path=row["heading_path"] or "",
        score=score,
        scores=ScoreBreakdown(total=score, raw_similarity=sim, hop_decay=decay),
        origin=Origin.GRAPH_EXPANSION, document=document_from_row(row),
        chunk_order=int(row["chunk_order"]), similarity=sim, edge_type=row["edge_type"],
        from_slug=row["from_slug"], hop=hop,
        metadata={"edge_weight": weight, "direction": row["direction"]},
        chunk_uid=row.get("chunk_uid"),
    )
