"""Small builders for ranking tests: documents, candidates, hits and env-independent settings."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from types import MappingProxyType
from typing import Any

from kb_retriever.models import Candidate, DocumentRef, Hit, Origin, ScoreBreakdown
from kb_retriever.settings import Settings

# The reference defaults, passed explicitly so that KB_* variables in the environment of the test
# run cannot change the numbers the tests assert.
RANKING_DEFAULTS: dict[str, Any] = {
    "reranking_enabled": True,
    "normalize_scores": True,
    "vector_weight": 0.55,
    "keyword_weight": 0.25,
    "keyword_scoring": "coverage",  # the reference keyword score (ours defaults to bm25)
    "heading_weight": 0.05,
    "tag_overlap_weight": 0.05,
    "preamble_weight": 0.05,
    "recency_weight": 0.02,
    "status_active_weight": 0.02,
    "mention_boost_weight": 0.50,
    "canonical_enabled": True,
    "priority_weight": 0.001,
    "superseded_penalty": 0.40,
    "deprecated_penalty": 0.40,
    "archived_penalty": 0.60,
    "auto_tier_penalty": 0.02,
    "max_chunks_per_doc": 3,
    "refusal_rule": "absolute",  # the reference's gate: no calibration
    "refusal_min_similarity": 0.45,
    "refusal_min_rerank_score": 0.25,
    "refusal_min_chunks": 1,
}

_SETTINGS_CACHE: dict[tuple[tuple[str, Any], ...], Settings] = {}


def make_settings(**overrides: Any) -> Settings:
    """Settings with the reference ranking defaults plus ``overrides`` (cached: it is frozen)."""
    key = tuple(sorted(overrides.items()))
    if key not in _SETTINGS_CACHE:
        _SETTINGS_CACHE[key] = Settings(**{**RANKING_DEFAULTS, **overrides})
    return _SETTINGS_CACHE[key]


def make_doc(doc_id: int = 1, **fields: Any) -> DocumentRef:
    """A document; canonical fields default to a non-canonical human doc."""
    base: dict[str, Any] = {
        "id": doc_id,
        "tenant_id": "default",
        "project_key": "default",
        "doc_key": f"doc-{doc_id}",
        "title": f"Document {doc_id}",
        "source_path": f"docs/doc-{doc_id}.md",
    }
    base.update(fields)
    return DocumentRef(**base)


def canonical_doc(doc_id: int = 1, status: str = "accepted", **fields: Any) -> DocumentRef:
    fields.setdefault("slug", f"doc-{doc_id}")
    fields.setdefault("canonical_type", "decision")
    return make_doc(doc_id, is_canonical=True, canonical_status=status, **fields)


def make_candidate(
    chunk_id: int,
    *,
    doc: DocumentRef | None = None,
    text: str = "",
    heading: str = "",
    sim: float | None = None,
    metadata: Mapping[str, Any] | None = None,
    **fields: Any,
) -> Candidate:
    """A candidate chunk; its document defaults to a fresh doc with ``id == chunk_id``."""
    return Candidate(
        chunk_id=chunk_id,
        text=text,
        heading_path=heading,
        chunk_order=fields.pop("chunk_order", 0),
        document=doc if doc is not None else make_doc(chunk_id),
        vector_similarity=sim,
        metadata=MappingProxyType(dict(metadata or {})),
        **fields,
    )


def make_hit(
    chunk_id: int,
    *,
    doc: DocumentRef | None = None,
    score: float = 0.5,
    text: str = "",
    heading: str = "",
    similarity: float | None = None,
    origin: Origin = Origin.PRIMARY,
    scores: ScoreBreakdown | None = None,
    **fields: Any,
) -> Hit:
    """A hit whose breakdown total equals ``score`` unless ``scores`` is given."""
    breakdown = scores if scores is not None else ScoreBreakdown(base=score, total=score)
    return Hit(
        chunk_id=chunk_id,
        text=text,
        heading_path=heading,
        score=score,
        scores=replace(breakdown, raw_similarity=similarity),
        origin=origin,
        document=doc if doc is not None else make_doc(chunk_id),
        similarity=similarity,
        **fields,
    )
