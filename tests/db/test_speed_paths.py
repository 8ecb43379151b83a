"""The speed-minded paths of a search, on a real PostgreSQL: cached lexeme statistics, one pooled
connection per search, and broad keyword queries bounded to one posting list."""

from __future__ import annotations

import functools
import subprocess
from pathlib import Path

import pytest

from kb_retriever import HashingEmbedder, KnowledgeBase, Settings
from kb_retriever.search.modes import Legs
from kb_retriever.store.reader import AsyncSearchSession, SearchSession

from ..reliability._util import HELPERS, PYTHON

pytestmark = pytest.mark.db


def _notes(root: Path, texts: list[str], prefix: str = "n") -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for i, text in enumerate(texts):
        (root / f"{prefix}{i:03}.md").write_text(f"# {prefix.upper()} note {i}\n\n{text}\n")
    return root


LEG_STAGES = ("vector_leg", "keyword_leg", "hybrid_legs")
# a question about the rejected Memcached record: graph expansion and the ⚠ block both answer
# it, so every read of a search runs (a question about the current state gets no warning)
PROPOSAL = "can we use memcached as shared cache?"


def _legs_and_checkouts(kb: KnowledgeBase, q: str, monkeypatch
                        ) -> tuple[dict[str, int], int]:
    """(the candidate reads that ran, each with its backend pid; the pool checkouts) of one
    search."""
    pids: dict[str, int] = {}
    fetch = SearchSession._fetch

    def spy(session, req, held):
        answer = fetch(session, req, held)
        if req.stage in LEG_STAGES:
            pids[req.stage] = held[0].info.backend_pid
        return answer

    monkeypatch.setattr(SearchSession, "_fetch", spy)
    pool = kb._pools.sync()
    before = pool.get_stats().get("requests_num", 0)
    result = kb.search(q)
    monkeypatch.undo()
    assert {"catalog", "candidates", "graph", "rejected"} <= set(result.meta["timings_ms"])
    assert result.expanded and result.rejected  # the graph and rejected reads really ran
    return pids, pool.get_stats().get("requests_num", 0) - before


def test_a_search_runs_both_legs_in_one_statement_and_every_read_on_one_connection(
        example_kb, minilm, monkeypatch):
    """In one statement (decision 0015), stemming, both legs, graph expansion and the rejected
    channel share one checkout and one backend. With ``KB_PARALLEL_LEGS=true`` the full-text
    leg runs at once on a second connection, with the same results."""
    q = PROPOSAL
    with KnowledgeBase(Settings(parallel_legs=False), embedder=minilm,
                       database_url=example_kb.url) as one:
        one.search(q)  # warms the synonym, lexeme-statistics and stem caches
        legs, checkouts = _legs_and_checkouts(one, q, monkeypatch)
        assert set(legs) == {"hybrid_legs"} and checkouts == 1
        expected = one.search(q).primary
    with KnowledgeBase(Settings(parallel_legs=True), embedder=minilm,
                       database_url=example_kb.url) as parallel:
        parallel.search(q)
        legs, checkouts = _legs_and_checkouts(parallel, q, monkeypatch)
        assert set(legs) == {"vector_leg", "keyword_leg"}
        assert len(set(legs.values())) == 2 and checkouts == 2
        assert parallel.search(q).primary == expected


def test_the_legs_run_in_one_statement_by_default_and_auto_reads_as_false(
        example_kb, minilm, monkeypatch):
    """One statement is the default (decision 0015, amended on 2026-12-06). ``auto``, the
    default before, reads as false with a DeprecationWarning: a setting that a deployment
    kept still starts, and runs one statement per search."""
    assert Settings().parallel_legs is False
    monkeypatch.setenv("KB_PARALLEL_LEGS", "auto")
    with pytest.warns(DeprecationWarning, match="KB_PARALLEL_LEGS=auto"):
        settings = Settings()
    monkeypatch.delenv("KB_PARALLEL_LEGS")
    assert settings.parallel_legs is False
    with KnowledgeBase(settings, embedder=minilm, database_url=example_kb.url) as kb:
        kb.search(PROPOSAL)  # warms the caches
        legs, checkouts = _legs_and_checkouts(kb, PROPOSAL, monkeypatch)
        assert set(legs) == {"hybrid_legs"} and checkouts == 1


