"""Pure tests of the calibrated trust channels (issue 16): calibration, the refusal gate on a
calibrated scope, rejected-approach evidence and history promotion."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from kb_retriever.models import ScoreBreakdown
from kb_retriever.ranking.calibration import PROBE_VERSION, PROBES, Calibration
from kb_retriever.ranking.grounding import should_refuse
from kb_retriever.ranking.history import names_predecessor, promote_predecessors
from kb_retriever.ranking.rejected_evidence import correlate_rejected
from kb_retriever.settings import Settings

from .factories import canonical_doc, make_hit

N = len(PROBES)


def _rejected_row(chunk_id: int, doc_pk: int, embedding: list[float],
                  linked: tuple[str, ...] = (), title: str = "") -> dict[str, object]:
    """A row of ``store.catalog_sql.rejected_chunks_sql``: the chunk of a rejected approach,
    its document's columns, its vector and the slugs it links to."""
    return {"chunk_id": chunk_id, "doc_pk": doc_pk, "embedding": embedding,
            "linked_slugs": list(linked), "text": f"rejected idea {doc_pk}", "heading_path": "",
            "chunk_order": 0, "chunk_uid": None, "tenant_id": "default",
            "project_key": "default", "doc_key": f"rej-{doc_pk}", "title": title or f"Rejected {doc_pk}",
            "source_path": f"rej-{doc_pk}.md", "source_type": "markdown", "slug": f"rej-{doc_pk}",
            "doc_id": None, "is_canonical": True, "canonical_type": "rejected-approach",
            "canonical_status": "accepted", "retrieval_priority": 0, "generation_source": None,
            "evidence_tier": None, "tags": [], "summary": None, "language": None,
            "doc_date": None}


def _null(level: float) -> Calibration:
    return Calibration((level,) * N)


def _hit(chunk_id, similarity, keyword=0.0, **doc):
    return make_hit(chunk_id, doc=canonical_doc(chunk_id, **doc), similarity=similarity,
                    scores=ScoreBreakdown(keyword=keyword, total=similarity))


def test_margin_is_scale_free_across_embedders():
    # MiniLM on English (null 0.15) and E5 (null 0.80): the same relative margin
    assert _null(0.15).margin(0.575) == pytest.approx(0.5)
    assert _null(0.80).margin(0.90) == pytest.approx(0.5)
    assert _null(0.80).margin(0.78) < 0


def test_calibration_needs_every_project_and_the_current_probes():
    ok = {"probe_version": PROBE_VERSION, "probe_similarity": [0.3] * N}
    assert Calibration.from_rows([ok]).calibrated
    assert not Calibration.from_rows([]).calibrated
    assert not Calibration.from_rows([ok, {"probe_version": PROBE_VERSION,
                                           "probe_similarity": []}]).calibrated
    assert not Calibration.from_rows([{**ok, "probe_similarity": [0.3] * (N - 1)}]).calibrated


def test_calibrated_gate_refuses_a_flat_high_band_and_grounds_on_keywords():
    s = Settings()  # KB_REFUSAL_RULE=calibrated: the calibrated gate applies
    italian_null = _null(0.52)  # MiniLM on Italian: unrelated text scores ~0.5
    # cosine 0.55 clears the absolute 0.45 floor, but not the scope's own null
    assert should_refuse([_hit(1, 0.55)], s, italian_null)
    assert not should_refuse([_hit(1, 0.55)], s)  # uncalibrated: the absolute rule
    # a query whose words the scope holds is grounded by its keyword signal
    assert not should_refuse([_hit(1, 0.50, keyword=0.35)], s, italian_null)
    assert not should_refuse([_hit(1, 0.80)], s, italian_null)


