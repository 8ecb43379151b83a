"""Search features against PostgreSQL: filters, projects, mentions, synonyms, async, CLI."""

from __future__ import annotations

import json

import pytest

from kb_retriever import FilterError, InputError, Settings
from kb_retriever.cli import main as cli_main
from kb_retriever.search.modes import Legs

pytestmark = pytest.mark.db

DOCS = {
    "hr/leave.md": "---\ntitle: Leave policy\nupdated: 2024-01-10\ntags: [hr]\nteam: people\n---\n"
                   "# Leave policy\n\nEmployees get 25 days of annual leave per year.",
    "hr/deep/parental.md": "---\nupdated: 2026-06-01\ntags: [hr, family]\nteam: people\n---\n"
                           "# Parental leave\n\nParental leave is 20 weeks at full pay.",
    "eng/deploys.md": "---\nupdated: 2026-10-01\ntags: [eng]\nteam: platform\nlevel: 3\n---\n"
                      "# Deploys\n\nDeploys run every weekday through the release train.",
    "eng/zebra.md": "# Zebra\n\nAn unrelated note about striped animals in the savanna.",
}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("features")
    for rel, text in DOCS.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


@pytest.fixture
def kb(make_kb, corpus):
    # filters and features, not the adaptive cutoff: primary holds whatever they let through
    kb = make_kb(settings=Settings(context_cutoff=0))
    kb.ingest([corpus])
    return kb


def keys(result):
    return [h.document.doc_key for h in result.primary]


def test_folder_globs_dates_tags_metadata(kb):
    q = "leave deploys policy"
    assert set(keys(kb.search(q, filters={"folder_globs": ["hr/**"]}))) == {"leave", "parental"}
    assert set(keys(kb.search(q, filters={"folder_globs": ["hr/*"]}))) == {"leave"}
    assert "leave" not in keys(kb.search(q, filters={"date_from": "2025-01-01"}))
    assert set(keys(kb.search(q, filters={"tags": ["family", "eng"]}))) == {"parental", "deploys"}
    assert keys(kb.search(q, filters={"metadata": {"team": "platform"}})) == ["deploys"]
    assert keys(kb.search(q, filters={"metadata": {"level": {"$gte": 3}}})) == ["deploys"]
    assert keys(kb.search(q, filters={"metadata": {"level": {"$gt": 3}}})) == []
    assert "deploys" not in keys(kb.search(q, filters={"metadata": {"team": {"$ne": "platform"}}}))
    assert keys(kb.search("striped zebra deploys", filters={
        "metadata": {"level": {"$exists": False}}, "folder_globs": ["eng/**"]})) == ["zebra"]
    assert kb.search(q, filters={"source_types": ["pdf"]}).primary == ()


def test_bad_input_is_typed(kb):
    with pytest.raises(FilterError):
        kb.search("x", filters={"nope": 1})
    with pytest.raises(InputError):
        kb.search("   ")
    with pytest.raises(InputError):
        kb.search("x", limit=0)


def test_several_projects_really_search_all(make_kb, corpus, tmp_path):
    kb = make_kb()
    kb.ingest([corpus], project="a")
    other = tmp_path / "b"
    other.mkdir()
    (other / "b-only.md").write_text("# Leave in B\n\nProject B grants leave on birthdays.")
    kb.ingest([other], project="b")
    assert "b-only" not in keys(kb.search("leave birthdays", project="a"))
    both = kb.search("leave birthdays", project=["a", "b"])
    # "leave" holds one of the two words: the adaptive cutoff may move it to the runner-ups,
    # and the ranking still holds it
    ranking = keys(both) + [h.document.doc_key for h in both.runner_up]
    assert "b-only" in keys(both) and "leave" in ranking
    assert both.meta["projects"] == ["a", "b"]


def test_mention_pulls_a_document_outside_the_pool(kb):
    plain = kb.search("annual leave days", limit=3)
    assert "zebra" not in keys(plain) + [h.document.doc_key for h in plain.runner_up]
    zebra_id = next(h.document.id for h in kb.search("striped animals savanna").primary
                    if h.document.doc_key == "zebra")
    boosted = kb.search("annual leave days", limit=3, mention_doc_ids=[zebra_id])
    assert "zebra" in keys(boosted)
    zebra = next(h for h in boosted.primary if h.document.doc_key == "zebra")
    assert zebra.scores.mention_boost == pytest.approx(0.5)