def test_a_pool_of_one_runs_the_legs_on_its_one_connection(example_kb, minilm):
    """A search never waits for a second connection: with none idle, the legs share one."""
    with KnowledgeBase(Settings(pool_min_size=1, pool_max_size=1, pool_timeout_s=2,
                                parallel_legs=True),
                       embedder=minilm, database_url=example_kb.url) as kb:
        q = "what cache layer did we standardise on?"
        # A deadlock would raise StoreError after the pool timeout; the legs' answers are the
        # same on one connection as on two.
        assert [h.chunk_id for h in kb.search(q).primary] == [
            h.chunk_id for h in example_kb.search(q).primary]
        assert kb._pools.sync().get_stats()["pool_size"] == 1


@pytest.mark.parametrize("parallel", [False, True])
async def test_an_async_search_runs_the_legs_as_the_sync_one(example_kb, minilm, monkeypatch,
                                                             parallel):
    """One statement on one connection by default, two connections with KB_PARALLEL_LEGS."""
    q = PROPOSAL
    async with KnowledgeBase(Settings(parallel_legs=parallel), embedder=minilm,
                             database_url=example_kb.url) as kb:
        await kb.asearch(q)
        pids: dict[str, int] = {}
        afetch = AsyncSearchSession._fetch

        async def spy(session, req, held):
            answer = await afetch(session, req, held)
            if req.stage in LEG_STAGES:
                pids[req.stage] = held[0].info.backend_pid
            return answer

        monkeypatch.setattr(AsyncSearchSession, "_fetch", spy)
        pool = await kb._pools.asynchronous()
        before = pool.get_stats().get("requests_num", 0)
        result = await kb.asearch(q)
        assert result.expanded and result.rejected
        assert set(pids) == ({"vector_leg", "keyword_leg"} if parallel else {"hybrid_legs"})
        assert len(set(pids.values())) == (2 if parallel else 1)
        assert pool.get_stats().get("requests_num", 0) - before == (2 if parallel else 1)
        assert result.primary == example_kb.search(q).primary


def test_cached_reads_are_parsed_once(example_kb, monkeypatch):
    """The knowledge base caches a read's parsed answer (Fetch.parse): the lexeme statistics
    and the rejected-approach vectors are parsed once per cache period, not once per search."""
    import kb_retriever.search.pipeline as pipeline
    from kb_retriever.ranking.bm25 import CorpusLexemes

    example_kb.clear_caches()
    parsed: list[str] = []
    stats_parse, vectors_parse = CorpusLexemes.from_rows, pipeline.unit_vectors
    monkeypatch.setattr(CorpusLexemes, "from_rows", staticmethod(
        lambda rows: parsed.append("stats") or stats_parse(rows)))
    monkeypatch.setattr(pipeline, "unit_vectors",
                        lambda rows: parsed.append("vectors") or vectors_parse(rows))
    first = example_kb.search(PROPOSAL)
    second = example_kb.search("which cache did we reject?")
    assert first.rejected and second.meta["lexeme_stats"]  # both reads were used
    assert sorted(parsed) == ["stats", "vectors"]


def _zebra_freq(kb: KnowledgeBase) -> float | None:
    stats = kb.search("zebra crossing", limit=3).meta["lexeme_stats"]
    return stats["freqs"].get("zebra")


def _ingest_elsewhere(url: str, folder: Path) -> None:
    """Ingest ``folder`` from another process, as another writer of the database would (the
    knowledge bases of one process drop their cached reads at each other's writes)."""
    subprocess.run([PYTHON, str(HELPERS / "ingest_worker.py"), url, str(folder), "default",
                    "default", "none", "0"], check=True, timeout=300, capture_output=True)


