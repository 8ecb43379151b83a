"""The benchmark runner on a tiny corpus written by the test (hashing embedder, real database).

The hashing embedder and PostgreSQL are deterministic, so the ranking is pinned first; every
metric is then computed by hand from that ranking.
"""

from __future__ import annotations

import math

import pytest

from kb_retriever.bench import parse_queries, run_benchmark
from kb_retriever.bench.runner import score
from kb_retriever.errors import InputError

pytestmark = pytest.mark.db

DOCS = {
    "kafka-topics": "# Kafka topics\n\nOrders are published on the kafka topic orders-v2 with "
                    "twelve partitions and a retention of seven days.\n",
    "postgres-backups": "# Postgres backups\n\nPostgres backups run nightly with pgbackrest "
                        "and are kept for thirty days in cold storage.\n",
    "redis-cache": "# Redis cache\n\nThe session cache is Redis with a ttl of fifteen minutes "
                   "and eviction policy allkeys-lru.\n",
    "release-notes": "# Release notes\n\nRelease notes are written by the release captain "
                     "and published every friday.\n",
}
QUERIES = {"queries": [
    {"id": "kafka", "query": "kafka topic orders partitions retention",
     "relevance": {"kafka-topics": 3, "redis-cache": 1},
     "expect_citation": "kafka-topics", "expect_answer": "twelve  PARTITIONS"},
    {"id": "backup", "query": "how long are postgres backups kept",
     "relevance": {"postgres-backups": 2, "release-notes": 1},
     "expect_citation": "release-notes", "expect_answer": "ninety days"},
    {"id": "offtopic", "query": "zqxv plorbic frumious", "relevance": {},
     "expect_refusal": True},
]}
K = 3
LOG3 = math.log2(3)


@pytest.fixture(scope="module")
def report(new_database, tmp_path_factory):
    from kb_retriever import HashingEmbedder, KnowledgeBase, Settings

    corpus = tmp_path_factory.mktemp("corpus")
    for key, text in DOCS.items():
        (corpus / f"{key}.md").write_text(text, encoding="utf-8")
    kb = KnowledgeBase(Settings(), embedder=HashingEmbedder(256), database_url=new_database(),
                       project="benchmark").open()
    try:
        first = run_benchmark(kb, corpus, parse_queries(QUERIES), k=K)
        again = run_benchmark(kb, corpus, parse_queries(QUERIES), k=K)
    finally:
        kb.close()
    assert len(first.ingest.added) == 4
    assert len(again.ingest.unchanged) == 4 and not again.ingest.added  # re-ingest: no-op
    return again


def test_pinned_ranking(report):
    rows = {r["id"]: r for r in report.per_query}
    assert rows["kafka"]["ranked_doc_keys"][0] == "kafka-topics"
    assert "redis-cache" not in rows["kafka"]["ranked_doc_keys"]
    assert rows["backup"]["ranked_doc_keys"][0] == "postgres-backups"
    assert "release-notes" not in rows["backup"]["ranked_doc_keys"]
    assert rows["offtopic"]["refused"] and rows["offtopic"]["ranked_doc_keys"] == []
    assert not rows["kafka"]["refused"] and not rows["backup"]["refused"]


def test_metrics_by_hand(report):
    rows = {r["id"]: r for r in report.per_query}
    # kafka: grade-3 doc first, the grade-1 doc not retrieved.
    kafka_ndcg = 7 / (7 + 1 / LOG3)
    # backup: grade-2 doc first, the grade-1 doc not retrieved.
    backup_ndcg = 3 / (3 + 1 / LOG3)
    assert rows["kafka"]["ndcg"] == pytest.approx(kafka_ndcg, abs=1e-4)
    assert rows["backup"]["ndcg"] == pytest.approx(backup_ndcg, abs=1e-4)
    assert rows["offtopic"]["ndcg"] is None  # refusal queries are not ranked
    agg = report.aggregates
    assert agg["ndcg_at_k"] == pytest.approx((kafka_ndcg + backup_ndcg) / 2, abs=1e-4)
    assert agg["mrr"] == 1.0
    assert agg["precision_at_k"] == pytest.approx(1 / K, abs=1e-4)  # 1 relevant of k, each
    assert agg["recall_at_k"] == 0.5  # 1 of 2 relevant docs, each
    assert rows["kafka"]["answer_contained"] is True  # whitespace and case normalised
    assert rows["backup"]["answer_contained"] is False
    assert agg["answer_containment_at_k"] == 0.5
    assert agg["citation_precision"] == 0.5  # release-notes is nowhere in the result
    assert agg["refusal_accuracy"] == 1.0
    assert agg["graph_recall"] == 1.0 and agg["rejected_recall"] == 1.0  # empty subsets
    assert agg["rejected_precision"] == 1.0  # nothing injected
    assert agg["latency_p50_ms"] > 0 and agg["latency_p95_ms"] >= agg["latency_p50_ms"]
    assert report.to_dict()["queries"] == 3 and report.to_dict()["k"] == K