def test_the_absolute_refusal_rule_is_a_setting_not_a_threshold_given():
    s = Settings(refusal_rule="absolute", refusal_min_similarity=0.5)
    assert not should_refuse([_hit(1, 0.55)], s, _null(0.52))
    # a threshold set, even to its own default, leaves the calibrated gate on (issue 24)
    for given in (Settings(refusal_min_similarity=0.45), Settings(refusal_min_similarity=0.5)):
        assert given.refusal_rule == "calibrated"
        assert should_refuse([_hit(1, 0.55)], given, _null(0.52))


def test_the_rejected_rule_is_a_setting_not_a_threshold_given(monkeypatch):
    from kb_retriever.errors import ConfigError
    from kb_retriever.search.rejected_channel import decide_rejected, unit_vectors

    pool = unit_vectors([_rejected_row(10, 1, [1.0, 0.0])])

    def rule(settings, calibration=None):
        calibration = _null(0.2) if calibration is None else calibration
        return decide_rejected(pool, [1.0, 0.0], [], calibration, settings).rule

    assert rule(Settings()) == "calibrated"
    assert rule(Settings(rejected_min_similarity=0.40)) == "calibrated"  # its own default
    assert rule(Settings(rejected_rule="absolute")) == "absolute"
    assert rule(Settings(), Calibration(())) == "absolute"  # a scope never calibrated
    monkeypatch.setenv("KB_REJECTED_RULE", "absolute")
    monkeypatch.setenv("KB_REFUSAL_RULE", "absolute")
    assert Settings().rejected_rule == Settings().refusal_rule == "absolute"
    with pytest.raises(ConfigError, match="'calibrated' or 'absolute'"):
        Settings(rejected_rule="cosine")


def test_rejected_evidence_combines_cosine_keyword_and_edges():
    ev = correlate_rejected(
        [(1, 10, 0.62), (2, 20, 0.40), (3, 30, 0.30)], keywords={2: 0.3},
        links={3: {("p", "dec-a")}}, seed_slugs=[("p", "dec-a")], calibration=_null(0.3),
        keyword_weight=1.5, edge_bonus=0.2)
    by_doc = {e.doc_id: e for e in ev}
    assert by_doc[1].score == pytest.approx((0.62 - 0.3) / 0.7)
    assert by_doc[2].score == pytest.approx((0.40 - 0.3) / 0.7 + 0.45)
    assert by_doc[3].linked and by_doc[3].score == pytest.approx(0.2)
    assert [e.doc_id for e in ev] == [2, 1, 3]


def test_history_question_puts_the_predecessor_next_to_its_successor():
    v2 = _hit(1, 0.6, slug="dec-v2", title="Dagster+ for pipeline orchestration")
    other = _hit(2, 0.5, slug="runbook")
    v1 = _hit(3, 0.4, slug="dec-v1", title="Self-hosted Airflow for pipeline orchestration",
              status="superseded")
    edges = {("default", "dec-v2"): [("default", "dec-v1")]}
    out, moved = promote_predecessors("Why did we move off Airflow?", [v2, other, v1], edges,
                                      top=5)
    assert [h.document.slug for h in out] == ["dec-v2", "dec-v1", "runbook"]
    assert moved == [("default", "dec-v1")]
    # a current-state question leaves the order alone
    out, moved = promote_predecessors("Which tool orchestrates our pipelines?",
                                      [v2, other, v1], edges, top=5)
    assert [h.document.slug for h in out] == ["dec-v2", "runbook", "dec-v1"] and not moved
    # the successor must be in the top-k
    out, _ = promote_predecessors("Why did we move off Airflow?", [other, v2, v1], edges, top=1)
    assert [h.document.slug for h in out] == ["runbook", "dec-v2", "dec-v1"]


def test_names_predecessor_needs_a_whole_word_of_the_old_title_only():
    assert not names_predecessor("how does the dispatcher plan routes", "route planning",
                                 "OR-Tools solver")
    assert names_predecessor("Perché abbiamo abbandonato OneSignal?",
                             "notifiche push con OneSignal", "Firebase Cloud Messaging")