def test_lexeme_statistics_are_cached_until_their_ttl_or_an_ingest(new_database, tmp_path):
    url = new_database()
    cached = KnowledgeBase(Settings(), database_url=url, embedder=HashingEmbedder(64)).open()
    fresh = KnowledgeBase(Settings(catalog_cache_ttl_seconds=0), database_url=url,
                          embedder=HashingEmbedder(64)).open()
    try:
        cached.ingest([_notes(tmp_path / "a", [f"crossing road number {i}" for i in range(30)])])
        assert _zebra_freq(cached) is None  # not in the corpus yet
        # Another process adds 'zebra' to 20 of 50 chunks and re-analyses the table.
        _ingest_elsewhere(url, _notes(tmp_path / "b", [f"zebra stripes {i}" for i in range(20)],
                                      "z"))
        assert _zebra_freq(fresh) == pytest.approx(0.4, abs=0.05)  # TTL 0: read every search
        assert _zebra_freq(cached) is None  # still this process's cached statistics
        cached.clear_caches()
        assert _zebra_freq(cached) == pytest.approx(0.4, abs=0.05)
        cached.ingest([_notes(tmp_path / "c", ["one more crossing"], "c")])  # clears the cache
        assert _zebra_freq(cached) == pytest.approx(20 / 51, abs=0.05)
    finally:
        for kb in (cached, fresh):
            kb.close()


def test_a_query_of_only_common_lexemes_keeps_its_least_common_one(make_kb, tmp_path):
    """'alpha' is in every chunk and 'beta' in half: both are common (over 10 % of chunks and
    over the match cap), so the FTS leg matches 'beta' alone instead of every chunk."""
    texts = [f"alpha {'beta ' if i % 2 else ''}filler{i}" for i in range(40)]
    kb = make_kb(settings=Settings(fts_match_cap=10, candidate_multiplier=10))
    kb.ingest([_notes(tmp_path / "kb", texts)])
    result = kb.search("alpha beta", limit=10)
    common = result.meta["lexeme_stats"]["freqs"]
    assert common["alpha"] > common["beta"] > 0.1
    hits = [*result.primary, *result.runner_up]
    fts_hits = [h for h in hits if h.scores.fts_rank is not None]
    assert fts_hits and all("beta" in h.text for h in fts_hits)
    assert any("beta" not in h.text for h in hits)  # the vector leg still brings the others


def test_rejected_vectors_are_cached_per_scope_until_cleared(new_database, tmp_path):
    url = new_database()
    s = Settings(rejected_rule="absolute", rejected_min_similarity=-1.0)
    reader = KnowledgeBase(s, database_url=url, embedder=HashingEmbedder(64)).open()
    try:
        reader.ingest([_notes(tmp_path / "a", ["queues carry events"])])
        assert reader.search("queues").rejected == ()  # caches "no rejected approaches"
        rejected = tmp_path / "b" / "rej.md"
        rejected.parent.mkdir()
        rejected.write_text("---\nslug: rej-kafka\ntype: rejected-approach\nstatus: accepted\n"
                            "---\n# Kafka for queues\n\nWe rejected Kafka for the queues.\n")
        _ingest_elsewhere(url, rejected.parent)
        assert reader.search("queues").rejected == ()  # another process wrote: cached
        with KnowledgeBase(s, database_url=url, embedder=HashingEmbedder(64)) as other:
            assert [h.document.slug for h in other.search("queues").rejected] == ["rej-kafka"]
        reader.clear_caches()
        assert [h.document.slug for h in reader.search("queues").rejected] == ["rej-kafka"]
    finally:
        reader.close()


def test_each_scope_keeps_one_plan_for_its_legs(example_kb, minilm):
    """The legs' scope and sizes are literals (store.sql.LegShape): a scope's statement is
    prepared on its first run (store.reader.prepared), PostgreSQL then reuses one plan for it
    instead of planning every search, and another scope is another statement with its own plan."""
    q = "what cache layer did we standardise on?"
    qvec = minilm.embed_query(q)
    settings = Settings(pool_min_size=1, pool_max_size=1)
    with KnowledgeBase(settings, embedder=minilm, database_url=example_kb.url) as kb:
        first = kb.search(q, query_embedding=qvec)
        for _ in range(14):
            assert kb.search(q, query_embedding=qvec).primary == first.primary
        kb.search(q, query_embedding=qvec, project="elsewhere")
        with kb._pools.sync().connection() as conn:
            rows = conn.execute(
                "SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements "
                "WHERE statement LIKE 'WITH ql AS%'").fetchall()
    legs = [r for r in rows if "ANY('{default}'::text[])" in r[0]]
    assert len(legs) == 1  # both legs of the default scope, in one statement
    for _statement, generic, custom in legs:
        # 15 runs, all prepared: PostgreSQL's 5 custom plans, then its one plan reused
        assert generic >= 5 and custom <= 5 and generic + custom == 15
    other = [(g, c) for s, g, c in rows if "ANY('{elsewhere}'::text[])" in s]
    assert other == [(0, 1)]  # prepared on its single run, with a plan of its own


