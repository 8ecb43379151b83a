"""Placement by role (issue 27, decision 0014): pure tests of the rules on ranked items."""

from __future__ import annotations

from kb_retriever.ranking.history import promote_predecessors, shared_words
from kb_retriever.ranking.placement import cut_weak, place_rejected, successors_first
from kb_retriever.ranking.rerank import Scored
from kb_retriever.ranking.signals import TERMS

from .factories import canonical_doc, make_candidate

REJ = canonical_doc(1, slug="rej-memcached", canonical_type="rejected-approach",
                    title="Rejected: Memcached as the shared cache layer")
DEC = canonical_doc(2, slug="dec-redis", title="Redis cluster as the shared cache layer")
NOTE = canonical_doc(3, slug="notes-redis", canonical_type="domain-concept",
                     title="Notes on our Redis cache")
V1 = canonical_doc(4, "superseded", slug="dec-cache-v1", title="Per-service in-process cache")
V2 = canonical_doc(5, slug="dec-cache-v2", title="Redis cluster as the shared cache")


def _s(chunk_id: int, doc, score: float) -> Scored:
    terms = dict.fromkeys(TERMS, 0.0)
    terms["total"] = score
    return Scored(score, make_candidate(chunk_id, doc=doc), terms)


def _slugs(items) -> list[str]:
    return [i.document.slug for i in items]


def test_a_warned_rejected_record_leaves_primary_when_the_question_is_not_about_it():
    ranked = [_s(20, DEC, 0.9), _s(10, REJ, 0.8), _s(11, REJ, 0.7), _s(30, NOTE, 0.6)]
    out, moved = place_rejected("what cache layer did we standardise on?", ranked,
                                warned=lambda d: True, top=5)
    assert _slugs(out) == ["dec-redis", "notes-redis"]
    assert [m.candidate.chunk_id for m in moved] == [10, 11]  # best chunk first: the warning's


def test_one_chunk_stays_when_the_question_names_the_rejected_idea_or_it_ranks_first():
    ranked = [_s(20, DEC, 0.9), _s(10, REJ, 0.8), _s(11, REJ, 0.7)]
    out, moved = place_rejected("should we use memcached?", ranked, warned=lambda d: True, top=5)
    assert _slugs(out) == ["dec-redis", "rej-memcached"] and _slugs(moved) == ["rej-memcached"]
    first = [_s(10, REJ, 0.9), _s(20, DEC, 0.8), _s(11, REJ, 0.7)]
    out, _ = place_rejected("shared cache layer", first, warned=lambda d: True, top=5)
    assert _slugs(out) == ["rej-memcached", "dec-redis"]


def test_a_word_most_candidates_hold_names_no_rejected_record():
    """Decision 0014, amended: "room" is in the rejected record's title and not in the others',
    but in a knowledge base about hotels most candidates hold it; it names nothing, and the
    rejected record leaves primary. A word few candidates hold still names it."""
    rej = canonical_doc(1, slug="rej-app-keys", canonical_type="rejected-approach",
                        title="Rejected: app-only room keys")
    dec = canonical_doc(2, slug="dec-mobile-keys", title="Mobile keys on Latchwell locks")
    note = canonical_doc(3, slug="dc-status", canonical_type="domain-concept",
                         title="Housekeeping status")
    ranked = [_s(20, dec, 0.9), _s(10, rej, 0.8), _s(30, note, 0.6)]
    texts = {2: ["guests open the room door with the app"], 1: ["app-only room keys"],
             3: ["a room is clean or dirty"], 4: ["room rates by season"],
             5: ["the minibar of a room"]}
    query = "How do guests open their room doors nowadays?"
    shared = shared_words(query, texts)
    assert "room" in shared
    # among three candidates, three holding a word do not make it the domain's (SHARED_LEAST)
    assert "room" not in shared_words(query, {d: texts[d] for d in (1, 2, 3)})
    out, _ = place_rejected(query, ranked, warned=lambda d: True, top=5, shared=lambda: shared)
    assert _slugs(out) == ["dec-mobile-keys", "dc-status"]
    out, _ = place_rejected(query, ranked, warned=lambda d: True, top=5)
    assert _slugs(out) == ["dec-mobile-keys", "rej-app-keys", "dc-status"]  # before: "names" it
    proposal = "Should we go app-only for room keys?"
    out, _ = place_rejected(proposal, ranked, warned=lambda d: True, top=5,
                            shared=lambda: shared_words(proposal, texts))
    assert _slugs(out) == ["dec-mobile-keys", "rej-app-keys", "dc-status"]  # "app" and "only" name it


def test_a_rejected_record_the_block_does_not_warn_about_keeps_its_place():
    ranked = [_s(20, DEC, 0.9), _s(10, REJ, 0.8), _s(11, REJ, 0.7)]
    out, moved = place_rejected("cache", ranked, warned=lambda d: False, top=5)
    assert out == ranked and moved == []


