"""Metric definitions (reference §20 with the §24.18 precision fix), computed by hand."""

from __future__ import annotations

import math
import random

import pytest

from kb_retriever.bench.metrics import (
    answer_contained,
    mean_or_one,
    ndcg_at_k,
    percentile,
    ranking_metrics,
    unique_keys,
)

LOG3 = math.log2(3)


def test_ndcg_uses_exponential_gain():
    grades = {"a": 3, "b": 1, "c": 0}
    # ranked b, a: DCG = (2^1-1)/1 + (2^3-1)/log2(3); IDCG = 7/1 + 1/log2(3)
    expected = (1 + 7 / LOG3) / (7 + 1 / LOG3)
    assert ndcg_at_k(["b", "a"], grades, 5) == pytest.approx(expected)
    assert ndcg_at_k(["a", "b"], grades, 5) == pytest.approx(1.0)
    assert ndcg_at_k(["x"], grades, 5) == 0.0
    assert ndcg_at_k(["a"], {}, 5) == 0.0  # nothing relevant: 0, as the reference
    assert ndcg_at_k(["a"], grades, 0) == 0.0


def test_ndcg_deduplicates_and_truncates():
    grades = {"a": 2, "b": 2}
    # "a" twice counts once; k=1 keeps only the first rank, IDCG truncated to one doc too.
    assert ndcg_at_k(["a", "a", "b"], grades, 1) == pytest.approx(1.0)
    assert ndcg_at_k(["x", "a"], grades, 1) == 0.0
    assert unique_keys(["a", "b", "a", "c"]) == ["a", "b", "c"]


def test_ranx_metrics_by_hand():
    grades = {"q1": {"a": 3, "b": 1, "c": 0}, "q2": {"d": 2}, "q3": {"e": 1}, "q4": {}}
    runs = {"q1": ["b", "x", "a"], "q2": ["y", "z"], "q3": ["e"], "q4": ["e"]}
    m = ranking_metrics(runs, grades, k=5)
    # q1: b at rank 1 (gain 1), a at rank 3 (gain 7)
    assert m["q1"]["ndcg"] == pytest.approx((1 + 7 / 2) / (7 + 1 / LOG3))
    assert m["q1"]["rr"] == 1.0
    assert m["q1"]["precision"] == pytest.approx(2 / 5)  # divides by k, not by 3 retrieved
    assert m["q1"]["recall"] == 1.0  # c is graded 0: not relevant
    assert m["q2"] == {"ndcg": 0.0, "rr": 0.0, "precision": 0.0, "recall": 0.0}
    assert m["q3"]["precision"] == pytest.approx(1 / 5) and m["q3"]["rr"] == 1.0
    assert m["q4"]["ndcg"] == 0.0  # empty relevant set ⇒ 0 without asking ranx


def test_ranx_and_plain_ndcg_agree():
    rng = random.Random(7)
    keys = [f"d{i}" for i in range(12)]
    grades, runs = {}, {}
    for n in range(40):
        qid = f"q{n:02d}"
        grades[qid] = {d: rng.randint(0, 3) for d in rng.sample(keys, rng.randint(1, 5))}
        runs[qid] = rng.sample(keys, rng.randint(1, 7))
    for k in (1, 3, 5):
        m = ranking_metrics(runs, grades, k)
        for qid in grades:
            assert m[qid]["ndcg"] == pytest.approx(ndcg_at_k(runs[qid], grades[qid], k), abs=1e-9)


def test_answer_containment_normalises_whitespace_and_case():
    texts = ["first chunk", "We use the  Weekly\n Release   Train now", "third"]
    assert answer_contained("weekly release train", texts, 5)
    assert not answer_contained("weekly release train", texts, 1)  # only the first chunk
    assert not answer_contained("monthly", texts, 5)
    assert not answer_contained("   ", texts, 5)


def test_answer_containment_reads_what_the_prompt_shows_of_a_chunk():
    """The prompt shows each context chunk's document title and heading above its text: an
    answer in a heading ("## MRK-409: the code was already sold") reached the model."""
    from kb_retriever.bench.runner import _shown

    from ..unit.factories import make_doc, make_hit

    hit = make_hit(1, doc=make_doc(1, title="Marking errors"),
                   heading="Marking errors > MRK-409: the code was already sold",
                   text="Ask the customer for another pack.")
    assert answer_contained("the code was already sold", [_shown(hit)], 1)
    assert not answer_contained("the code was already sold", [hit.text], 1)


def test_empty_subsets_and_percentiles():
    assert mean_or_one([]) == 1.0
    assert mean_or_one([1.0, 0.0, 0.0]) == 0.3333
    assert percentile([], 50) == 0.0
    assert percentile([10.0, 20.0, 30.0, 40.0], 50) == 25.0


def test_rejected_precision_counts_unwarranted_injections():
    from kb_retriever.bench.runner import rejected_precision

    rows = [
        {"rejected_doc_keys": ["rej-a"], "rejected_false": []},           # expected
        {"rejected_doc_keys": ["rej-a", "rej-b"], "rejected_false": ["rej-b"]},
        {"rejected_doc_keys": ["rej-c"], "rejected_false": ["rej-c"]},    # off-topic query
    ]
    assert rejected_precision(rows) == 0.5
    assert rejected_precision([{"rejected_doc_keys": [], "rejected_false": []}]) == 1.0