def test_consecutive_searches_keep_each_leg_on_the_same_connection(example_kb, minilm,
                                                                    monkeypatch):
    """The second connection goes back to the pool after the search's own one, so with the
    pool's two connections the next search gets the same pair in the same roles: the caller's
    thread on one, the worker thread on the other (store.reader.SearchSession.fetch_all)."""
    q = "what cache layer did we standardise on?"
    roles: list[dict[str, int]] = []
    with KnowledgeBase(Settings(parallel_legs=True), embedder=minilm,
                       database_url=example_kb.url) as kb:
        fetch = SearchSession._fetch

        def spy(session, req, held):
            answer = fetch(session, req, held)
            if req.stage in ("vector_leg", "keyword_leg"):
                roles[-1][req.stage] = held[0].info.backend_pid
            return answer

        monkeypatch.setattr(SearchSession, "_fetch", spy)
        pool = kb._pools.sync()
        for _ in range(4):
            roles.append({})
            kb.search(q)
            stats = pool.get_stats()
            assert stats["pool_size"] == stats["pool_available"] == 2  # both back, none added
    assert len(set(roles[-1].values())) == 2  # the legs ran on two connections
    assert roles[1] == roles[2] == roles[3], roles  # the same two, in the same roles


def test_a_search_of_new_words_reads_nothing_before_its_two_legs(example_kb, minilm,
                                                                  monkeypatch):
    """Each leg's statement stems the query itself, and the full-text leg chooses its OR
    lexemes by the cached statistics in the statement (store.fulltext.tsvector.lexeme_selection_sql): words
    never seen before cost no round trip ahead of the legs, which run on two connections
    (KB_PARALLEL_LEGS) or in one statement (the default)."""
    reads: list[tuple[str, int]] = []
    with KnowledgeBase(Settings(parallel_legs=True), embedder=minilm,
                       database_url=example_kb.url) as kb:
        fetch = SearchSession._fetch

        def spy(session, req, held):
            answer = fetch(session, req, held)
            reads.append((req.stage, held[0].info.backend_pid if held else 0))
            return answer

        monkeypatch.setattr(SearchSession, "_fetch", spy)
        kb.search("which cache layer did we standardise on?")  # fills the caches
        reads.clear()
        cached = dict(kb._reads._entries)
        result = kb.search("zanzibarish cache wombats")  # two words never seen before
    stages = [stage for stage, _ in reads]
    # the cached reads (synonyms, lexeme statistics, configurations, calibration), then the legs
    assert stages[:4] == ["synonyms", "lexeme_stats", "fts_configs", "scope_stats"]
    assert kb._reads._entries.keys() == cached.keys()
    legs = dict(reads[4:6])
    assert set(legs) == {"vector_leg", "keyword_leg"}
    assert legs["vector_leg"] != legs["keyword_leg"]  # at once, on two connections
    assert result.primary and result.meta["search_strategy"]
    with KnowledgeBase(Settings(parallel_legs=False), embedder=minilm,
                       database_url=example_kb.url) as kb:
        monkeypatch.setattr(SearchSession, "_fetch", spy)
        kb.search("which cache layer did we standardise on?")
        reads.clear()
        assert kb.search("zanzibarish cache wombats").primary
    assert [stage for stage, _ in reads][4] == "hybrid_legs"


def _stages(kb: KnowledgeBase, q: str, monkeypatch, **kwargs):
    """The reads one search sends to the database (stage names, cached ones left out), and
    its result."""
    stages: list[str] = []
    fetch = SearchSession._fetch

    def spy(session, req, held):
        if session._cache.get(req) is None:
            stages.append(req.stage)
        return fetch(session, req, held)

    monkeypatch.setattr(SearchSession, "_fetch", spy)
    result = kb.search(q, **kwargs)
    monkeypatch.undo()
    return stages, result


def _same(a, b) -> bool:
    """Two results' hits in every block, with their scores."""
    def ids(r):
        return [[(h.chunk_id, round(h.score, 9)) for h in block]
                for block in (r.primary, r.expanded, r.rejected, r.runner_up)]
    return ids(a) == ids(b)


