"""The retrieval benchmark behind ``kb-retriever bench`` (AskMyDocs format, reference §20).

dataset (load + validate the YAML) → runner (ingest, search each query) → metrics (per query,
aggregate) → report (terminal / JSON / gate); tune searches reranker weights on cached
candidate pools.

Example::

    from kb_retriever import KnowledgeBase
    from kb_retriever.bench import load_queries, run_benchmark

    queries = load_queries("examples/benchmark/queries.yaml")
    with KnowledgeBase(project="benchmark") as kb:
        report = run_benchmark(kb, "examples/benchmark/corpus", queries, k=5)
    print(report.aggregates["ndcg_at_k"])
"""

from .dataset import BenchQuery, load_queries, parse_queries
from .runner import BenchReport, run_benchmark

__all__ = ["BenchQuery", "BenchReport", "load_queries", "parse_queries", "run_benchmark"]
