"""Another writer's changes to the trust channels and to the scope's languages reach a knowledge
base's searches within ``search.pipeline.TRUST_TTL_S`` (they waited for
``KB_CATALOG_CACHE_TTL_SECONDS``, 300 s)."""

from __future__ import annotations

import time

import pytest

from kb_retriever import HashingEmbedder, KnowledgeBase, Settings
from kb_retriever.search.modes import Legs
from kb_retriever.search.pipeline import TRUST_TTL_S

pytestmark = pytest.mark.db

REJECTED = {"id": "rej-memcached", "text": (
    "---\nslug: rej-memcached\ntype: rejected-approach\nstatus: accepted\n"
    "summary: Memcached for sessions was rejected for lack of persistence.\n---\n"
    "# Memcached for sessions\n\nMemcached as the session cache layer was rejected.\n")}
ACCEPTED = {"id": "dec-redis", "text": (
    "---\nslug: dec-redis\ntype: decision\nstatus: accepted\n---\n"
    "# Redis for sessions\n\nRedis is the session cache layer.\n")}


def test_a_rejected_record_deleted_by_another_writer_is_no_longer_warned_about(new_database):
    url = new_database()
    settings = Settings(rejected_rule="absolute", rejected_min_similarity=0.1)
    with KnowledgeBase(settings, embedder=HashingEmbedder(64), database_url=url) as reader, \
            KnowledgeBase(settings, embedder=HashingEmbedder(64), database_url=url) as writer:
        writer.add_documents([ACCEPTED, REJECTED])
        query = "memcached session cache layer"
        assert [h.document.slug for h in reader.search(query).rejected] == ["rej-memcached"]
        writer.delete(["rej-memcached"])  # the reader's cache holds the record and its text
        time.sleep(TRUST_TTL_S + 0.5)
        assert reader.search(query).rejected == ()


def test_a_language_another_writer_brings_is_searched_by_its_own_stemming(new_database):
    """The query is stemmed by each of the scope's languages' configurations: a process that
    had read the scope as English went on stemming "Zahlungen" as English ("zahlungen", not
    the German "zahlung") after another process added the first German document."""
    url = new_database()
    english = {"id": "payments.md", "text": "# Payments\n\nPayments are settled nightly.\n"}
    german = {"id": "zahlungen.md", "text": ("---\nlanguage: de\n---\n# Zahlungen\n\n"
                                             "Die Zahlungen werden nachts abgerechnet.\n")}
    full_text_only = Legs(vector_weight=0)
    with KnowledgeBase(embedder=HashingEmbedder(64), database_url=url) as reader, \
            KnowledgeBase(embedder=HashingEmbedder(64), database_url=url) as writer:
        writer.add_documents([english])
        assert not reader.search("Zahlungen", legs=full_text_only).primary
        writer.add_documents([german])
        time.sleep(TRUST_TTL_S + 0.5)
        found = reader.search("Zahlungen", legs=full_text_only).primary
        assert [h.document.source_path for h in found] == ["zahlungen.md"]
