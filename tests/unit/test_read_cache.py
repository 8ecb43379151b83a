"""The search's read cache (``store.reader.ReadCache``): what a write's clear leaves in it."""

from __future__ import annotations

import threading

from kb_retriever.store.reader import ReadCache
from kb_retriever.store.reads import Fetch

SYNONYMS = Fetch(query="SELECT 1", params={}, stage="synonyms", cache_key=("synonyms", "p"),
                 cache_ttl=300.0)


def test_an_answer_read_before_a_clear_is_not_kept() -> None:
    """A search that read the synonym groups (or the catalog) while a write committed kept the
    old answer after the write's clear, for the TTL (300 s): ``add_synonyms`` cleared even
    before it wrote. An answer is kept only when no clear came since its read was sent."""
    cache = ReadCache()
    since = cache.generation  # the read is sent
    cache.clear()  # a write commits and clears
    assert cache.answer(SYNONYMS, [{"old": 1}], since) == [{"old": 1}]  # served, not kept
    assert cache.get(SYNONYMS) is None
    assert cache.answer(SYNONYMS, [{"new": 1}], cache.generation) == [{"new": 1}]
    assert cache.get(SYNONYMS) == [{"new": 1}]


def test_clears_beside_evictions_never_break_an_answer() -> None:
    """``clear`` emptied the entries without the lock while ``answer`` evicted the oldest under
    it: "dictionary changed size during iteration", or ``next(iter(...))`` of an emptied dict
    (a raw StopIteration)."""
    for _ in range(10):  # the code before failed about one round in two
        cache = ReadCache(max_entries=2)
        errors: list[BaseException] = []

        def answers(cache: ReadCache = cache, errors: list[BaseException] = errors) -> None:
            try:
                for i in range(20_000):
                    req = Fetch(query="SELECT 1", params={}, stage="s", cache_key=(i,),
                                cache_ttl=60)
                    cache.answer(req, [], cache.generation)
            except BaseException as exc:  # noqa: BLE001 - any error fails the test
                errors.append(exc)

        threads = [threading.Thread(target=answers) for _ in range(2)]
        for t in threads:
            t.start()
        while any(t.is_alive() for t in threads):
            cache.clear()
        assert not errors and len(cache) <= 2


def test_a_view_keeps_only_answers_with_no_clear_since_it_began() -> None:
    """A search takes its view (and its server) first, then embeds its question, then reads:
    a write that cleared the cache in between left the search's later answers kept as if read
    after it, though its server (a replica chosen before the write) may not have it. The
    view's answers are kept only when no clear came since the view began."""
    cache = ReadCache()
    view = cache.view(True)  # the server is chosen
    cache.clear()  # a write commits and clears while the question is embedded
    since = view.generation  # the read is sent
    assert view.answer(SYNONYMS, [{"old": 1}], since) == [{"old": 1}]
    assert cache.get(SYNONYMS) is None
    later = cache.view(True)
    assert later.answer(SYNONYMS, [{"new": 1}], later.generation) == [{"new": 1}]
    assert cache.get(SYNONYMS) == [{"new": 1}]


def test_a_write_through_one_cache_drops_what_another_of_its_database_kept() -> None:
    """Each knowledge base has its cache: one's write cleared its own, and another knowledge
    base of the process on the same database served its old answers (synonyms, statistics,
    calibration) for their TTL, ``consistent=True`` too. The caches of one database share a
    count of the process's writes to it; other databases' caches keep theirs."""
    url, other_url = "postgresql:///one-db", "postgresql:///other-db"
    writer, reader, elsewhere = (ReadCache(url=lambda: url), ReadCache(url=lambda: url),
                                 ReadCache(url=lambda: other_url))
    for cache in (reader, elsewhere):
        cache.answer(SYNONYMS, [{"old": 1}], cache.generation)
    writer.clear()
    assert reader.get(SYNONYMS) is None and elsewhere.get(SYNONYMS) == [{"old": 1}]
