"""Row → frozen model conversion (rows are read by column name, never by position)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

import numpy as np

from ..errors import SchemaError
from ..models import Candidate, DocumentRef, construct
from ..models.legs import LegHit, LegResult, Neighbour
from .columns import DOCUMENT_FIELDS
from .fulltext import ENGINE

__all__ = ["candidate_from_row", "document_from_row", "hybrid_result", "leg_result",
           "neighbours_from_rows", "successor_map", "vector_array"]


def vector_array(value: Any, dtype: Any = np.float32) -> np.ndarray:
    """A ``vector`` column's value as a numpy array: pgvector-python returns ``Vector`` objects
    (0.4 and later) or numpy arrays (earlier), depending on the installed version."""
    to_numpy = getattr(value, "to_numpy", None)
    return np.asarray(to_numpy() if to_numpy is not None else value, dtype=dtype)


def document_from_row(row: Mapping[str, Any]) -> DocumentRef:
    """A row's document (the columns of :data:`~kb_retriever.store.columns.DOCUMENT_FIELDS`)."""
    values = {"id": int(row["doc_pk"])}
    for name, convert in DOCUMENT_FIELDS:
        values[name] = row[name] if convert is None else convert(row[name])
    return construct(DocumentRef, values)


def candidate_from_row(row: Mapping[str, Any]) -> Candidate:
    """A candidate row (chunk and document columns, the cosine, the BM25 inputs) as a
    :class:`Candidate`, its fusion fields unset."""
    sim = row.get("similarity")
    return construct(Candidate, {
        "chunk_id": int(row["chunk_id"]),
        "text": row["text"],
        "heading_path": row["heading_path"] or "",
        "chunk_order": int(row["chunk_order"]),
        "document": document_from_row(row),
        "vector_similarity": None if sim is None else float(sim),
        "metadata": MappingProxyType(_metadata(row["metadata"])),
        "lexeme_tf": _lexeme_tf(row),
        "lexeme_count": row.get("lexeme_count"),
        "chunk_uid": row.get("chunk_uid"),
    })


def _metadata(value: Any) -> dict[str, Any]:
    """A chunk's metadata: the JSON text the search statements send
    (``store.columns.CHUNK_COLUMNS``), or a mapping already decoded."""
    if isinstance(value, str):
        return json.loads(value)  # type: ignore[no-any-return]
    return dict(value or {})


def leg_result(rows: Sequence[Mapping[str, Any]], *, rank: str) -> LegResult:
    """A candidate leg's rows (``store.sql``'s ``_leg``) as a :class:`LegResult`, hits in rank
    order. Every row carries the leg's ``n_pre``; an empty leg returns one row of NULLs that
    carries only that (and the query's lexemes).

    >>> leg_result([{"n_pre": 3, "chunk_id": None}], rank="fts_rank")
    LegResult(hits=(), n_pre=3, query_lexemes=(), seed_neighbours=None)
    """
    if not rows:
        return LegResult((), 0)
    head = rows[0]
    _check_model(head)
    hits = [LegHit(r[rank], r.get("fts_score"), bool(r.get("mention")), candidate_from_row(r))
            for r in rows if r["chunk_id"] is not None]
    return LegResult(_in_rank_order(hits), int(head["n_pre"]),
                     tuple(head.get("query_lexemes") or ()))


def hybrid_result(rows: Sequence[Mapping[str, Any]]) -> tuple[LegResult, LegResult]:
    """The rows of both legs in one statement (``store.sql.hybrid_sql``) as the two legs'
    :class:`LegResult` s, vector first: a chunk that both found is one row, and one
    candidate in both."""
    if not rows:
        return LegResult((), 0), LegResult((), 0)
    head = rows[0]
    _check_model(head)
    vector: list[LegHit] = []
    keyword: list[LegHit] = []
    seeds = _seed_neighbours(head, rows)
    for r in rows:
        if r["chunk_id"] is None or r.get("edge_type") is not None:
            continue
        candidate = candidate_from_row(r)
        if r["vector_rank"] is not None or r["mention"]:
            vector.append(LegHit(r["vector_rank"], None, bool(r["mention"]), candidate))
        if r["fts_rank"] is not None:
            keyword.append(LegHit(r["fts_rank"], r["fts_score"], False, candidate))
    lexemes = tuple(head.get("query_lexemes") or ())
    return (LegResult(_in_rank_order(vector), int(head["n_pre_vector"]), lexemes, seeds),
            LegResult(_in_rank_order(keyword), int(head["n_pre_fts"])))


def _seed_neighbours(head: Mapping[str, Any], rows: Sequence[Mapping[str, Any]]
                     ) -> dict[tuple[str, str], tuple[Neighbour, ...]] | None:
    """The first hop from each seed the statement read it for (``seeds``: project and slug
    joined by chr(31)), from the neighbour rows (those with an ``edge_type``); None when it
    read none (no ``seeds`` column)."""
    if "seeds" not in head:
        return None
    found: dict[tuple[str, str], list[Neighbour]] = {}
    for seed in head["seeds"] or ():
        project, _, slug = seed.partition(chr(31))
        found[(project, slug)] = []
    for n in neighbours_from_rows([r for r in rows if r.get("edge_type") is not None]):
        found[(n.candidate.document.project_key, n.from_slug)].append(n)
    return {seed: tuple(ns) for seed, ns in found.items()}


def _check_model(head: Mapping[str, Any]) -> None:
    """A search over projects embedded with another model raises (the leg names them)."""
    if head.get("foreign_projects"):
        raise SchemaError(
            f"{', '.join(head['foreign_projects'])}: embedded with another model than this "
            "knowledge base's; open it with that embedder, or move the project with "
            "KnowledgeBase.reembed()")


def _in_rank_order(hits: list[LegHit]) -> tuple[LegHit, ...]:
    """Ranked hits by rank (1..n), then the @mentioned ones joined without a rank."""
    return tuple(sorted(hits, key=lambda h: (h.rank is None, h.rank or 0)))


def neighbours_from_rows(rows: Sequence[Mapping[str, Any]]) -> list[Neighbour]:
    """The rows of a graph hop (``store.graph_sql``) as :class:`Neighbour` s."""
    return [Neighbour(candidate_from_row(r), float(r["similarity"]), r["edge_type"],
                      float(r["edge_weight"]), r["from_slug"], r["direction"],
                      int(r.get("degree") or 0), int(r.get("links_out") or 0)) for r in rows]


def successor_map(rows: Sequence[Mapping[str, Any]]
                  ) -> dict[tuple[str, str], list[tuple[str, str]]]:
    """(project, successor) -> its predecessors, from ``store.catalog_sql.supersessions_sql`` rows.

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


def _lexeme_tf(row: Mapping[str, Any]) -> Mapping[str, int] | None:
    """The query lexemes' counts in the chunk (the ``tf`` evidence of candidate rows, read by
    the full-text engine), or None for rows without it.

    >>> dict(_lexeme_tf({"tf": "'cach':1A,4A 'redi':2A"}))
    {'cach': 2, 'redi': 1}
    """
    evidence = row.get("tf")
    if evidence is None:
        return None
    return MappingProxyType(ENGINE.term_counts(evidence))
