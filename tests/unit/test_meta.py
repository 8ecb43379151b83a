"""``SearchMeta``: a typed record that reads as the JSON mapping DESIGN.md fixes."""

from __future__ import annotations

import json

from kb_retriever.search.meta import RetrievalStats, SearchMeta, SearchStrategy, Stopwatch

KEYS = ["primary_count", "expanded_count", "rejected_count", "runner_up_count", "project_key",
        "filters_selected", "projects", "tenant", "retrieval_ms", "timings_ms", "search_strategy",
        "retrieval_stats", "should_refuse", "calibration", "history_promoted",
        "rejected_evidence", "lexeme_stats"]


def _meta(projects=("p",)) -> SearchMeta:
    return SearchMeta(
        primary_count=2, expanded_count=1, rejected_count=0, runner_up_count=3,
        projects=projects, tenant="t", retrieval_ms=4.5, timings_ms={"embed": 1.25},
        search_strategy=SearchStrategy(fts_enabled=True, fusion_method="rerank_weighted_sum",
                                       fts_query_mode="or", graph_expansion_enabled=True,
                                       rejected_injection_enabled=True, filters_applied=1,
                                       synonym_phrases=("pto",)),
        retrieval_stats=RetrievalStats(10, 8, 0.4, 0.9), should_refuse=False, calibrated=True,
        null_ceiling=0.123456)


def test_meta_is_typed_and_reads_as_its_json_mapping():
    meta = _meta()
    assert meta.should_refuse is False and meta["should_refuse"] is False
    assert list(meta) == KEYS and len(meta) == len(KEYS)
    assert meta["project_key"] == "p" and meta.project_key == "p"
    assert meta["search_strategy"]["synonym_phrases"] == ["pto"]
    assert meta["search_strategy"]["candidate_fusion"] == "rrf"
    assert meta["calibration"] == {"calibrated": True, "null_ceiling": 0.1235,
                                   "warning_ceiling": 0.1235}
    assert meta["filters_selected"] == 1
    assert set(meta["retrieval_stats"]) >= {"primary_count", "expanded_count", "rejected_count",
                                             "cut_to_runner_up"}
    assert meta.get("missing") is None and "tenant" in meta
    assert json.loads(json.dumps(dict(meta))) == meta.to_dict()


def test_meta_of_several_projects_has_no_project_key():
    assert _meta(("a", "b"))["project_key"] is None


def test_stopwatch_records_a_lap_even_when_the_stage_raises():
    watch = Stopwatch()
    try:
        with watch.lap("graph"):
            raise ValueError
    except ValueError:
        pass
    assert set(watch.laps) == {"graph"} and watch.total_ms() >= watch.laps["graph"] >= 0