def test_a_superseded_record_never_ranks_above_its_successor():
    ranked = [_s(40, V1, 0.9), _s(30, NOTE, 0.7), _s(50, V2, 0.6)]
    out = successors_first(ranked, {("default", "dec-cache-v2"): [("default", "dec-cache-v1")]})
    assert _slugs(out) == ["dec-cache-v2", "dec-cache-v1", "notes-redis"]
    assert [o.score for o in out] == sorted((o.score for o in out), reverse=True)


def test_a_history_question_brings_two_chunks_of_the_predecessor():
    ranked = [_s(50, V2, 0.9), _s(30, NOTE, 0.8), _s(41, V1, 0.5), _s(42, V1, 0.4)]
    out, moved = promote_predecessors(
        "why did we move off the in-process cache?", ranked,
        {("default", "dec-cache-v2"): [("default", "dec-cache-v1")]}, top=3, chunks=2)
    assert [o.candidate.chunk_id for o in out] == [50, 41, 42, 30]
    assert moved == [("default", "dec-cache-v1")]


def test_a_predecessor_the_question_is_closer_to_than_its_successor_is_promoted():
    """A history question that paraphrases the predecessor names no word of its title ("the old
    terminals with Windows" for "Skorpio X3 handhelds"), least of all in an inflected language
    ("терміналів" for "Термінали"). Before the trust gradient, the question put the superseded
    record above its successor: that moves it too."""
    def penalised(chunk_id: int, doc, score: float, penalty: float) -> Scored:
        s = _s(chunk_id, doc, score)
        return Scored(score, s.candidate, {**s.terms, "canonical": -penalty,
                                           "canonical_penalty": penalty})

    edges = {("default", "dec-cache-v2"): [("default", "dec-cache-v1")]}
    ranked = [_s(50, V2, 0.9), _s(30, NOTE, 0.8), penalised(41, V1, 0.5, 0.45),
              penalised(42, V1, 0.45, 0.45)]
    out, moved = promote_predecessors("what went wrong with the old setup?", ranked, edges, top=3,
                                      chunks=2)
    # one chunk: the question did not name it, and a slot of the top is worth a document
    assert [o.candidate.chunk_id for o in out] == [50, 41, 30, 42]
    assert moved == [("default", "dec-cache-v1")]
    # below its successor before the penalty too: left where it is
    ranked = [_s(50, V2, 0.9), _s(30, NOTE, 0.8), penalised(41, V1, 0.4, 0.45)]
    out, moved = promote_predecessors("what went wrong with the old setup?", ranked, edges, top=3)
    assert [o.candidate.chunk_id for o in out] == [50, 30, 41] and not moved


def test_a_second_successor_is_compared_where_it_stands_after_the_first_promotion():
    """Each successor's predecessor was compared with whatever stood at the successor's first
    place once the first predecessor had moved above it: here a note whose title lacks
    "event broker", so the question seemed to name the old broker."""
    bus = canonical_doc(6, slug="dec-bus-v2", title="Kafka as the event broker")
    old_bus = canonical_doc(7, "superseded", slug="dec-bus-v1", title="RabbitMQ as the event broker")
    edges = {("default", "dec-cache-v2"): [("default", "dec-cache-v1")],
             ("default", "dec-bus-v2"): [("default", "dec-bus-v1")]}
    ranked = [_s(1, V2, 0.9), _s(2, NOTE, 0.8), _s(3, bus, 0.7), _s(4, DEC, 0.6),
              _s(5, V1, 0.5), _s(6, old_bus, 0.4)]
    out, moved = promote_predecessors(
        "why did we drop the in-process cache, and which event broker do we use?", ranked, edges,
        top=5)
    assert [o.candidate.chunk_id for o in out] == [1, 5, 2, 3, 4, 6]
    assert moved == [("default", "dec-cache-v1")]


def test_the_cutoff_keeps_whole_documents_and_what_it_is_told_to_keep():
    hits = [_s(1, DEC, 0.9).hit(), _s(2, NOTE, 0.1).hit(), _s(3, V2, 0.05).hit()]
    evidence = {1: 1.0, 2: 0.2, 3: 0.1}
    kept, cut = cut_weak(hits, lambda h: evidence[h.chunk_id], ratio=0.3, keep={3})
    assert [h.chunk_id for h in kept] == [1, 3] and [h.chunk_id for h in cut] == [2]
    assert cut_weak(hits, lambda h: evidence[h.chunk_id], ratio=0.0) == (hits, [])


