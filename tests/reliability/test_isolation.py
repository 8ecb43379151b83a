"""Tenant and project isolation under random scopes (DESIGN.md §5: no result crosses scopes).

Every (tenant, project) gets the same file names and the same slugs (so typed edges and
rejected approaches exist with identical keys in every scope); every document carries a canary
token of its own. Random searches over random scopes must never return, nor put into the
composed prompt, a canary of a scope they did not ask for.
"""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kb_retriever import HashingEmbedder, KnowledgeBase, Settings, compose_prompt
from kb_retriever.cli import main

from ._util import canonical

pytestmark = pytest.mark.db

TENANTS = ("acme", "globex", "o'brien; --")
PROJECTS = ("alpha", "beta", "shared")
CANARY = re.compile(r"cnry[0-9a-f]{12}")
Owners = dict[str, tuple[str, str]]  # canary -> (tenant, project)
# 4096-d: the CLI's `KB_EMBEDDER=hashing` opens the same database (exact scan, no HNSW).
DIM = 4096
# Low floors so that graph expansion, rejected injection and runner-ups fire on most queries.
SETTINGS = Settings(default_min_similarity=0.0, rejected_rule="absolute",
                    rejected_min_similarity=0.0,
                    runner_up_limit=5, graph_expansion_direction="both")


def _corpus(root: Path, canary: Callable[[str], str]) -> None:
    """Same file names and slugs in every scope; ``canary(name)`` marks each file."""
    root.mkdir(parents=True)
    c = {n: canary(n) for n in ("dec-cache", "mod-store", "rej-queue", "notes")}
    (root / "dec-cache.md").write_text(canonical(
        "dec-cache", "decision", f"Cache layer decision {c['dec-cache']}",
        f"We standardise on redis as the cache layer. {c['dec-cache']}\n\n"
        f"## Details\n\nRedis cluster mode for the session cache. {c['dec-cache']}",
        summary=f"redis cache {c['dec-cache']}",
        extra={"depends_on": '["[[mod-store]]"]', "related": '["[[rej-queue]]"]'},
    ))
    (root / "mod-store.md").write_text(canonical(
        "mod-store", "module-kb", f"Session store module {c['mod-store']}",
        f"The session store module keeps sessions in redis. {c['mod-store']}",
        summary=f"session store {c['mod-store']}",
    ))
    (root / "rej-queue.md").write_text(canonical(
        "rej-queue", "rejected-approach", f"Rejected rabbitmq queue {c['rej-queue']}",
        f"Rabbitmq as the message queue and cache bus was rejected. {c['rej-queue']}",
        summary=f"rabbitmq rejected {c['rej-queue']}",
    ))
    (root / "notes.md").write_text(
        f"# Notes {c['notes']}\n\nCache notes: redis, rabbitmq queue, session store. {c['notes']}\n"
    )


@pytest.fixture(scope="module")
def iso(new_database: Callable[[], str],
        tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[KnowledgeBase, Owners]]:
    owner: dict[str, tuple[str, str]] = {}
    kb = KnowledgeBase(SETTINGS, embedder=HashingEmbedder(DIM), database_url=new_database()).open()
    base = tmp_path_factory.mktemp("iso")
    for ti, tenant in enumerate(TENANTS):
        for pi, project in enumerate(PROJECTS):
            def canary(name: str, scope: tuple[str, str] = (tenant, project)) -> str:
                token = f"cnry{uuid.uuid4().hex[:12]}"
                owner[token] = scope
                return token

            folder = base / f"t{ti}" / f"p{pi}"
            _corpus(folder, canary)
            report = kb.ingest([folder], tenant=tenant, project=project)
            assert not report.failed and len(report.added) == 4, report.summary()
    yield kb, owner
    kb.close()


QUERIES = ("redis cache layer", "rabbitmq message queue", "session store module",
           "cache decision details", "notes", "why not rabbitmq for the cache bus?")