def test_rescoring_is_pure(report):
    assert score(report.runs, K).aggregates["ndcg_at_k"] == report.aggregates["ndcg_at_k"]


def test_labels_must_name_corpus_docs(make_kb, tmp_path):
    (tmp_path / "only.md").write_text("# Only\n\nsome text\n", encoding="utf-8")
    queries = parse_queries({"queries": [{"id": "q", "query": "x", "relevance": {"typo": 3}}]})
    with pytest.raises(InputError, match="not in the corpus.*typo"):
        run_benchmark(make_kb(), tmp_path, queries)
    with pytest.raises(InputError, match="must be a directory"):
        run_benchmark(make_kb(), tmp_path / "nope", queries)


def test_a_query_that_grades_no_document_has_no_ranking_metrics(report):
    """A query labelling only warnings or related documents scored nDCG, MRR and recall 0,
    pulling the aggregates down, and its row said "no relevant doc in top-k"."""
    import dataclasses

    run = report.runs[0]
    unlabelled = dataclasses.replace(
        run, query=dataclasses.replace(run.query, id="warn-only", relevance={}))
    rescored = score([*report.runs, unlabelled], K)
    for key in ("ndcg_at_k", "mrr", "precision_at_k", "recall_at_k"):
        assert rescored.aggregates[key] == report.aggregates[key]
    row = rescored.per_query[-1]
    assert row["id"] == "warn-only" and row["ndcg"] is None and row["rr"] is None


def _corpus(folder, docs):
    folder.mkdir(parents=True, exist_ok=True)
    for key, text in docs.items():
        (folder / f"{key}.md").write_text(text, encoding="utf-8")
    return folder


def test_a_benchmark_scores_its_corpus_alone(make_kb, tmp_path):
    """Two corpora benched one after the other in one project (the default ``benchmark``)
    were searched together: the first's documents ranked for the second's queries. A file
    removed from the corpus stayed searchable too."""
    kb = make_kb()
    queries = parse_queries(QUERIES)
    other = _corpus(tmp_path / "other", {"kafka-topics-old": DOCS["kafka-topics"]})
    run_benchmark(kb, other, parse_queries({"queries": [{"id": "q", "query": "kafka"}]}), k=K)
    corpus = _corpus(tmp_path / "corpus", DOCS)
    with pytest.raises(InputError, match="1 document that is not in this corpus.*"
                                         "kafka-topics-old.*--project"):
        run_benchmark(kb, corpus, queries, k=K)
    kb.clear()
    assert len(run_benchmark(kb, corpus, queries, k=K).ingest.added) == 4
    (corpus / "redis-cache.md").unlink()
    report = run_benchmark(kb, corpus, parse_queries({"queries": [QUERIES["queries"][1]]}), k=K)
    assert report.ingest.deleted == 1 and "redis-cache" not in {
        d.doc_key for d in kb.list_documents()}


def test_a_k_past_the_limit_fails_before_the_corpus_is_read(make_kb, tmp_path):
    kb = make_kb()
    corpus = _corpus(tmp_path / "corpus", DOCS)
    with pytest.raises(InputError, match=r"k must be between 1 and 200 \(KB_MAX_LIMIT\), got 201"):
        run_benchmark(kb, corpus, parse_queries(QUERIES), k=201)
    assert kb.list_documents() == []


def test_grades_of_zero_answers_and_warnings_alone_are_not_scored_as_misses(report):
    """A query grading its documents 0 only scored nDCG and MRR 0 (it could never score
    more); one that only expects an answer's words had a context precision of 0; a query
    expecting two warnings passed ``rejected_recall`` with one shown."""
    import dataclasses

    from kb_retriever.bench.runner import QueryRun

    @dataclasses.dataclass(frozen=True)
    class Warned(QueryRun):
        @property
        def rejected(self) -> list[str]:
            return ["redis-cache"]

    run = report.runs[0]
    bare = dataclasses.replace(run.query, relevance={}, expect_citation=None)
    zeros = dataclasses.replace(
        run, query=dataclasses.replace(bare, id="zeros", relevance={"redis-cache": 0}))
    answer = dataclasses.replace(run, query=dataclasses.replace(bare, id="answer-only"))
    two = Warned(query=dataclasses.replace(bare, id="two-warnings",
                                           expect_rejected=("redis-cache", "release-notes")),
                 result=run.result, latency_ms=run.latency_ms)
    rescored = score([*report.runs, zeros, answer, two], K)
    for key in ("ndcg_at_k", "mrr", "precision_at_k", "recall_at_k", "context_precision"):
        assert rescored.aggregates[key] == report.aggregates[key], key
    rows = {row["id"]: row for row in rescored.per_query}
    assert rows["zeros"]["ndcg"] is None and rows["answer-only"]["context_precision"] is None
    assert rows["two-warnings"]["rejected_ok"] is False