def test_an_accepted_decision_linked_to_a_rejected_one_ranks_above_it_when_close():
    from kb_retriever.ranking.rerank import Scored
    from kb_retriever.ranking.signals import TERMS
    from kb_retriever.search.rejected_channel import unit_vectors, yield_to_accepted

    from .factories import make_candidate

    rej = canonical_doc(1, slug="rej-jwt", canonical_type="rejected-approach")
    dec = canonical_doc(2, slug="dec-oidc")
    other = canonical_doc(3, slug="runbook")
    pool = unit_vectors([_rejected_row(10, 1, [1.0, 0.0], ("dec-oidc",))])

    def scored(chunk_id, doc, score):
        return Scored(score, make_candidate(chunk_id, doc=doc), dict.fromkeys(TERMS, 0.0))

    close = [scored(10, rej, 1.0), scored(30, other, 0.95), scored(20, dec, 0.9)]
    assert [s.document.slug for s in yield_to_accepted(close, pool, ratio=0.88)[0]] == [
        "dec-oidc", "rej-jwt", "runbook"]
    far = [scored(10, rej, 1.0), scored(20, dec, 0.6)]
    assert [s.document.slug for s in yield_to_accepted(far, pool, ratio=0.88)[0]] == [
        "rej-jwt", "dec-oidc"]
    # a project index links to every record (transit's start page and "should we run our own
    # Kafka?"): it is navigation, not the decision the rejected idea lost to, and stays put
    hub = canonical_doc(4, slug="index", canonical_type="project-index")
    hub_pool = unit_vectors([_rejected_row(10, 1, [1.0, 0.0], ("index",))])
    ranked = [scored(10, rej, 1.0), scored(40, hub, 0.95)]
    assert yield_to_accepted(ranked, hub_pool, ratio=0.0) == (ranked, set())


def test_the_rejected_channel_reads_the_keyword_term_by_name(monkeypatch):
    """A signal inserted before ``keyword`` in the table changes nothing the channel reads:
    the scored terms are addressed by name, not by position (issue 24)."""
    import importlib

    from kb_retriever.ranking.rerank import rank
    from kb_retriever.ranking.signals import SIGNALS, Signal
    from kb_retriever.search.rejected_channel import decide_rejected, unit_vectors

    from .factories import make_candidate, make_settings

    rej = canonical_doc(1, slug="rej-jwt", canonical_type="rejected-approach")
    other = canonical_doc(2, slug="runbook")
    cands = [make_candidate(10, doc=rej, sim=0.5, text="long lived jwt tokens"),
             make_candidate(20, doc=other, sim=0.6, text="rotation runbook")]
    pool = unit_vectors([_rejected_row(10, 1, [1.0, 0.0])])
    settings = make_settings()

    def keyword_evidence():
        ranked = rank("jwt tokens", cands, settings)
        channel = decide_rejected(pool, [1.0, 0.0], ranked, _null(0.2), settings)
        return {e.doc_id: e.keyword for e in channel.evidence}

    before = keyword_evidence()
    assert before[1] > 0
    extra = Signal("novelty", "vector_weight", "additive", lambda e: 0.5)
    rerank_module = importlib.import_module("kb_retriever.ranking.rerank")
    monkeypatch.setattr(rerank_module, "SIGNALS", (extra, *SIGNALS))
    assert next(iter(rank("jwt tokens", cands, settings)[0].terms)) == "novelty"
    assert keyword_evidence() == before