def _check(result: object, tenant: str, projects: list[str],
           owner: dict[str, tuple[str, str]]) -> Counter[str]:
    allowed = {(tenant, p) for p in projects}
    seen: Counter[str] = Counter()
    for origin in ("primary", "expanded", "rejected", "runner_up"):
        for hit in getattr(result, origin):
            seen[origin] += 1
            doc = hit.document
            assert (doc.tenant_id, doc.project_key) in allowed, (origin, doc)
            for text in (hit.text, doc.title, doc.summary or "", doc.slug or ""):
                for token in CANARY.findall(text):
                    assert owner[token] in allowed, (origin, token, owner[token], allowed)
    for line in compose_prompt(result).splitlines():
        for token in CANARY.findall(line):
            assert owner[token] in allowed, ("prompt", line, allowed)
    return seen


scopes = st.tuples(
    st.sampled_from(TENANTS),
    st.lists(st.sampled_from(PROJECTS), min_size=1, max_size=3, unique=True),
)


def test_random_scopes_never_leak(iso: tuple[KnowledgeBase, dict[str, tuple[str, str]]]) -> None:
    kb, owner = iso
    foreign = sorted(owner)
    totals: Counter[str] = Counter()

    @settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
    @given(scope=scopes, query=st.one_of(
        st.sampled_from(QUERIES),
        # queries naming canaries of any scope, others' included, try to pull them in
        st.lists(st.sampled_from(foreign), min_size=1, max_size=3).map(" ".join),
        st.tuples(st.sampled_from(QUERIES), st.sampled_from(foreign)).map(" ".join),
    ), limit=st.integers(1, 8))
    def run(scope: tuple[str, list[str]], query: str, limit: int) -> None:
        tenant, projects = scope
        result = kb.search(query, tenant=tenant, project=projects, limit=limit)
        totals.update(_check(result, tenant, projects, owner))

    run()
    # The test must exercise every result list, or it proves nothing about them.
    assert all(totals[k] > 0 for k in ("primary", "expanded", "rejected", "runner_up")), totals


def test_async_scopes_never_leak(iso: tuple[KnowledgeBase, dict[str, tuple[str, str]]]) -> None:
    kb, owner = iso
    jobs = [(t, [p, q], query) for t in TENANTS for p in PROJECTS for q in PROJECTS
            for query in QUERIES[:3]]

    async def go() -> list[object]:
        try:
            return await asyncio.gather(*(kb.asearch(qq, tenant=t, project=ps, limit=4)
                                          for t, ps, qq in jobs))
        finally:
            await kb.aclose()  # the async pool belongs to this event loop
    results = asyncio.run(go())
    kb.open()  # aclose() also closed the sync pool; the other tests need it
    for (tenant, projects, _), result in zip(jobs, results, strict=True):
        _check(result, tenant, list(dict.fromkeys(projects)), owner)


@pytest.mark.parametrize("tenant,project", [("acme", "alpha"), ("o'brien; --", "shared")])
def test_cli_search_and_prompt_stay_in_scope(
    iso: tuple[KnowledgeBase, dict[str, tuple[str, str]]], tenant: str, project: str,
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    kb, owner = iso
    monkeypatch.setenv("KB_EMBEDDER", "hashing")
    monkeypatch.setenv("KB_MIN_SIMILARITY", "0")
    monkeypatch.setenv("KB_REJECTED_RULE", "absolute")
    monkeypatch.setenv("KB_REJECTED_MIN_SIMILARITY", "0")
    common = ["--database-url", kb.url]
    scope = ["--tenant", tenant, "--project", project]
    assert main([*common, "search", "redis cache rabbitmq", *scope, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    texts = [h["text"] for k in ("primary", "expanded", "rejected", "runner_up") for h in data[k]]
    assert data["primary"] and data["rejected"]
    assert main([*common, "prompt", "redis cache rabbitmq", *scope]) == 0
    prompt = capsys.readouterr().out
    found = CANARY.findall("\n".join(texts) + prompt)
    assert found and all(owner[t] == (tenant, project) for t in found)
