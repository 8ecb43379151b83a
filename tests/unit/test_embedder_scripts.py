"""Which questions an embedder reads (``embedding.reads``): a model trained on one script's
text has no say on a question in another (decision 0013)."""

from __future__ import annotations

import pytest

from kb_retriever.embedding import HashingEmbedder, MiniLMEmbedder, reads

QUESTIONS = {
    "What cache layer did we standardise on?": True,
    "Dlaczego przestaliśmy używać taśm do kopii zapasowych?": True,  # Latin with diacritics
    "Hur länge sparas de dagliga säkerhetskopiorna?": True,
    "OPCGW-E1203 が出たら？": True,  # an identifier: most of its letters are Latin
    "うちの基幹システムって今どこで動いてるの？": False,
    "数据采集网关掉线怎么办？": False,
    "Куди зараз зберігаються резервні копії Postgres?": False,
    "Πώς μπαίνουν τα φορτηγά στον σταθμό;": False,
}


@pytest.mark.parametrize(("question", "read"), QUESTIONS.items())
def test_the_english_model_reads_latin_script_only(question: str, read: bool) -> None:
    assert reads(MiniLMEmbedder(), question) is read  # lazy: nothing loads


@pytest.mark.parametrize("question", QUESTIONS)
def test_an_embedder_that_names_no_scripts_reads_every_question(question: str) -> None:
    class Wrapped:  # a framework's embeddings, wrapped: they say nothing of their scripts
        model_id, dimension = "other", 8

    assert reads(HashingEmbedder(8), question) and reads(Wrapped(), question)  # type: ignore[arg-type]