def test_one_statement_reads_the_seeds_first_hop_with_the_candidates(example_kb, minilm,
                                                                      monkeypatch):
    """The statement of both legs also reads graph expansion's first hop from the likeliest
    seeds (decision 0017): a search whose seed is one of them makes no second round trip, and
    relates what the legs at once and their own hop read relate."""
    q = "what cache layer did we standardise on?"
    with KnowledgeBase(Settings(parallel_legs=False), embedder=minilm,
                       database_url=example_kb.url) as one, \
            KnowledgeBase(Settings(parallel_legs=True), embedder=minilm,
                          database_url=example_kb.url) as parallel:
        one.search(q), parallel.search(q)  # the cached reads
        stages, read_ahead = _stages(one, q, monkeypatch)
        assert stages == ["hybrid_legs"] and read_ahead.expanded
        stages, hopped = _stages(parallel, q, monkeypatch)
        assert "graph_hop_1" in stages
        assert _same(read_ahead, hopped)
        # a seed without neighbours needs no read either: its first hop came back empty
        stages, lone = _stages(one, "pager escalation policy for the on-call rotation",
                               monkeypatch)
        assert "graph_hop_1" not in stages
        assert _same(lone, parallel.search("pager escalation policy for the on-call rotation"))


def test_the_rerank_pool_is_the_same_in_one_statement_and_with_the_legs_at_once(
        make_kb, tmp_path):
    """The one statement returns only the rerank pool (KB_RERANK_POOL_FACTOR x the candidates
    per leg, by weighted RRF); the legs at once return their whole lists and the fusion cuts
    the same pool: the same results either way, @mentioned chunks kept."""
    texts = [f"Deploy step {i}: roll back the {w} service when its health check fails."
             for i, w in enumerate(["billing", "search", "auth", "ledger", "mail", "cache"] * 5)]
    texts += [f"Note {i} about gardening, tomatoes, the ledger and the weather." for i in range(20)]
    kb = make_kb()
    kb.ingest([_notes(tmp_path / "kb", texts)])
    url = kb.url
    everything = Legs(min_similarity=-1)  # every vector neighbour is a candidate
    q = "ledger"  # in deploy steps and garden notes alike: the legs disagree
    mention = kb.search("billing health check", limit=1).primary[0].document.id
    for limit in (1, 2):
        pool = -(-3 * limit * 3 // 2)  # ceil(1.5 x limit x candidate_multiplier 3)
        results = []
        for settings in (Settings(parallel_legs=False), Settings(parallel_legs=True),
                         Settings(parallel_legs=True, rerank_pool_factor=0)):
            with KnowledgeBase(settings, embedder=HashingEmbedder(256), database_url=url) as k:
                results.append([k.search(q, limit=limit, legs=everything),
                                k.search(q, limit=limit, legs=everything,
                                         mention_doc_ids=[mention])])
        (one, one_m), (parallel, parallel_m), (whole, _) = results
        assert whole.meta["retrieval_stats"]["candidates_post_threshold"] > pool  # a cut
        assert one.meta["retrieval_stats"]["candidates_post_threshold"] == pool
        assert _same(one, parallel) and _same(one_m, parallel_m)
        assert one.meta["retrieval_stats"] == parallel.meta["retrieval_stats"]
        assert any(h.document.id == mention for h in (*one_m.primary, *one_m.runner_up))


def test_a_full_text_leg_at_its_match_cap_takes_no_pool_place_beyond_the_vector_legs(
        make_kb, tmp_path):
    """Matches that reach ``KB_FTS_MATCH_CAP`` are the first ones in table order, a sample, so
    the rerank pool holds no more than the candidates per leg (decision 0017, amendment): the
    same in one statement and with the legs at once; below the cap the pool is as before."""
    texts = [f"Ledger entry {i}: the {w} team posts its ledger totals at month end."
             for i, w in enumerate(["billing", "search", "auth", "payroll", "mail"] * 8)]
    kb = make_kb()
    kb.ingest([_notes(tmp_path / "kb", texts)])
    everything = Legs(min_similarity=-1)  # the vector leg fills its candidates
    kc, pool = 3, 5  # limit 1 x candidate_multiplier 3; ceil(1.5 x 3)
    results = []
    for cap in (10, 1000):  # 40 chunks hold "ledger": at the cap, and below it
        for parallel in (False, True):
            with KnowledgeBase(Settings(parallel_legs=parallel, fts_match_cap=cap),
                               embedder=HashingEmbedder(256), database_url=kb.url) as k:
                results.append(k.search("ledger totals", limit=1, legs=everything))
    (sampled, sampled_parallel, whole, whole_parallel) = results
    assert sampled.meta["retrieval_stats"]["candidates_pre_threshold"] == kc + 10
    assert sampled.meta["retrieval_stats"]["candidates_post_threshold"] == kc
    # below the cap the full-text leg's own hits join (the legs' union can be under the pool)
    assert kc < whole.meta["retrieval_stats"]["candidates_post_threshold"] <= pool
    assert _same(sampled, sampled_parallel) and _same(whole, whole_parallel)
    assert sampled.meta["retrieval_stats"] == sampled_parallel.meta["retrieval_stats"]


def _sampled_notes(make_kb, tmp_path, first: str) -> str:
    """A database of 43 notes that all hold "ledger" (its URL); the first three (``first`` and
    a word), first in table order too, are nearest to a question of ``first``'s words."""
    texts = [f"{first} {w}" for w in ("north", "south", "east")] + [
        f"Ledger entry {i}: the {w} team posts its totals per month."
        for i, w in enumerate(["billing", "search", "auth", "payroll", "mail"] * 8)]
    kb = make_kb()
    kb.ingest([_notes(tmp_path / "kb", texts)])
    return kb.url


def _both_ways(url: str, query: str, cap: int = 10) -> tuple:
    """One search of ``query`` (limit 1: kc 3) with the match cap at ``cap``, so that the
    full-text leg's matches are a sample, in one statement and with the legs at once."""
    results = []
    for parallel in (False, True):
        with KnowledgeBase(Settings(parallel_legs=parallel, fts_match_cap=cap),
                           embedder=HashingEmbedder(256), database_url=url) as k:
            results.append(k.search(query, limit=1, legs=Legs(min_similarity=-1)))
    return tuple(results)


def _sampled_both_ways(make_kb, tmp_path, first: str, query: str) -> tuple:
    """:func:`_both_ways` over :func:`_sampled_notes`."""
    return _both_ways(_sampled_notes(make_kb, tmp_path, first), query)


def test_a_full_text_sample_is_not_ranked_when_the_vector_leg_fills_the_pool(make_kb, tmp_path):
    """At its cap the full-text leg adds nothing to a pool that the vector leg's hits fill, so
    the one statement does not rank its sample (decision 0017, amendment): the same hits and
    scores as the legs at once, which rank it, without the full-text ranks of the chunks
    both legs found."""
    one, at_once = _sampled_both_ways(make_kb, tmp_path, "ledger ledger ledger", "ledger")
    assert _same(one, at_once)
    assert one.meta["retrieval_stats"]["candidates_pre_threshold"] == 3 + 10
    hits = [*one.primary, *one.runner_up]
    assert {h.document.title for h in hits} == {"N note 0", "N note 1", "N note 2"}
    assert all(h.scores.fts_rank is None for h in hits)  # the sample was not ranked
    assert any(h.scores.fts_rank for h in (*at_once.primary, *at_once.runner_up))


def _match_scans(kb: KnowledgeBase, query: str, monkeypatch) -> int:
    """How many times the one statement of a search of ``query`` ran its scan of the full-text
    matches (CTE ``fts_m``): the statement recorded as it runs, then run again under EXPLAIN
    ANALYZE with the same values."""
    import psycopg
    from psycopg import sql

    ran: list[tuple] = []
    execute = psycopg.Cursor.execute

    def spy(self, statement, params=None, **kw):  # type: ignore[no-untyped-def]
        if not isinstance(statement, str) and "fts_n AS" in statement.as_string(self):
            ran.append((statement, params))
        return execute(self, statement, params, **kw)

    monkeypatch.setattr(psycopg.Cursor, "execute", spy)
    kb.search(query, limit=1, legs=Legs(min_similarity=-1))
    monkeypatch.undo()
    [(statement, params)] = ran
    with kb._pools.sync().connection() as conn:
        [[plan]] = conn.execute(sql.Composed([sql.SQL("EXPLAIN (ANALYZE, FORMAT JSON) "),
                                              statement]), params).fetchall()

    def loops(node: dict) -> list[int]:
        here = [node["Actual Loops"]] if node.get("Subplan Name") == "CTE fts_m" else []
        return here + [n for child in node.get("Plans", []) for n in loops(child)]

    [scans] = loops(plan[0]["Plan"])
    return scans


def test_a_full_text_leg_that_its_lexeme_counts_put_at_the_cap_reads_no_match(
        make_kb, tmp_path, monkeypatch):
    """When the scope's lexeme counts say that a word the OR query holds is in as many chunks
    as the cap, the one statement knows that its matches reach the cap without reading them
    (decision 0017, amendment): their scan never runs, and the search is the one that scans
    (the legs at once). Above the count, the scan runs."""
    url = _sampled_notes(make_kb, tmp_path, "ledger ledger ledger")
    for cap, scans in ((10, 0), (43, 0), (44, 1)):  # 43 notes hold "ledger"
        one, at_once = _both_ways(url, "ledger", cap)
        assert _same(one, at_once)
        assert one.meta["retrieval_stats"] == at_once.meta["retrieval_stats"]
        with KnowledgeBase(Settings(parallel_legs=False, fts_match_cap=cap),
                           embedder=HashingEmbedder(256), database_url=url) as kb:
            assert _match_scans(kb, "ledger", monkeypatch) == scans


def test_lexeme_counts_that_a_write_still_logs_count_as_the_matches_do(make_kb, tmp_path,
                                                                        monkeypatch):
    """The counts that decide it are exact in the statement's snapshot, whatever the client's
    statistics say. A knowledge base whose cached statistics still put "ledger" in 12 notes,
    over a cap of 10, reads the counts after another's delete of 3 of them, whose log row is
    not folded yet (another connection holds the scope's fold lock): 9 matches, under the
    cap, so the leg reads and ranks them, as the legs at once do."""
    import psycopg

    from kb_retriever.store.stats import scope_lock_key

    texts = ["ledger ledger ledger north"] + [f"Ledger entry {i}: the totals." for i in range(11)]
    kb = make_kb()
    kb.ingest([_notes(tmp_path / "kb", texts)])
    with KnowledgeBase(Settings(parallel_legs=False, fts_match_cap=10), database_url=kb.url,
                       embedder=HashingEmbedder(256)) as one, \
            psycopg.connect(kb.url, autocommit=True) as folder:
        search = functools.partial(one.search, "ledger", limit=1, legs=Legs(min_similarity=-1))
        assert search().meta["retrieval_stats"]["candidates_pre_threshold"] == 3 + 10
        folder.execute("SELECT pg_advisory_lock(hashtextextended(%s, 0))",
                       [scope_lock_key(kb.tenant, kb.project)])
        assert kb.delete(["n001.md", "n002.md", "n003.md"]) == 3
        [[logged]] = folder.execute("SELECT count(*) FROM kb_lexeme_log").fetchall()
        assert logged == 1  # the delete's, not folded
        after = search()  # its statistics are the cached ones, from before the delete
        assert after.meta["retrieval_stats"]["candidates_pre_threshold"] == 3 + 9
        _, at_once = _both_ways(kb.url, "ledger")
        assert after.meta["retrieval_stats"] == at_once.meta["retrieval_stats"]
        assert _same(after, at_once)
        assert _match_scans(one, "ledger", monkeypatch) == 1


def test_a_full_text_sample_is_still_ranked_where_its_ranks_count(make_kb, tmp_path):
    """The one statement leaves a sample unranked only where its ranks change nothing: a
    question without a word to rerank by is scored by the fusion itself, so there the
    full-text ranks of the chunks both legs found count, and the sample is ranked. Both paths
    give the same hits and scores. (With @mentions it is ranked too: tests/unit/test_sql.py.)"""
    # "per": a stop word of the reranker, a lexeme of full text
    one, at_once = _sampled_both_ways(make_kb, tmp_path, "per ledger per ledger", "per")
    assert _same(one, at_once)
    assert one.meta["retrieval_stats"]["candidates_pre_threshold"] == 3 + 10
    assert any(h.scores.fts_rank for h in (*one.primary, *one.runner_up))
