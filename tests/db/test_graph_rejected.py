"""Graph expansion and rejected-approach injection (reference §12–13 cases, plus our fixes)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from kb_retriever import Origin, Settings

pytestmark = pytest.mark.db


def doc(slug: str, *, type_: str = "decision", status: str = "accepted", body: str,
        edges: dict[str, list[str]] | None = None, summary: str | None = None) -> str:
    lines = [f"slug: {slug}", f"type: {type_}", f"status: {status}"]
    if summary:
        lines.append(f"summary: {summary}")
    for kind, targets in (edges or {}).items():
        lines.append(f"{kind}: [{', '.join(repr('[[' + t + ']]') for t in targets)}]")
    fm = "\n".join(lines)
    return f"---\n{fm}\n---\n# {slug}\n\n{textwrap.dedent(body).strip()}\n"


def write_kb(root: Path, docs: dict[str, str]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for slug, text in docs.items():
        (root / f"{slug}.md").write_text(text)
    return root


GRAPH = {
    "seed": doc("seed", body="alpha beta gamma seed decision about widgets and widget caching",
                edges={"depends_on": ["hop1"], "implements": ["draft-target"],
                       "uses": ["not-allowed"], "related": ["superseded-target", "missing"]}),
    "hop1": doc("hop1", type_="module-kb", body="the hop one module.\n\n## Widgets\n\nwidget"
                " caching internals and widget eviction", edges={"depends_on": ["hop2"]}),
    "hop2": doc("hop2", type_="module-kb", body="the hop two module stores delta records"),
    "draft-target": doc("draft-target", status="draft", body="a draft about widgets"),
    "superseded-target": doc("superseded-target", status="superseded", body="old widgets"),
    "not-allowed": doc("not-allowed", body="reached only through a uses edge"),
    "child": doc("child", type_="runbook", body="a runbook that depends on the seed",
                 edges={"depends_on": ["seed"]}),
    "rej-one": doc("rej-one", type_="rejected-approach", summary="We rejected widget sharding.",
                   body="widget sharding across regions was rejected for widget caching"),
    "rej-draft": doc("rej-draft", type_="rejected-approach", status="draft",
                     body="widget caching rejected draft approach"),
    "rej-far": doc("rej-far", type_="rejected-approach", body="completely unrelated zebra tax"),
}
QUERY = "widget caching seed decision"


@pytest.fixture
def graph_kb(make_kb, tmp_path):
    def make(**settings):
        kb = make_kb(settings=Settings(**{"rejected_rule": "absolute",
                                          "rejected_min_similarity": 0.2, **settings}))
        kb.ingest([write_kb(tmp_path / "kb", GRAPH)])
        return kb
    return make


def slugs(hits):
    return [h.document.slug for h in hits]


def test_one_hop_outgoing_over_allowed_types_only(graph_kb):
    result = graph_kb().search(QUERY, limit=1)
    assert slugs(result.primary) == ["seed"]
    assert slugs(result.expanded) == ["hop1"]  # draft, superseded, dangling, `uses` dropped
    hit = result.expanded[0]
    assert (hit.origin, hit.edge_type, hit.from_slug, hit.hop) == (
        Origin.GRAPH_EXPANSION, "depends_on", "seed", 1)
    # the neighbour's chunk most similar to the query, not its first chunk
    assert "widget" in hit.text and hit.heading_path.endswith("Widgets")
    assert hit.score == pytest.approx(hit.similarity * 0.8)


def test_multi_hop_with_decay(graph_kb):
    result = graph_kb(graph_expansion_hops=2).search(QUERY, limit=1)
    by_slug = {h.document.slug: h for h in result.expanded}
    assert set(by_slug) == {"hop1", "hop2"}
    assert by_slug["hop2"].hop == 2 and by_slug["hop2"].from_slug == "hop1"
    assert by_slug["hop2"].scores.hop_decay == pytest.approx(0.5)


def test_incoming_direction(graph_kb):
    result = graph_kb(graph_expansion_direction="incoming").search(QUERY, limit=1)
    assert slugs(result.expanded) == ["child"]
    result = graph_kb(graph_expansion_direction="both").search(QUERY, limit=1)
    assert set(slugs(result.expanded)) == {"hop1", "child"}


def test_expansion_follows_the_walked_direction_only(graph_kb):
    """A seed without an edge in the walked direction expands to nothing; walking incoming
    edges finds the document that depends on it."""
    query = "hop two module stores delta records"

    def found(kb, q):
        result = kb.search(q, limit=1)
        return slugs(result.primary), slugs(result.expanded)

    assert found(graph_kb(), query) == (["hop2"], [])  # hop2 has no outgoing edge
    assert found(graph_kb(graph_expansion_direction="incoming"), query) == (["hop2"], ["hop1"])
    assert found(graph_kb(), QUERY) == (["seed"], ["hop1"])


def test_node_cap_disabled_and_filters(graph_kb):
    assert len(graph_kb(graph_expansion_hops=3, graph_expansion_max_nodes=1)
               .search(QUERY, limit=1).expanded) == 1
    assert graph_kb(graph_expansion_enabled=False).search(QUERY, limit=1).expanded == ()
    kb = graph_kb()
    filtered = kb.search(QUERY, limit=1, filters={"canonical_types": ["decision"]})
    assert filtered.expanded == ()  # hop1 is a module-kb: the user's filter applies to neighbours


def test_no_primary_document_is_repeated(graph_kb):
    result = graph_kb(graph_expansion_direction="both").search(QUERY, limit=5)
    primary_docs = {h.document.id for h in result.primary}
    assert not primary_docs & {h.document.id for h in result.expanded}
    uids = [h.uid for h in result.primary + result.expanded + result.rejected]
    assert len(uids) == len(set(uids))


def test_a_related_chunk_is_not_a_runner_up_too(graph_kb):
    """Expansion skips the documents that stay in primary, and picks a neighbour's chunk
    nearest the question: often a candidate ranked below the top, which stayed in
    ``runner_up`` as well (``top_k`` then showed it twice)."""
    for limit in (1, 2):
        result = graph_kb(graph_expansion_direction="both").search(QUERY, limit=limit)
        assert result.expanded
        related = {h.chunk_id for h in result.expanded}
        assert not related & {h.chunk_id for h in result.runner_up}, limit
        shown = [h.chunk_id for h in [*result.top_k(limit + 3), *result.expanded]]
        assert len(shown) == len(set(shown))


def test_non_canonical_kb_degrades_to_empty(make_kb, tmp_path):
    root = tmp_path / "plain"
    root.mkdir()
    (root / "a.md").write_text("# A\n\nwidget caching notes, see [[b]]")
    (root / "b.md").write_text("# B\n\nmore widget caching")
    kb = make_kb()
    kb.ingest([root])
    out = kb.search("widget caching")
    assert out.primary and out.expanded == () and out.rejected == ()


def test_rejected_threshold_cap_status_and_summary(graph_kb):
    kb = graph_kb()
    result = kb.search(QUERY)
    assert slugs(result.rejected) == ["rej-one"]  # draft and far-off ones are not injected
    rej = result.rejected[0]
    assert rej.origin is Origin.REJECTED and rej.similarity >= 0.2
    assert rej.document.summary == "We rejected widget sharding."
    # above every cosine: the pool injects nothing, but a rejected document that stands in
    # primary is always shown in the warning block (issue 16)
    strict = graph_kb(rejected_min_similarity=0.99)
    assert strict.search(QUERY, limit=1).rejected == ()
    # the adaptive cutoff off, so that the rejected document stands in primary
    shown = graph_kb(rejected_min_similarity=0.99, context_cutoff=0).search(QUERY)
    assert "rej-one" in slugs(shown.primary) and slugs(shown.rejected) == ["rej-one"]
    assert graph_kb(rejected_injection_enabled=False).search(QUERY).rejected == ()


def test_channels_are_tenant_and_project_isolated(make_kb, tmp_path):
    kb = make_kb(settings=Settings(rejected_rule="absolute", rejected_min_similarity=0.2))
    root = write_kb(tmp_path / "kb", GRAPH)
    kb.ingest([root], tenant="t1", project="p1")
    other = dict(GRAPH)
    other["hop1"] = other["hop1"].replace("hop one module", "OTHER TENANT hop one")
    other["rej-one"] = other["rej-one"].replace("widget sharding", "OTHER TENANT sharding")
    kb.ingest([write_kb(tmp_path / "other", other)], tenant="t2", project="p1")
    kb.ingest([write_kb(tmp_path / "other2", other)], tenant="t1", project="p2")
    for tenant, project, marker_expected in (("t1", "p1", False), ("t2", "p1", True),
                                             ("t1", "p2", True)):
        result = kb.search(QUERY, limit=1, tenant=tenant, project=project)
        texts = [h.text for h in result.primary + result.expanded + result.rejected]
        assert result.expanded and result.rejected
        assert all(h.document.tenant_id == tenant and h.document.project_key == project
                   for h in result.primary + result.expanded + result.rejected + result.runner_up)
        assert any("OTHER TENANT" in t for t in texts) is marker_expected


def test_hub_seed_contributes_at_most_max_per_seed(make_kb, tmp_path):
    targets = [f"t{i}" for i in range(6)]
    docs = {"hub": doc("hub", type_="project-index", body="widget caching hub index",
                       edges={"related": targets})}
    for t in targets:
        docs[t] = doc(t, type_="module-kb", body=f"module {t} about widget caching")
    kb = make_kb(settings=Settings(graph_expansion_max_per_seed=2))
    kb.ingest([write_kb(tmp_path / "hub", docs)])
    result = kb.search("widget caching hub index", limit=1)
    assert slugs(result.primary) == ["hub"]
    assert len(result.expanded) == 2
    assert all(h.from_slug == "hub" for h in result.expanded)


def test_expansion_starts_from_the_answer_and_keeps_what_it_links_to(make_kb, tmp_path):
    """Decision 0016: only the first canonical document of the top seeds the expansion (the
    second one's neighbour stays out), and a document the seed links to needs only the linked
    share of the best evidence to stay in primary."""
    docs = {
        "answer": doc("answer", body="widget caching decision: widget caching with a shared "
                      "widget cache", edges={"related": ["linked", "n-answer"]}),
        "linked": doc("linked", type_="module-kb", body="the widget caching module"),
        "other": doc("other", type_="module-kb", body="the widget caching notes of another team",
                     edges={"related": ["n-other"]}),
        "n-answer": doc("n-answer", type_="runbook", body="restart the shared widget cache"),
        "n-other": doc("n-other", type_="runbook", body="restart the notes service"),
    }
    root = write_kb(tmp_path / "seeded", docs)
    query = "widget caching decision"

    def search(**settings):
        kb = make_kb(settings=Settings(**settings))
        kb.ingest([root])
        return kb.search(query, limit=3)

    wide = search(context_cutoff=0)  # every top document stays
    assert slugs(wide.primary)[0] == "answer" and {"linked", "other"} <= set(slugs(wide.primary))
    assert "n-answer" in slugs(wide.expanded) and "n-other" not in slugs(wide.expanded)
    # only as good as the best stays, unless the answer links to it
    strict = search(context_cutoff=1.0, context_cutoff_linked=0.0)
    assert slugs(strict.primary)[:1] == ["answer"] and "linked" in slugs(strict.primary)
    assert "other" not in slugs(strict.primary)
    assert "other" in {h.document.slug for h in strict.runner_up if h.metadata.get("context_cutoff")}
    # without the graph the cutoff knows no links
    alone = search(context_cutoff=1.0, context_cutoff_linked=0.0, graph_expansion_enabled=False)
    assert slugs(alone.primary) == ["answer"]


@pytest.mark.parametrize("answer", ["decision", "incident"])
def test_a_decisions_runbook_in_the_top_gets_no_linked_share(make_kb, tmp_path, answer):
    """Decision 0021: the runbook a decision links to is its reference, not its context: in
    primary it needs the share of any document, not the linked one. The runbook an incident
    links to keeps the linked share."""
    docs = {
        "answer": doc("answer", type_=answer, body="widget caching decision: widget caching "
                      "with a shared widget cache", edges={"related": ["linked"]}),
        "linked": doc("linked", type_="runbook", body="the widget caching runbook"),
    }
    kb = make_kb(settings=Settings(context_cutoff=1.0, context_cutoff_linked=0.0))
    kb.ingest([write_kb(tmp_path / answer, docs)])
    result = kb.search("widget caching decision", limit=3)
    assert slugs(result.primary)[:1] == ["answer"]
    assert ("linked" in slugs(result.primary)) == (answer == "incident")


def _cited_kb(root: Path, *, answer: str, neighbours: str) -> Path:
    """An answer of type ``answer`` that cites one neighbour inline and lists two (one of them
    cited by another top document), the neighbours of type ``neighbours``."""
    return write_kb(root, {
        "answer": doc("answer", type_=answer, body="widget caching decision: widget caching "
                      "with a shared cache, see [[cited]] for the rollout",
                      edges={"related": ["listed", "named-elsewhere"]}),
        "other": doc("other", type_="module-kb", body="widget caching decision notes of the "
                     "platform team, see [[named-elsewhere]]"),
        "cited": doc("cited", type_=neighbours, body="roll out the shared cache by region"),
        "listed": doc("listed", type_=neighbours, body="roll out the shared cache by region, too"),
        "named-elsewhere": doc("named-elsewhere", type_=neighbours,
                               body="roll out the shared cache by region, again"),
    })


def _expanded(make_kb, root: Path, **settings) -> set[str]:
    kb = make_kb(settings=Settings(**settings))
    kb.ingest([root])
    result = kb.search("widget caching decision", limit=2)
    assert slugs(result.primary)[0] == "answer"
    return set(slugs(result.expanded))


def test_a_generic_link_needs_a_passage_to_name_it_or_a_primary_share(make_kb, tmp_path):
    """Decision 0018: a neighbour that only a ``related`` link brings needs the share of the best
    evidence that a primary document needs, unless a passage of the top (the answer's or
    another's) links to it inline; then the lower linked share is enough."""
    root = _cited_kb(tmp_path / "cited", answer="decision", neighbours="module-kb")
    strict = {"context_cutoff": 1.0, "context_cutoff_linked": 0.0}
    assert _expanded(make_kb, root, **strict) == {"cited", "named-elsewhere"}
    # no cutoff, no floor: every link of the answer
    assert _expanded(make_kb, root, context_cutoff=0.0) == {"cited", "listed", "named-elsewhere"}


@pytest.mark.parametrize("answer", ["decision", "incident"])
def test_a_decisions_runbooks_need_the_primary_share_even_when_cited(make_kb, tmp_path, answer):
    """Decision 0021: a runbook, standard or concept that a decision links to is its reference,
    named inline as a matter of writing: it needs the share of any other neighbour even when a
    passage of the top cites it. From another document (an incident), a cited runbook keeps
    the lower linked share."""
    root = _cited_kb(tmp_path / answer, answer=answer, neighbours="runbook")
    strict = {"context_cutoff": 1.0, "context_cutoff_linked": 0.0}
    assert _expanded(make_kb, root, **strict) == (
        set() if answer == "decision" else {"cited", "named-elsewhere"})
    assert _expanded(make_kb, root, context_cutoff=0.0) == {"cited", "listed", "named-elsewhere"}


def test_a_refused_question_gets_no_related_context(make_kb, tmp_path):
    """The gate's refusal holds for the related block as it does for the ⚠ block: a question
    nothing answers is not given the neighbours of its nearest miss (a strong edge included)."""
    docs = {"seed": doc("seed", body="widget caching with a shared widget cache",
                        edges={"depends_on": ["hop1"]}),
            "hop1": doc("hop1", type_="module-kb", body="the widget cache module",
                        edges={"depends_on": ["seed"]})}
    root = write_kb(tmp_path / "refused", docs)

    def search(**settings):
        kb = make_kb(settings=Settings(refusal_rule="absolute", **settings))
        kb.ingest([root])
        return kb.search("widget caching", limit=1)

    answered = search()
    assert not answered.meta["should_refuse"] and slugs(answered.expanded) == ["hop1"]
    # a gate that no match passes: found, not answered
    refused = search(refusal_min_similarity=0.99, refusal_min_rerank_score=10.0)
    assert refused.meta["should_refuse"] and slugs(refused.primary) == ["seed"]
    assert refused.expanded == ()


def test_a_central_page_enters_on_a_strong_edge_and_a_hub_never(make_kb, tmp_path):
    """Decision 0014, amended: a document that links out to ``KB_GRAPH_HUB_MIN_DEGREE`` others
    (an overview, an index in all but its type) is a hub and never a neighbour; one that many
    documents link to (a central module page) enters on a strong edge, not on a generic
    ``related`` link."""
    fillers = {f"note-{i}": doc(f"note-{i}", type_="runbook", body=f"unrelated chore {i}",
                                edges={"related": ["central-typed", "central-generic"]})
               for i in range(10)}
    docs = {
        "answer": doc("answer", body="widget caching decision with a shared widget cache",
                      edges={"depends_on": ["central-typed", "overview"],
                             "related": ["central-generic"]}),
        "central-typed": doc("central-typed", type_="module-kb",
                             body="the widget cache module"),
        "central-generic": doc("central-generic", type_="module-kb",
                               body="the widget cache module, again"),
        "overview": doc("overview", type_="module-kb", body="the widget cache overview",
                        edges={"related": list(fillers)}),
        **fillers,
    }
    kb = make_kb(settings=Settings(context_cutoff=0.0))  # no similarity floor: the edges decide
    kb.ingest([write_kb(tmp_path / "central", docs)])
    result = kb.search("widget caching decision", limit=1)
    assert slugs(result.primary) == ["answer"]
    assert slugs(result.expanded) == ["central-typed"]


def test_the_warning_block_shows_only_what_the_filters_let_the_search_see(make_kb, tmp_path):
    """The ⚠ block ignored the search's filters (graph expansion applies them): a metadata
    filter used to keep a team to its own records still showed another team's rejected
    approach, text and all."""
    def record(slug: str, type_: str, team: str, body: str) -> str:
        return (f"---\nslug: {slug}\ntype: {type_}\nstatus: accepted\nteam: {team}\n---\n"
                f"# {slug}\n\n{body}\n")

    kb = make_kb(settings=Settings(rejected_rule="absolute", rejected_min_similarity=0.2))
    kb.ingest([write_kb(tmp_path / "kb", {
        "dec-queue": record("dec-queue", "decision", "data",
                            "widget queue caching runs on kafka for widget events"),
        "rej-queue": record("rej-queue", "rejected-approach", "sre",
                            "widget queue caching on rabbitmq was rejected for widget events"),
    })])
    query = "widget queue caching for widget events"
    assert slugs(kb.search(query).rejected) == ["rej-queue"]
    assert kb.search(query, filters={"metadata": {"team": "data"}}).rejected == ()
    both = {"metadata": {"team": {"$in": ["data", "sre"]}}}
    assert slugs(kb.search(query, filters=both).rejected) == ["rej-queue"]
    assert kb.search(query, filters={"canonical_types": ["decision"]}).rejected == ()


def test_the_warning_block_keeps_its_cap_for_records_that_never_stood_in_primary(
        make_kb, tmp_path):
    """Placement moved every warned rejected record of the whole candidate pool out of the
    ranking, and the ⚠ block took each of them as "shown in the result", past
    ``KB_REJECTED_INJECTION_MAX_DOCS``: six warnings for a search of one hit and a cap of 2."""
    docs = {f"rej-{i}": doc(f"rej-{i}", type_="rejected-approach",
                            body=f"widget caching variant {i} was rejected for widget caching")
            for i in range(6)}
    docs["seed"] = GRAPH["seed"]
    kb = make_kb(settings=Settings(rejected_rule="absolute", rejected_min_similarity=0.1,
                                   rejected_injection_max_docs=2, context_cutoff=0))
    kb.ingest([write_kb(tmp_path / "kb", docs)])
    result = kb.search(QUERY, limit=1)
    assert len(result.primary) == 1
    shown = [h for h in result.primary if h.document.slug.startswith("rej-")]
    assert len(result.rejected) <= max(2, len(shown)), slugs(result.rejected)


def test_the_warning_shows_a_chunk_the_filters_pass(make_kb, tmp_path):
    """A chunk-level filter (a heading, a chunk's metadata) let a rejected record through when
    any of its chunks passed, then warned with its chunk nearest the question, which the
    filter had excluded: here the Internal section's text for a search of Public sections."""
    from kb_retriever.search.modes import Legs

    kb = make_kb(settings=Settings(rejected_rule="absolute", rejected_min_similarity=0.1))
    kb.ingest([write_kb(tmp_path / "kb", {
        "rej-broker": doc("rej-broker", type_="rejected-approach", body="""
            ## Public

            a message broker was considered

            ## Internal

            widget queue caching on rabbitmq was rejected for widget events
            """)})])
    query = "widget queue caching on rabbitmq for widget events"
    legs = Legs(min_similarity=0.5)  # the Public section is no candidate of the legs
    assert "rabbitmq" in kb.search(query, legs=legs).rejected[0].text
    public = {"$and": [{"heading_path": {"$like": "%Public"}}]}
    warned = kb.search(query, filters=public, legs=legs).rejected
    assert all(h.heading_path == "rej-broker > Public" for h in warned), warned