def test_a_rejected_record_far_below_the_answer_is_not_warned_about():
    """Decision 0016: the ⚠ block holds what bears on the question as the context does: a
    rejected record correlates only when its margin and keyword signal reach the cutoff's
    share of the best of the top's evidence."""
    from kb_retriever.ranking.rerank import rank
    from kb_retriever.search.rejected_channel import decide_rejected, unit_vectors

    from .factories import make_candidate, make_settings

    answer = canonical_doc(2, slug="dec-auth")
    # the rule of decision 0016 alone (the question's focus has a test of its own)
    settings = make_settings(rejected_min_evidence=0.1, rejected_focus_ratio=0)
    # the scope's one rejected record, document 1
    pool = unit_vectors([_rejected_row(10, 1, [0.6, 0.8])])
    # cosines 0.6 and 0.95 over a 0.2 null: margins 0.5 and 0.9375, no keyword signal
    ranked = rank("jwt lifetime", [make_candidate(20, doc=answer, sim=0.95,
                                                  text="session handling")], settings)
    assert ranked[0].terms["keyword"] == 0

    def correlated(ratio: float) -> frozenset[int]:
        return decide_rejected(pool, [1.0, 0.0], ranked, _null(0.2), settings, top=5,
                               ratio=ratio).correlated

    assert correlated(0.0) == {1}  # no relative rule: the absolute evidence correlates
    assert correlated(0.5) == {1}  # 0.5 >= 0.5 x 0.9375
    assert correlated(0.6) == frozenset()  # 0.5 < 0.6 x 0.9375


def test_a_rejected_record_is_warned_about_only_when_the_question_is_about_it():
    """Decision 0009, amended 2026-12-05: a correlated rejected record is warned about when
    the question names it or its evidence is at least ``rejected_focus_ratio`` times the best
    other document's in the top; a current-state question on its topic gets no warning."""
    from kb_retriever.ranking.rerank import rank
    from kb_retriever.search.rejected_channel import decide_rejected, unit_vectors

    from .factories import make_candidate, make_settings

    answer = canonical_doc(2, slug="dec-auth", title="Short-lived access tokens")

    def warned(query: str, answer_sim: float, title: str = "Rejected: opaque tokens",
               shared: Callable[[], frozenset[str]] = frozenset,
               **overrides: float) -> frozenset[int]:
        # the rejected record: cosine 0.6 over a 0.2 null, margin 0.5
        pool = unit_vectors([_rejected_row(10, 1, [0.6, 0.8], title=title)])
        settings = make_settings(**{"rejected_min_evidence": 0.1, **overrides})
        ranked = rank(query, [make_candidate(20, doc=answer, sim=answer_sim,
                                             text="session handling")], settings)
        channel = decide_rejected(pool, [1.0, 0.0], ranked, _null(0.2), settings, top=5,
                                  query=query, shared=shared)
        return channel.warns(settings)

    def unread() -> frozenset[str]:
        raise AssertionError("the candidates' shared words were read")

    # the answer's margin 0.9375: the rejected record's 0.5 is no match for it
    assert warned("which token lifetime do we use?", 0.95) == frozenset()
    # ... unless the question names it by a word no other title of the top holds
    assert warned("should we switch to opaque tokens?", 0.95) == {1}
    # and most candidates do not hold ("room" in a knowledge base about hotels)
    assert warned("should we switch to opaque tokens?", 0.95,
                  shared=lambda: frozenset({"opaque"})) == frozenset()
    assert warned("should we switch to short tokens?", 0.95) == frozenset()  # the answer's word
    # an answer of margin 0.375: 0.5 >= 1.2 x 0.375, the question is about the rejected idea
    # (and the candidates' shared words are not read: the evidence decides)
    assert warned("which token lifetime do we use?", 0.5, shared=unread) == {1}
    # nor are they when no record has the evidence
    assert warned("which token lifetime do we use?", 0.95, shared=unread,
                  rejected_min_evidence=5.0) == frozenset()
    assert warned("which token lifetime do we use?", 0.5, rejected_focus_ratio=1.5) == frozenset()
    # a word of three letters or fewer names it only as an acronym, in capitals
    own = "Rejected: our own JWT"
    assert warned("how long do our tokens last?", 0.95, title=own) == frozenset()
    assert warned("why not our own JWT?", 0.95, title=own) == {1}
    assert warned("why not a jwt of our own?", 0.95, title=own) == frozenset()
    # a record with the evidence that ranks first, though the question is not about it, leads:
    # its decision takes its place (test below)
    settings = make_settings(rejected_min_evidence=0.1)
    rej = canonical_doc(1, slug="rej-1", canonical_type="rejected-approach",
                        title="Rejected: opaque tokens")
    ranked = rank("which token lifetime do we use?", [
        make_candidate(10, doc=rej, sim=0.99, text="opaque"),
        make_candidate(20, doc=answer, sim=0.95, text="session handling")], settings)
    assert ranked[0].document.id == 1
    pool = unit_vectors([_rejected_row(10, 1, [0.6, 0.8], title="Rejected: opaque tokens")])
    channel = decide_rejected(pool, [1.0, 0.0], ranked, _null(0.2), settings, top=5,
                              query="which token lifetime do we use?")
    assert channel.correlated == frozenset() and channel.leads == 1
    # ratio 0: every correlated record is warned about, as before the rule
    assert warned("which token lifetime do we use?", 0.95, rejected_focus_ratio=0) == {1}


