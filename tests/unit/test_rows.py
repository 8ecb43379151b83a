"""Row conversions that must not depend on the installed pgvector-python version."""

from __future__ import annotations

import numpy as np

from kb_retriever.store.rows import vector_array


class _Vector:
    """Stands in for pgvector-python's ``Vector`` (0.4 and later load ``vector`` columns as
    ``Vector`` objects, which numpy cannot convert by itself)."""

    def __init__(self, values: list[float]) -> None:
        self._values = values

    def to_numpy(self) -> np.ndarray:
        return np.asarray(self._values, dtype=np.float32)


def test_vector_array_accepts_vector_objects_arrays_and_lists():
    for value in (_Vector([1.0, 2.0]), np.array([1.0, 2.0], dtype=np.float32), [1.0, 2.0]):
        out = vector_array(value)
        assert out.dtype == np.float32 and out.tolist() == [1.0, 2.0]
    assert vector_array(_Vector([0.5]), np.float64).dtype == np.float64


def test_vector_array_with_the_installed_pgvector():
    try:
        from pgvector import Vector  # 0.4 and later
    except ImportError:
        from pgvector.utils import Vector  # type: ignore[no-redef]  # 0.3
    assert vector_array(Vector([3.0, 4.0])).tolist() == [3.0, 4.0]


def _row(**over):
    row = {
        "doc_pk": 7, "tenant_id": "t", "project_key": "p", "doc_key": "k", "title": "T",
        "source_path": "a.md", "source_type": "markdown", "slug": "s", "doc_id": "D-1",
        "is_canonical": True, "canonical_type": "decision", "canonical_status": "accepted",
        "retrieval_priority": 80, "generation_source": "human", "evidence_tier": None,
        "tags": ["cache"], "summary": None, "language": "en", "doc_date": None,
        "chunk_id": 3, "text": "redis", "heading_path": None, "chunk_order": 0,
        "metadata": {"status_active": True}, "similarity": 0.5, "tf": "'redi':1A,4A",
        "lexeme_count": 9,
    }
    row.update(over)
    return row


def test_rows_build_the_same_models_as_their_constructors():
    """The row converters build models with models.construct (no __init__): the result must
    equal, hash and stay frozen like the dataclass built the ordinary way."""
    import dataclasses

    import pytest

    from kb_retriever.models import Candidate, DocumentRef
    from kb_retriever.store.rows import candidate_from_row

    cand = candidate_from_row(_row())
    doc = DocumentRef(7, "t", "p", "k", "T", "a.md", "markdown", "s", "D-1", True, "decision",
                      "accepted", 80, "human", None, ("cache",), None, "en", None)
    expected = Candidate(3, "redis", "", 0, doc, 0.5, None, None, None, 0.0,
                         cand.metadata, {"redi": 2}, 9)
    assert cand.document == doc and hash(cand.document) == hash(doc)
    assert cand == expected and dict(cand.metadata) == {"status_active": True}
    with pytest.raises(dataclasses.FrozenInstanceError):
        cand.document.title = "changed"  # type: ignore[misc]
    assert candidate_from_row(_row(tf=None)).lexeme_tf is None


def test_a_legs_rows_become_its_hits_in_rank_order():
    """An empty leg's one row of NULLs carries only its count; ranked hits come in rank order,
    then the @mentioned ones without a rank."""
    from kb_retriever.store.rows import leg_result

    empty = leg_result([{"n_pre": 4, "chunk_id": None, "query_lexemes": ["redi"]}],
                       rank="vector_rank")
    assert empty.hits == () and empty.n_pre == 4 and empty.query_lexemes == ("redi",)
    leg = leg_result([_row(chunk_id=5, vector_rank=2, n_pre=3),
                      _row(chunk_id=6, vector_rank=None, mention=True, n_pre=3),
                      _row(chunk_id=3, vector_rank=1, n_pre=3)], rank="vector_rank")
    assert [(h.rank, h.mention, h.candidate.chunk_id) for h in leg.hits] == [
        (1, False, 3), (2, False, 5), (None, True, 6)]


def test_construct_fills_defaults_and_rejects_unknown_or_missing_fields():
    import pytest

    from kb_retriever.models import Hit, Origin, ScoreBreakdown, construct

    s = construct(ScoreBreakdown, {"total": 1.0})
    assert s == ScoreBreakdown(total=1.0) and s.hop_decay is None
    h = construct(Hit, {"chunk_id": 1, "text": "x", "heading_path": "", "score": 1.0,
                        "scores": s, "origin": Origin.PRIMARY, "document": None})
    assert dict(h.metadata) == {} and h.chunk_order == 0  # default_factory and plain defaults
    with pytest.raises(TypeError, match="missing"):
        construct(Hit, {"chunk_id": 1})
    with pytest.raises(TypeError, match="totl"):
        construct(ScoreBreakdown, {"totl": 1.0})


def test_the_column_spec_is_the_models_fields():
    """The SELECT lists and the row readers come from store/columns.py: its document columns
    are DocumentRef's fields (the id read as doc_pk), its chunk columns Hit's chunk fields, so
    a field added to the model without its column fails here."""
    import dataclasses

    from kb_retriever.models import DocumentRef, Hit
    from kb_retriever.store.columns import CHUNK_FIELDS, DOCUMENT_FIELDS
    from kb_retriever.store.rows import document_from_row

    names = [name for name, _ in DOCUMENT_FIELDS]
    assert ["id", *names] == [f.name for f in dataclasses.fields(DocumentRef)]
    assert set(CHUNK_FIELDS) <= {f.name for f in dataclasses.fields(Hit)}
    doc = document_from_row(_row(is_canonical=1, retrieval_priority="80", tags=None))
    assert doc.is_canonical is True and doc.retrieval_priority == 80 and doc.tags == ()
