"""Searches by embedding alone and per-search leg choices (``kb_retriever.search.modes.Legs``):
what the adapters' vector-store modes run on."""

from __future__ import annotations

import asyncio

import pytest

from kb_retriever import ConfigError, EmbeddingError, InputError
from kb_retriever.search.modes import Legs

pytestmark = pytest.mark.db

TEXTS = {
    "redis": "Redis cluster is the shared cache layer for the API.",
    "kafka": "Kafka is the event queue; topics keep seven days of events.",
    "lunch": "Lunch is at noon near the shared kitchen.",
    "deploy": "Deploys freeze on Fridays after noon.",
}


@pytest.fixture
def kb(make_kb):
    kb = make_kb()
    kb.add_documents([{"text": t, "id": i} for i, t in TEXTS.items()])
    return kb


def _ids(result):
    return [h.document.source_path for h in result.primary]


@pytest.mark.parametrize("query", [None, "", "   "])
def test_a_search_by_embedding_alone_runs_the_vector_leg(kb, query):
    vec = kb.embedder.embed_query("shared cache layer redis")
    result = kb.search(query, query_embedding=vec, limit=4,
                       legs=Legs(min_similarity=-1.0, context_cutoff=0))
    assert _ids(result)[0] == "redis"
    assert len({*_ids(result)}) == 4  # no floor: every document, however far
    assert result.meta.search_strategy.fts_enabled is False
    assert all(h.scores.to_dict().get("keyword", 0.0) == 0.0 for h in result.primary)
    again = asyncio.run(kb.asearch(query, query_embedding=vec, limit=4,
                                   legs=Legs(min_similarity=-1.0, context_cutoff=0)))
    assert _ids(again) == _ids(result)


def test_text_is_still_required_without_an_embedding(kb):
    for query in (None, "", "  "):
        with pytest.raises(InputError):
            kb.search(query)


def test_the_floor_is_a_per_search_choice(kb):
    vec = kb.embedder.embed_query("shared cache layer redis")
    floored = kb.search(None, query_embedding=vec, limit=4, legs=Legs(min_similarity=0.99))
    assert _ids(floored) == []
    assert len(_ids(kb.search(None, query_embedding=vec, limit=4,
                              legs=Legs(min_similarity=-1.0, context_cutoff=0)))) == 4


def test_text_weight_zero_runs_the_vector_leg_only(kb):
    result = kb.search("kafka event queue", limit=4, legs=Legs(text_weight=0.0,
                                                               min_similarity=-1.0,
                                                               context_cutoff=0))
    assert result.meta.search_strategy.fts_enabled is False
    assert len(_ids(result)) == 4  # the vector leg's neighbours, not only the text's matches


def test_vector_weight_zero_keeps_the_full_text_matches_only(kb):
    result = kb.search("kafka topics", limit=4, legs=Legs(vector_weight=0.0, text_weight=1.0,
                                                          min_similarity=-1.0))
    assert _ids(result) == ["kafka"]
    with pytest.raises(InputError, match="needs query text"):
        kb.search(None, query_embedding=kb.embedder.embed_query("x"),
                  legs=Legs(vector_weight=0.0))


def test_bad_legs_are_config_errors(kb):
    for bad in ({"vector_weight": -1}, {"text_weight": float("nan")},
                {"vector_weight": 0, "text_weight": 0}, {"min_similarity": 2},
                {"vector_weight": True}, {"context_cutoff": 1.5}):
        with pytest.raises(ConfigError):
            Legs(**bad)
    with pytest.raises(ConfigError, match="Legs"):
        kb.search("cache", legs={"text_weight": 0})  # type: ignore[arg-type]


def test_a_text_weight_of_zero_in_the_settings_runs_the_vector_leg_only(make_kb):
    """``KB_HYBRID_FTS_WEIGHT=0`` still ran the full-text leg: its matches joined the pool
    with a fused score of 0 (picked by chunk id), and the rerank's word match could put them
    first; as ``Legs(text_weight=0)``, it adds no candidates."""
    from kb_retriever import Settings

    kb = make_kb(settings=Settings(hybrid_fts_weight=0.0, default_min_similarity=-1.0,
                                   context_cutoff=0))
    kb.add_documents([{"text": t, "id": i} for i, t in TEXTS.items()])
    result = kb.search("kafka event queue", limit=4)
    assert result.meta.search_strategy.fts_enabled is False
    legs = kb.search("kafka event queue", limit=4, legs=Legs(text_weight=0.0))
    assert _ids(result) == _ids(legs)


def test_a_query_vector_that_is_zero_in_float32_is_an_embedding_error(kb):
    """1e-50 is not 0 in float64, which the check used, and is 0 in the float32 the vector is
    sent as: pgvector's cosine with a zero vector is NaN, and every row passed the floor."""
    tiny = [1e-50] * kb.embedder.dimension
    with pytest.raises(EmbeddingError, match="zero"):  # as any bad query_embedding
        kb.search(None, query_embedding=tiny)


def test_vector_weight_zero_is_full_text_only_whatever_the_settings(make_kb):
    """With hybrid search off (or the settings' full-text weight 0), ``Legs(vector_weight=0)``
    ran the vector leg alone at weight 0: pure vector hits (every fused score 0) for a request
    of full-text matches only. Both legs weighed 0 is an error, as in the settings."""
    from kb_retriever import Settings

    for settings in (Settings(hybrid_search_enabled=False, default_min_similarity=-1.0),
                     Settings(hybrid_fts_weight=0.0, default_min_similarity=-1.0)):
        kb = make_kb(settings=settings)
        kb.add_documents([{"text": t, "id": i} for i, t in TEXTS.items()])
        if settings.hybrid_fts_weight == 0:
            with pytest.raises(InputError, match="both"):
                kb.search("kafka topics", legs=Legs(vector_weight=0.0))
            assert _ids(kb.search("kafka topics", limit=4, legs=Legs(
                vector_weight=0.0, text_weight=1.0))) == ["kafka"]
        else:
            result = kb.search("kafka topics", limit=4, legs=Legs(vector_weight=0.0))
            assert result.meta.search_strategy.fts_enabled is True
            assert _ids(result) == ["kafka"]


def test_meta_names_the_ranking_the_search_used(kb):
    """A search by embedding alone, or of stop words only, is ranked by its fused scores (the
    rerank has no words to weigh), but meta said "rerank_weighted_sum"."""
    vec = kb.embedder.embed_query("shared cache layer redis")
    alone = kb.search(None, query_embedding=vec, limit=2)
    assert alone.meta.search_strategy.fusion_method == "semantic_only"
    assert kb.search("redis cache", limit=2).meta.search_strategy.fusion_method == \
        "rerank_weighted_sum"