def test_a_rejected_record_first_for_a_question_not_about_it_gives_its_place_to_its_decision():
    """Decision 0009, amended 2026-12-05: the record with the evidence that ranks first though
    the question is not about it (``leads``) lets the accepted decision linked to it take its
    place, then leaves every list; it takes no part in the placement of the others."""
    from kb_retriever.ranking.rerank import Scored
    from kb_retriever.ranking.signals import TERMS
    from kb_retriever.search.rejected_channel import RejectedChannel, place_by_channel, unit_vectors

    from .factories import make_candidate, make_settings

    lead = canonical_doc(1, slug="rej-guarantor", canonical_type="rejected-approach",
                         title="Rejected: a guarantor for the fees")
    other = canonical_doc(2, slug="rej-vouchers", canonical_type="rejected-approach",
                          title="Rejected: paper vouchers")
    dec = canonical_doc(3, slug="dec-billing", title="Billing by bank slip")
    note = canonical_doc(4, slug="runbook-late-fees", title="Late fees runbook")
    pool = unit_vectors([_rejected_row(10, 1, [1.0, 0.0], ("dec-billing",)),
                         _rejected_row(20, 2, [1.0, 0.0])])

    def scored(chunk_id, doc, score):
        return Scored(score, make_candidate(chunk_id, doc=doc), dict.fromkeys(TERMS, 0.0))

    ranked = [scored(10, lead, 1.0), scored(40, note, 0.9), scored(30, dec, 0.8)]
    channel = RejectedChannel("calibrated", correlated=frozenset(), leads=1)
    out, moved, yielded = place_by_channel("when are late fees charged?", ranked, channel, pool,
                                           make_settings(), top=5, shared=frozenset)
    assert [s.document.slug for s in out] == ["dec-billing", "runbook-late-fees"]
    assert yielded == {30} and moved == []
    # a warned record right after it is first once it leaves: it keeps its one chunk in primary
    ranked = [scored(10, lead, 1.0), scored(20, other, 0.95), scored(30, dec, 0.8)]
    channel = RejectedChannel("calibrated", correlated=frozenset({2}), leads=1)
    out, moved, _ = place_by_channel("when are late fees charged?", ranked, channel, pool,
                                     make_settings(), top=5, shared=frozenset)
    assert [s.document.slug for s in out] == ["dec-billing", "rej-vouchers"] and moved == []
    # no leading record: nothing yields for a record that does not correlate
    channel = RejectedChannel("calibrated", correlated=frozenset())
    out, _, yielded = place_by_channel("when are late fees charged?", ranked, channel, pool,
                                       make_settings(), top=5, shared=frozenset)
    assert [s.document.slug for s in out] == ["dec-billing"] and yielded == set()
