"""kb_retriever.interop: the one converter between framework documents and ours (pure)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

import pytest

from kb_retriever.interop import (
    DEFAULT_TOP_N,
    ForeignDocument,
    document_ref,
    hit_metadata,
    rerank_documents,
    reranked_metadata,
    result_from_documents,
    to_candidates,
)
from kb_retriever.models import Origin
from kb_retriever.settings import Settings

from .factories import canonical_doc, make_hit, make_settings

NOW = datetime(2026, 6, 1, tzinfo=UTC)
QUERY = "which session store do we use?"
CANONICAL = {"canonical_type": "decision", "canonical_status": "accepted", "slug": "dec-s",
             "retrieval_priority": 80, "is_canonical": True, "title": "Sessions"}


@pytest.mark.parametrize("metadata", [
    CANONICAL,  # a user's loader: top level
    {"kb": {"document": CANONICAL}},  # our LangChain and LlamaIndex documents
    {"kb_document": CANONICAL},  # the LlamaIndex vector store's earlier nodes
])
def test_canonical_fields_are_read_wherever_our_adapters_put_them(metadata):
    ref = document_ref(ForeignDocument("text", metadata), 3)
    assert (ref.id, ref.slug, ref.canonical_type, ref.canonical_status, ref.retrieval_priority,
            ref.is_canonical, ref.title) == (3, "dec-s", "decision", "accepted", 80, True,
                                            "Sessions")


def test_top_level_wins_and_defaults_are_one_choice_each():
    meta = {"slug": "mine", "kb": {"document": {"slug": "ours", "canonical_status": "draft"}}}
    ref = document_ref(ForeignDocument("t", meta), 1)
    assert ref.slug == "mine" and ref.canonical_status == "draft" and ref.is_canonical
    bare = document_ref(ForeignDocument("t", {}, id="n1"), 2, position=5)
    assert (bare.tenant_id, bare.project_key, bare.source_type, bare.retrieval_priority,
            bare.generation_source, bare.is_canonical) == (
        "default", "default", "text", 50, "human", False)
    assert bare.doc_key == bare.title == "n1"
    assert document_ref(ForeignDocument("t", {}), 2, position=5).doc_key == "5"
    # string values from JSON stores; an explicit false flag beats a type
    strings = document_ref(ForeignDocument("t", {"is_canonical": "false", "canonical_type":
                                                 "decision", "retrieval_priority": "90",
                                                 "tags": "a, b", "file_path": "x/y.md"}), 1)
    assert not strings.is_canonical and strings.retrieval_priority == 90
    assert strings.tags == ("a", "b") and strings.source_path == "x/y.md"
    assert strings.doc_key == "y"


def test_similarity_is_the_cosine_when_known_else_the_retrieval_score():
    assert ForeignDocument("t", {"similarity": "0.4", "score": 0.9}).similarity == 0.4
    ours = {"score": 0.9, "relevance_score": 0.9, "kb": {"similarity": 0.3}}
    assert ForeignDocument("t", ours).similarity == 0.3  # a final score is no cosine
    assert ForeignDocument("t", {"relevance_score": 0.7, "score": 0.2}).similarity == 0.7
    assert ForeignDocument("t", {"score": 0.2}, score=0.6).similarity == 0.6
    assert ForeignDocument("t", {}).similarity is None


def test_candidates_keep_the_input_order_group_documents_and_take_given_cosines():
    items = [ForeignDocument("a", {"source": "a.md"}), ForeignDocument("b", {"slug": "b"}),
             ForeignDocument("c", {"source": "a.md"}), ForeignDocument("d", {}, source_id="S"),
             ForeignDocument("e", {"source": "e.md"}, source_id="S"), ForeignDocument("f", {})]
    cands = to_candidates(items, rrf_k=60, similarities={5: 0.5})
    assert [c.chunk_id for c in cands] == list(range(6))
    assert [c.fused_score for c in cands] == sorted((c.fused_score for c in cands), reverse=True)
    ids = [c.document.id for c in cands]
    assert ids[0] == ids[2] and ids[3] == ids[4] and len(set(ids)) == 4
    assert [c.vector_similarity for c in cands] == [0.0] * 5 + [0.5]


def _sessions() -> list[ForeignDocument]:
    canonical = {"is_canonical": True, "canonical_type": "decision", "retrieval_priority": 80}
    return [
        ForeignDocument("Sessions live in the Postgres user_sessions table.",
                        {"source": "v1.md", "canonical_status": "superseded", **canonical},
                        score=0.90),
        ForeignDocument("Sessions live in the Redis session store.",
                        {"source": "v2.md", "canonical_status": "accepted", **canonical},
                        score=0.85),
        ForeignDocument("Random notes about lunch.", {"source": "notes.md"}, score=0.10),
    ]


def test_rerank_documents_applies_the_trust_gradient_and_the_caps():
    items = _sessions()
    hits = rerank_documents(QUERY, items, Settings(), now=NOW)
    assert [h.chunk_id for h in hits][:2] == [1, 0]  # the superseded one sinks
    assert hits[1].scores.canonical_penalty > 0 and hits[0].scores.canonical_boost > 0
    assert len(rerank_documents(QUERY, items, Settings(), top_n=1)) == 1
    assert len(rerank_documents(QUERY, items, Settings(), top_n=None)) == 3
    same = [ForeignDocument(f"session store {i}", {"source": "a.md"}) for i in range(3)]
    capped = rerank_documents(QUERY, [*same, items[2]], Settings(), top_n=2, max_per_doc=1)
    assert sorted(h.chunk_id for h in capped) == [0, 3]
    assert rerank_documents(QUERY, [], Settings()) == []
    assert DEFAULT_TOP_N == Settings.model_fields["default_limit"].default
    off = make_settings(reranking_enabled=False, canonical_enabled=False)
    assert [h.chunk_id for h in rerank_documents(QUERY, items, off)] == [0, 1, 2]


def test_our_hits_round_trip_through_the_one_metadata_shape():
    doc = canonical_doc(4, "superseded", slug="dec-cache", title="Cache",
                        retrieval_priority=70, tags=("cache",))
    hit = replace(make_hit(9, doc=doc, similarity=0.42, origin=Origin.GRAPH_EXPANSION,
                           text="We use Redis."), edge_type="implements", from_slug="seed",
                  hop=1, chunk_uid="u9")
    meta = hit_metadata(hit)
    assert {k: meta[k] for k in ("title", "slug", "canonical_status")} == {
        "title": "Cache", "slug": "dec-cache", "canonical_status": "superseded"}
    assert meta["kb"]["scores"] == hit.scores.to_dict()
    item = ForeignDocument(hit.text, meta, score=hit.score)
    back = document_ref(item, 4)
    for name in ("slug", "title", "source_path", "doc_key", "is_canonical", "canonical_type",
                 "canonical_status", "retrieval_priority", "tags", "project_key"):
        assert getattr(back, name) == getattr(doc, name), name
    assert item.similarity == 0.42
    result = result_from_documents([item], "q")
    (again,) = result.expanded
    assert (again.chunk_id, again.edge_type, again.from_slug, again.hop, again.chunk_uid,
            again.similarity) == (9, "implements", "seed", 1, "u9", 0.42)


def test_result_groups_by_origin_and_keeps_runner_ups_as_context():
    def item(origin: str | None) -> ForeignDocument:
        return ForeignDocument(origin or "plain", {"kb": {"origin": origin}} if origin else {})

    result = result_from_documents([item("rejected"), item(None), item("runner_up"),
                                    item("primary"), item("bogus")], "q")
    assert [h.text for h in result.primary] == ["plain", "runner_up", "primary", "bogus"]
    assert [h.text for h in result.rejected] == ["rejected"] and result.query == "q"


def test_reranked_metadata_keeps_every_key_and_an_earlier_record():
    hit = rerank_documents(QUERY, _sessions()[:1], Settings(), now=NOW)[0]
    before = {"source": "v1.md", "kb": {"origin": "primary"}}
    after = reranked_metadata(before, hit, rank=1, retrieval_score=0.9)
    assert before == {"source": "v1.md", "kb": {"origin": "primary"}}  # not mutated
    assert after["source"] == "v1.md" and after["kb"]["origin"] == "primary"
    assert after["kb"]["rerank_rank"] == 1 and after["kb"]["retrieval_score"] == 0.9
    assert after["kb"]["scores"]["total"] == pytest.approx(hit.score, abs=1e-6)


def test_metadata_from_dataframes_and_other_scales_is_read_not_crashed_on():
    """A NumPy array in metadata (pandas, Parquet) raised "truth value of an array is
    ambiguous"; a ``retrieval_priority`` of another scale (100000) outranked every document;
    a ``date`` was read as no date; NumPy similarities left float32 scores that JSON refuses;
    two projects' ``README.md`` were one document under the per-document cap."""
    import json
    from datetime import date

    import numpy as np

    from kb_retriever.interop.coerce import as_date
    from kb_retriever.interop.documents import document_numbers

    arrays = ForeignDocument("text", {"source": "a.md", "tags": np.array(["x", "y"]),
                                      "title": np.array(["T"])})
    assert document_ref(arrays, 1).tags == ("x", "y")
    loud = ForeignDocument("t", {"source": "b.md", "type": "decision", "status": "accepted",
                                 "retrieval_priority": 100000})
    assert document_ref(loud, 1).retrieval_priority == 50
    assert as_date(date(2026, 1, 2)) == datetime(2026, 1, 2)
    assert as_date(np.datetime64("2026-01-02")) == datetime(2026, 1, 2)
    hits = rerank_documents("q", [ForeignDocument("t", {"source": "c.md"})], Settings(),
                            similarities={0: np.float32(0.5)})
    json.dumps([hit_metadata(h) for h in hits])
    readmes = [ForeignDocument("t", {"source": "README.md", "project_key": p})
               for p in ("payments", "search", "payments")]
    assert document_numbers(readmes) == [1, 2, 1]
