"""LangChain's dialect: ``filter=``, ``search_kwargs``, ``search_type`` and strict arguments."""

from __future__ import annotations

from dataclasses import replace

import pytest
from langchain_kb_retriever import KBRetriever

from kb_retriever import FilterError, InputError, KnowledgeBase
from kb_retriever.models import Origin
from kb_retriever.models.results import CONTEXT_CUTOFF

pytestmark = pytest.mark.db

QUERY = "what cache layer did we standardise on?"


def _slugs(docs: list) -> list[str]:
    return [d.metadata["slug"] for d in docs]


def test_invoke_takes_a_langchain_filter(example_kb: KnowledgeBase) -> None:
    retriever = KBRetriever(kb=example_kb, k=4)
    docs = retriever.invoke(QUERY, filter={"$or": [{"canonical_type": "rejected-approach"},
                                                   {"tags": {"$in": ["redis"]}}]})
    assert docs
    for d in docs:
        document = d.metadata["kb"]["document"]
        assert document["canonical_type"] == "rejected-approach" or "redis" in document["tags"]
    not_decisions = retriever.invoke(QUERY, filter={"$not": {"canonical_type": "decision"}})
    assert all(d.metadata["kb"]["document"]["canonical_type"] != "decision"
               for d in not_decisions)


def test_search_kwargs_k_and_filter_apply(example_kb: KnowledgeBase) -> None:
    retriever = KBRetriever(kb=example_kb, search_kwargs={
        "k": 1, "filter": {"canonical_type": {"$in": ["decision"]}}})
    docs = retriever.invoke(QUERY)
    assert len(docs) == 1
    assert docs[0].metadata["kb"]["document"]["canonical_type"] == "decision"
    # per call wins over search_kwargs, the filter too (as in VectorStoreRetriever)
    assert len(retriever.invoke(QUERY, k=2)) == 2
    assert retriever.invoke(QUERY, filter={"slug": "no-such-slug"}) == []
    rejected = retriever.invoke(QUERY, filter={"canonical_type": "rejected-approach"})
    assert rejected[0].metadata["kb"]["document"]["canonical_type"] == "rejected-approach"
    with pytest.raises(InputError, match="not 'mmr'"):
        KBRetriever(kb=example_kb, search_type="mmr", search_kwargs={"score_threshold": 0.3})


def test_unknown_arguments_raise_with_the_valid_names(example_kb: KnowledgeBase) -> None:
    with pytest.raises(InputError, match=r"\['top_k'\].*valid: .*search_kwargs"):
        KBRetriever(kb=example_kb, top_k=3)
    with pytest.raises(InputError, match=r"\['topk'\].*valid: k, filters, filter"):
        KBRetriever(kb=example_kb, search_kwargs={"topk": 3})
    with pytest.raises(InputError, match="valid: k, filters, filter"):
        KBRetriever(kb=example_kb).invoke(QUERY, top_k=1)
    with pytest.raises(FilterError):
        KBRetriever(kb=example_kb).invoke(QUERY, filter={"$xor": []})


def test_mmr_returns_k_diverse_documents(example_kb: KnowledgeBase) -> None:
    plain = KBRetriever(kb=example_kb, k=4).invoke(QUERY)
    mmr = KBRetriever(kb=example_kb, search_type="mmr",
                      search_kwargs={"k": 4, "fetch_k": 12, "lambda_mult": 0.2}).invoke(QUERY)
    assert len(mmr) == 4 and len({d.id for d in mmr}) == 4
    assert mmr[0].id == plain[0].id  # relevance is the pipeline's score: its best stays first
    assert [d.id for d in mmr] != [d.id for d in plain]


def test_mmr_over_hits_the_cutoff_moved_out_returns_each_once_in_its_order(
        example_kb: KnowledgeBase) -> None:
    """MMR ranks what the adaptive cutoff moved to the runner-ups too; its picks became the
    primary hits, but the moved ones stayed in ``runner_up``, so ``top_k`` added them again
    and sorted the lot by score: a document twice, another lost, MMR's order gone."""
    retriever = KBRetriever(kb=example_kb, search_type="mmr",
                            search_kwargs={"k": 4, "fetch_k": 8, "lambda_mult": 0.2})
    found = retriever.search(QUERY)
    hits = found.top_k(8)
    assert len(hits) == 8
    moved = tuple(replace(h, origin=Origin.RUNNER_UP, metadata={**h.metadata, CONTEXT_CUTOFF: True})
                  for h in hits[2:])  # as if the cutoff had kept two
    docs = retriever.to_documents(replace(found, primary=hits[:2], runner_up=moved))
    picked = retriever._mmr(replace(found, primary=hits[:2], runner_up=moved),
                            retriever._call({})).primary
    assert len(docs) == 4 and len({d.id for d in docs}) == 4
    assert [d.id for d in docs] == [h.uid for h in picked]


async def test_mmr_async(async_example_kb: KnowledgeBase) -> None:
    retriever = KBRetriever(kb=async_example_kb, search_type="mmr", search_kwargs={"k": 3})
    assert len(await retriever.ainvoke(QUERY)) == 3


def test_score_threshold(example_kb: KnowledgeBase) -> None:
    with pytest.raises(InputError, match="score_threshold"):
        KBRetriever(kb=example_kb, search_type="similarity_score_threshold")
    everything = KBRetriever(kb=example_kb, k=6).invoke(QUERY)
    cut = everything[2].metadata["score"]
    kept = KBRetriever(kb=example_kb, search_type="similarity_score_threshold",
                       search_kwargs={"k": 6, "score_threshold": cut}).invoke(QUERY)
    assert kept and all(d.metadata["score"] >= cut for d in kept)
    assert len(kept) < len(everything)


def test_vector_store_as_retriever_keeps_search_type(example_kb: KnowledgeBase) -> None:
    from langchain_kb_retriever import KBVectorStore

    store = KBVectorStore(kb=example_kb)
    mmr = store.as_retriever(search_type="mmr", search_kwargs={"k": 3, "fetch_k": 10})
    assert mmr.search_type == "mmr" and len(mmr.invoke(QUERY)) == 3
    with pytest.raises(InputError, match="score_threshold"):
        store.as_retriever(search_type="similarity_score_threshold")
