"""Row → frozen model conversion (rows are read by column name, never by position)."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import numpy as np

from ..models import Candidate, DocumentRef, construct
from ..ranking.fusion import Fused
from .columns import DOCUMENT_FIELDS


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


def candidate_from_row(fused: Fused) -> Candidate:
    """A fused candidate row as a :class:`Candidate`."""
    row = fused.row
    sim = row.get("similarity")
    return construct(Candidate, {
        "chunk_id": int(row["chunk_id"]),
        "text": row["text"],
        "heading_path": row["heading_path"] or "",
        "chunk_order": int(row["chunk_order"]),
        "document": document_from_row(row),
        "vector_similarity": None if sim is None else float(sim),
        "vector_rank": fused.vector_rank,
        "fts_rank": fused.fts_rank,
        "fts_score": None if fused.fts_score is None else float(fused.fts_score),
        "fused_score": float(fused.score),
        "metadata": MappingProxyType(dict(row["metadata"] or {})),
        "lexeme_tf": _lexeme_tf(row),
        "lexeme_count": row.get("lexeme_count"),
        "chunk_uid": row.get("chunk_uid"),
    })


def _lexeme_tf(row: Mapping[str, Any]) -> Mapping[str, int] | None:
    """The query lexemes' counts in the chunk (``tf_lexemes``, ``tf_counts`` of candidate rows),
    or None for rows without them.

    >>> dict(_lexeme_tf({"tf_lexemes": ["cach", "redi"], "tf_counts": [2, 1]}))
    {'cach': 2, 'redi': 1}
    """
    lexemes = row.get("tf_lexemes")
    if lexemes is None:
        return None
    return MappingProxyType(dict(zip(lexemes, row["tf_counts"], strict=True)))