def test_a_document_the_answer_links_to_needs_the_lower_linked_share():
    """Decision 0016: 0.5 of the best evidence for a document on its own, 0.3 for one the
    answer's document links to (the lower of the two applies)."""
    hits = [_s(1, DEC, 0.9).hit(), _s(2, NOTE, 0.5).hit(), _s(3, V2, 0.4).hit()]
    evidence = {1: 1.0, 2: 0.4, 3: 0.35}
    share = {"ratio": 0.5, "linked_ratio": 0.3}

    def kept(**kw) -> list[int]:
        return [h.chunk_id for h in cut_weak(hits, lambda h: evidence[h.chunk_id], **kw)[0]]

    assert kept(**share) == [1]
    assert kept(**share, linked={NOTE.id}) == [1, 2]  # linked, above 0.3
    assert kept(**share, linked={NOTE.id, V2.id}) == [1, 2, 3]
    assert kept(ratio=0.3, linked={NOTE.id}, linked_ratio=0.5) == [1, 2, 3]  # the lower share
    assert kept(ratio=0.0, linked={NOTE.id}, linked_ratio=0.3) == [1, 2, 3]  # cutoff off


def test_a_document_with_few_of_the_questions_words_leaves_unless_the_answer_links_to_it():
    """Decision 0020: a document whose evidence clears the share but whose text holds under
    0.4 of the best keyword signal is a neighbour in meaning, not evidence; one the answer's
    document links to keeps the linked rule alone; a question whose words no document holds
    is judged on evidence alone."""
    def hit(chunk: int, doc, keyword: float):
        s = _s(chunk, doc, 0.9)
        return Scored(s.score, s.candidate, {**s.terms, "keyword": keyword}).hit()

    hits = [hit(1, DEC, 0.8), hit(2, NOTE, 0.25), hit(3, V2, 0.5), hit(4, NOTE, 0.3)]

    def kept(lexical_ratio: float = 0.4, **kw) -> list[int]:
        return [h.chunk_id for h in cut_weak(hits, lambda h: 1.0, ratio=0.5,
                                             lexical_ratio=lexical_ratio, **kw)[0]]

    assert kept() == [1, 3]  # NOTE's best, 0.3, is under 0.4 x 0.8
    assert kept(lexical_ratio=0.0) == [1, 2, 3, 4]  # the rule off
    assert kept(lexical_ratio=0.35) == [1, 2, 3, 4]  # 0.3 >= 0.35 x 0.8: all its hits stay
    assert kept(linked={NOTE.id}, linked_ratio=0.3) == [1, 2, 3, 4]  # the answer links to it
    assert kept(keep={2}) == [1, 2, 3]  # placed or @mentioned: that chunk stays
    wordless = [hit(1, DEC, 0.0), hit(2, NOTE, 0.0)]
    assert cut_weak(wordless, lambda h: 1.0, ratio=0.5, lexical_ratio=0.4) == (wordless, [])


def test_a_predecessor_the_question_names_needs_the_linked_share_and_the_words():
    """A superseded record that history promotion moved beside its successor because the
    question shares a word with its title ("named") is no longer kept whatever its evidence:
    its successor links to it, so it needs the linked share of the evidence, and the
    question's words as any other document (a proposal that shares one word with the old
    title is not a history question)."""
    def hit(chunk: int, doc, keyword: float):
        s = _s(chunk, doc, 0.9)
        return Scored(s.score, s.candidate, {**s.terms, "keyword": keyword}).hit()

    hits = [hit(1, V2, 0.8), hit(2, V1, 0.6), hit(3, NOTE, 0.8)]
    evidence = {1: 1.0, 2: 0.35, 3: 0.9}

    def kept(**kw) -> list[int]:
        return [h.chunk_id for h in cut_weak(hits, lambda h: evidence[h.chunk_id], ratio=0.5,
                                             linked_ratio=0.3, lexical_ratio=0.4, **kw)[0]]

    assert kept() == [1, 3]  # 0.35 is under the share of a document on its own
    assert kept(named={V1.id}) == [1, 2, 3]  # named: the linked share, and enough words
    evidence[2] = 0.2
    assert kept(named={V1.id}) == [1, 3]  # under the linked share too
    evidence[2] = 0.35
    hits[1] = hit(2, V1, 0.2)
    assert kept(named={V1.id}) == [1, 3]  # too few of the question's words
    assert kept(linked={V1.id}) == [1, 2, 3]  # what the answer links to keeps the linked rule


def test_a_project_index_neither_anchors_nor_measures_the_context():
    """A hub ranked first (its one-line summaries match every question) is cut, the first other
    document anchors, and the measure is the best evidence of the others; alone, it stays."""
    hub = canonical_doc(9, slug="index", canonical_type="project-index", title="Project index")
    hits = [_s(1, hub, 0.95).hit(), _s(2, DEC, 0.9).hit(), _s(3, NOTE, 0.5).hit()]
    evidence = {1: 2.0, 2: 1.0, 3: 0.6}
    kept, cut = cut_weak(hits, lambda h: evidence[h.chunk_id], ratio=0.5)
    assert [h.chunk_id for h in kept] == [2, 3] and [h.chunk_id for h in cut] == [1]
    kept, _ = cut_weak(hits, lambda h: evidence[h.chunk_id], ratio=0.5, keep={1})
    assert [h.chunk_id for h in kept] == [1, 2, 3]  # @mentioned or placed: it stays
    assert cut_weak(hits[:1], lambda h: evidence[h.chunk_id], ratio=0.5) == (hits[:1], [])