def test_synonyms_expand_the_query(make_kb, tmp_path):
    kb = make_kb()
    (tmp_path / "pto.md").write_text("# Time off\n\nRequest PTO in the HR portal two weeks ahead.")
    (tmp_path / "other.md").write_text("# Holidays\n\nThe office closes on public holidays.")
    kb.ingest([tmp_path])
    without = kb.search("vacation request", limit=1)
    kb.add_synonyms("vacation", ["pto", "time off"])
    with_syn = kb.search("vacation request", limit=1)
    assert with_syn.meta["search_strategy"]["synonym_phrases"] == ["pto", "time off"]
    assert keys(with_syn) == ["pto"]
    assert without.meta["search_strategy"]["synonym_phrases"] == []


async def test_async_matches_sync(kb):
    sync = kb.search("parental leave weeks", limit=3)
    result = await kb.asearch("parental leave weeks", limit=3)
    assert [(h.chunk_id, round(h.score, 9)) for h in result.primary] == [
        (h.chunk_id, round(h.score, 9)) for h in sync.primary]
    await kb.aclose()


def test_cli_search_json_contract_and_errors(example_kb, capsys):
    kb = example_kb
    code = cli_main(["--database-url", kb.url, "search", "what cache layer did we standardise on?",
                     "--json", "--limit", "2"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    assert set(out) == {"primary", "expanded", "rejected", "runner_up", "meta"}
    chunk = out["primary"][0]
    assert {"chunk_id", "text", "heading_path", "score", "scores", "origin", "document"} <= set(chunk)
    assert {"slug", "title", "source_path", "doc_key", "is_canonical", "canonical_type",
            "canonical_status", "retrieval_priority", "evidence_tier"} <= set(chunk["document"])
    assert cli_main(["--database-url", kb.url, "search", " "]) == 2
    err = capsys.readouterr().err
    assert "query is empty" in err and "Traceback" not in err
    assert cli_main(["--database-url", kb.url, "search", "cache layer", "--explain"]) == 0
    assert "canonical_boost=" in capsys.readouterr().out
    assert cli_main(["--database-url", kb.url, "prompt", "cache layer"]) == 0
    assert "## Context" in capsys.readouterr().out


def test_search_sql_is_printable(kb):
    text = kb.search_sql("leave", filters={"tags": ["hr"]})
    assert "vec AS MATERIALIZED" in text and "'{hr}'" not in text  # parameters stay parameters


def test_settings_mutation_does_not_leak(make_kb):
    base = Settings()
    kb = make_kb(settings=base.model_copy(update={"default_limit": 2}))
    assert kb.settings.default_limit == 2 and base.default_limit == 8


def test_asearch_from_successive_event_loops(make_kb, corpus):
    import asyncio

    kb = make_kb()
    kb.ingest([corpus])
    first = asyncio.run(kb.asearch("parental leave", limit=2))
    second = asyncio.run(kb.asearch("parental leave", limit=2))  # a new loop: a new async pool
    assert [h.chunk_id for h in first.primary] == [h.chunk_id for h in second.primary]


def test_a_second_running_event_loop_gets_a_clear_error(make_kb, corpus):
    """Two threads, each with its own running loop, shared one async pool: each loop took it
    from the other, and searches failed with "Lock is bound to a different event loop" (90 of
    120). One loop at a time owns the pool; another that runs meanwhile is told so, and takes
    the pool once the first loop has ended."""
    import asyncio
    import threading

    from kb_retriever import ConfigError

    kb = make_kb()
    kb.ingest([corpus])
    searched, release = threading.Event(), threading.Event()

    async def hold() -> None:
        await kb.asearch("parental leave", limit=2)
        searched.set()
        await asyncio.to_thread(release.wait, 60)

    owner = threading.Thread(target=asyncio.run, args=(hold(),))
    owner.start()
    try:
        assert searched.wait(60)
        with pytest.raises(ConfigError, match="another thread"):
            asyncio.run(kb.asearch("parental leave", limit=2))
    finally:
        release.set()
        owner.join(60)
    assert asyncio.run(kb.asearch("parental leave", limit=2)).primary


def test_mentions_filter_in_filter_mode(make_kb, corpus):
    """``KB_MENTIONS_MODE=filter`` read ``filters.doc_ids`` only: ``mention_doc_ids`` neither
    filtered nor boosted."""
    kb = make_kb(settings=Settings(context_cutoff=0, mentions_mode="filter"))
    kb.ingest([corpus])
    zebra_id = next(h.document.id for h in kb.search("striped animals savanna").primary
                    if h.document.doc_key == "zebra")
    question = "annual leave and striped animals in the savanna"
    assert len(keys(kb.search(question, limit=3))) > 1
    assert keys(kb.search(question, limit=3, mention_doc_ids=[zebra_id])) == ["zebra"]


def test_mentioned_documents_stay_in_filter_mode_as_in_boost_mode(make_kb, corpus):
    """In filter mode the adaptive cutoff could move a mentioned document with weak evidence
    to runner_up: only boost mode's mentions were kept (decision 0014: what the question
    @mentions always stays)."""
    for mode in ("boost", "filter"):
        kb = make_kb(settings=Settings(mentions_mode=mode))
        kb.ingest([corpus])
        ids = {h.document.doc_key: h.document.id for h in kb.search(
            "leave deploys zebra", limit=4, legs=Legs(context_cutoff=0)).primary}
        found = kb.search("annual leave days per year for employees, animals", limit=4,
                          mention_doc_ids=[ids["leave"], ids["zebra"]])
        assert {"leave", "zebra"} <= set(keys(found)), (mode, keys(found))


def test_every_hit_the_cutoff_moves_stays_a_runner_up_for_top_k(make_kb, corpus):
    """The cut hits were cut again to ``KB_RUNNER_UP_LIMIT`` (0 here), so ``top_k(k)``, which
    framework contracts that promise k hits return, gave fewer than k though the search had
    found them."""
    kb = make_kb(settings=Settings(runner_up_limit=0))
    kb.ingest([corpus])
    found = kb.search("parental leave weeks at full pay", limit=4,
                      legs=Legs(min_similarity=-1.0))
    assert found.meta["retrieval_stats"]["cut_to_runner_up"] > 0 and len(found.primary) < 4
    assert len(found.top_k(4)) == 4
    assert len(found.runner_up) == found.meta["retrieval_stats"]["cut_to_runner_up"]


def test_a_write_by_one_knowledge_base_reaches_another_of_the_process(new_database, tmp_path):
    """The read cache was each knowledge base's own, and a write cleared only the writer's:
    another knowledge base of the process on the same database searched with the synonyms it
    had cached for 300 s, and kept its cached calibration after a ``bulk_load`` to it."""
    from kb_retriever import HashingEmbedder, KnowledgeBase
    from kb_retriever.ingest.loaders import parse_document
    from kb_retriever.write.bulk import bulk_load

    url = new_database()
    (tmp_path / "pto.md").write_text("# Time off\n\nRequest PTO in the HR portal two weeks ahead.")
    (tmp_path / "other.md").write_text("# Holidays\n\nThe office closes on public holidays.")
    with KnowledgeBase(Settings(), embedder=HashingEmbedder(256), database_url=url) as writer, \
            KnowledgeBase(Settings(), embedder=HashingEmbedder(256), database_url=url) as reader:
        writer.ingest([tmp_path])
        assert reader.search("vacation request").meta["search_strategy"]["synonym_phrases"] == []
        writer.add_synonyms("vacation", ["pto"])
        for consistent in (False, True):
            found = reader.search("vacation request", consistent=consistent)
            assert found.meta["search_strategy"]["synonym_phrases"] == ["pto"]
        assert not reader.search("ledger close", project="new").meta["calibration"]["calibrated"]
        # the same file, bulk-loaded into the other project (bulk_load calibrates it)
        draft = parse_document(tmp_path / "pto.md", root=tmp_path, settings=writer.settings)
        vectors = writer.embedder.embed_documents([c.text for c in draft.chunks])
        bulk_load(writer.url, [("new", draft, vectors)], tenant=writer.tenant,
                  embedder=writer.embedder)
        assert reader.search("ledger close", project="new").meta["calibration"]["calibrated"]
