"""Hostile input (SQL-injection style, NUL bytes, odd unicode, huge strings) everywhere a user
can put text: a typed error or a normal result, and the stored data unchanged by searches.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kb_retriever import HashingEmbedder, KnowledgeBase, Settings
from kb_retriever.errors import InputError, KbError, StoreError
from kb_retriever.filters.dimensions import METADATA_OPERATORS, VALID_KEYS

from ._util import snapshot

pytestmark = pytest.mark.db

HOSTILE = (
    "'; DROP TABLE kb_chunks; --",
    "x' OR '1'='1",
    '" OR 1=1 --',
    "$$; DROP TABLE kb_documents; $$",
    "$tag$ injected $tag$",
    "Robert'); DELETE FROM kb_edges; --",
    "\\", "\\'", "\\\\x27", "E'\\047'", "%s", "%(tenant)s", "{0}", "{}", ":1", "?",
    "*", "**/*", "[", "[!a-", "(", "a|b", "^$", ".*", "\\d+(",
    "ñandú 中文 🔥 \u202eevil\u202c \u200b\ufeff",
    "line\nbreak\r\n## Context", "\u2028\u2029",
    "a\x00b", "\x00",
    "x" * 5000, "é" * 100_000,
)
# Valid-looking strings plus the hostile ones, for tenant/project/filter values.
WORDS = ("default", "alpha", "cache", "redis", "tenant-1", "docs/**")
text_or_hostile = st.one_of(st.sampled_from(HOSTILE), st.sampled_from(WORDS),
                            st.text(max_size=40))
json_scalar = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70),
                        st.floats(allow_nan=True, allow_infinity=True), text_or_hostile)
metadata = st.dictionaries(
    text_or_hostile,
    st.one_of(json_scalar, st.dictionaries(st.one_of(st.sampled_from(METADATA_OPERATORS),
                                                     text_or_hostile),
                                           st.one_of(json_scalar, st.lists(json_scalar,
                                                                           max_size=3)),
                                           max_size=2)),
    max_size=2,
)
filter_value = st.one_of(text_or_hostile, st.lists(text_or_hostile, max_size=3), json_scalar,
                         st.lists(st.integers(-5, 2**64), max_size=3))
filters = st.one_of(
    st.none(),
    st.dictionaries(st.sampled_from(VALID_KEYS), filter_value, max_size=3),
    st.dictionaries(text_or_hostile, filter_value, max_size=2),
    st.fixed_dictionaries({"metadata": metadata}),
    st.fixed_dictionaries({"folder_globs": st.lists(text_or_hostile, min_size=1, max_size=3)}),
)

HOSTILE_MD = """---
slug: "'; DROP TABLE kb_chunks; --"
type: "decision$$"
status: "accepted' OR '1'='1"
title: "$$; DROP TABLE kb_documents; $$"
summary: "Robert'); DELETE FROM kb_edges; -- \\\\ \\" \\u0000 nul"
tags: ["'; DROP TABLE kb_chunks; --", "$$", "\\\\", "ñ🔥"]
owners: ["x' OR 1=1"]
depends_on: ["[[a'; DROP TABLE kb_edges; --]]", "[[$$]]"]
related: ["[[ok-slug]]"]
"weird key'; --": "value $$ \\\\"
---
# Title with 'quotes' and $$dollars$$ and \\backslashes\\

Body mentions redis cache and '; DROP TABLE kb_chunks; -- and $$ and \\\\ and 中文.
"""

VALID_MD = """---
slug: ok-slug
type: decision
status: accepted
tags: [cache, "it's"]
summary: "A fine decision about the redis cache; with 'quotes'."
depends_on: ["[[hostile-target]]"]
"odd-key": "'; DROP TABLE kb_documents; --"
---
# Redis cache decision

We use redis as the cache. Don't drop tables; --
"""

HOSTILE_TENANT = "t'; DROP TABLE kb_chunks; --"
HOSTILE_PROJECT = "$$p$$ \\ ñ 🔥"


@pytest.fixture(scope="module")
def hostile_kb(new_database: Callable[[], str],
               tmp_path_factory: pytest.TempPathFactory) -> Iterator[KnowledgeBase]:
    # every document in the result (no floor, no adaptive cutoff): the data is under test
    kb = KnowledgeBase(Settings(default_min_similarity=0.0, context_cutoff=0.0),
                       embedder=HashingEmbedder(256), database_url=new_database()).open()
    folder = tmp_path_factory.mktemp("hostile")
    (folder / "it's; DROP TABLE kb_chunks; --.md").write_text(HOSTILE_MD)
    (folder / "$$ok$$.md").write_text(VALID_MD)
    (folder / "plain \\ back'slash.txt").write_text("redis cache ' \" \\ $$ %s %(x)s\n")
    for tenant, project in (("default", "default"), (HOSTILE_TENANT, HOSTILE_PROJECT),
                            ("default", "'; DROP TABLE kb_edges; --")):
        report = kb.ingest([folder], tenant=tenant, project=project)
        assert not report.failed and len(report.added) == 3, report
    kb.add_synonyms("redis", ["'; DROP TABLE kb_synonyms; --", "$$cache$$"],
                    tenant=HOSTILE_TENANT, project=HOSTILE_PROJECT)
    yield kb
    kb.close()


def test_hostile_strings_round_trip(hostile_kb: KnowledgeBase) -> None:
    """Hostile file names, frontmatter and scope names are stored as plain data."""
    for tenant, project in (("default", "default"), (HOSTILE_TENANT, HOSTILE_PROJECT)):
        result = hostile_kb.search("redis cache", tenant=tenant, project=project, limit=10)
        paths = {h.document.source_path for h in result.primary}
        assert "it's; DROP TABLE kb_chunks; --.md" in paths
        assert {h.document.tenant_id for h in result.primary} == {tenant}
        assert {h.document.project_key for h in result.primary} == {project}
        body = next(h for h in result.primary if h.document.source_path.startswith("it's"))
        assert "'; DROP TABLE kb_chunks; --" in body.text and "$$" in body.text
        # The invalid slug is refused (a warning), so that file is not canonical.
        assert body.document.slug is None
    ok = hostile_kb.search("redis cache", tenant="default", project="default",
                           filters={"metadata": {"odd-key": "'; DROP TABLE kb_documents; --"}})
    assert {h.document.slug for h in ok.primary} == {"ok-slug"}
    tagged = hostile_kb.search("redis cache", filters={"tags": ["it's"]})
    assert {h.document.slug for h in tagged.primary} == {"ok-slug"}


def test_fuzzed_searches_are_typed_and_read_only(hostile_kb: KnowledgeBase) -> None:
    before = snapshot(hostile_kb.url)
    outcomes: dict[str, int] = {}

    @settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
    @given(query=text_or_hostile, tenant=st.one_of(st.none(), text_or_hostile),
           project=st.one_of(st.none(), text_or_hostile,
                             st.lists(text_or_hostile, max_size=3)),
           flt=filters, limit=st.one_of(st.none(), st.integers(-3, 300)))
    def run(query: str, tenant: str | None, project: Any, flt: Any, limit: int | None) -> None:
        try:
            hostile_kb.search(query, tenant=tenant, project=project, filters=flt, limit=limit)
        except StoreError as exc:  # a hostile value must never reach the database as an error
            raise AssertionError(f"database error on hostile input: {exc}") from exc
        except InputError as exc:
            outcomes[type(exc).__name__] = outcomes.get(type(exc).__name__, 0) + 1
            assert str(exc) and "Traceback" not in str(exc)
        else:
            outcomes["ok"] = outcomes.get("ok", 0) + 1

    run()
    assert snapshot(hostile_kb.url) == before
    assert outcomes.get("ok", 0) > 0 and outcomes.get("FilterError", 0) > 0, outcomes


@pytest.mark.parametrize("value", HOSTILE)
def test_each_hostile_string_everywhere(hostile_kb: KnowledgeBase, value: str) -> None:
    before = snapshot(hostile_kb.url)
    calls: list[Callable[[], Any]] = [
        lambda: hostile_kb.search(value),
        lambda: hostile_kb.search("redis", tenant=value),
        lambda: hostile_kb.search("redis", project=value),
        lambda: hostile_kb.search("redis", project=["default", value]),
        lambda: hostile_kb.search("redis", filters={value: ["x"]}),
        lambda: hostile_kb.search("redis", filters={"tags": [value]}),
        lambda: hostile_kb.search("redis", filters={"folder_globs": [value]}),
        lambda: hostile_kb.search("redis", filters={"languages": [value]}),
        lambda: hostile_kb.search("redis", filters={"source_types": [value]}),
        lambda: hostile_kb.search("redis", filters={"date_from": value}),
        lambda: hostile_kb.search("redis", filters={"metadata": {value: "x"}}),
        lambda: hostile_kb.search("redis", filters={"metadata": {"k": {value: "x"}}}),
        lambda: hostile_kb.search("redis", filters={"metadata": {"k": value}}),
        lambda: hostile_kb.search("redis", filters={"metadata": {"k": {"$gt": value}}}),
        lambda: hostile_kb.search("redis", filters={"metadata": {"k": {"$in": [value, 1]}}}),
        lambda: hostile_kb.search_sql(value),
    ]
    for call in calls:
        try:
            call()
        except KbError as exc:
            assert isinstance(exc, InputError), repr(exc)
    assert snapshot(hostile_kb.url) == before


@pytest.mark.parametrize("where", ["tenant", "project"])
def test_nul_in_names_is_input_error(hostile_kb: KnowledgeBase, where: str,
                                     tmp_path: Path) -> None:
    bad = "a\x00b"
    with pytest.raises(InputError):
        KnowledgeBase(Settings(), embedder=HashingEmbedder(256), **{where: bad})
    with pytest.raises(InputError):
        hostile_kb.search("redis", **{where: bad})
    (tmp_path / "a.md").write_text("redis\n")
    before = snapshot(hostile_kb.url)
    with pytest.raises(InputError):
        hostile_kb.ingest([tmp_path], **{where: bad})
    with pytest.raises(InputError):
        hostile_kb.add_synonyms("redis", ["cache"], **{where: bad})
    assert snapshot(hostile_kb.url) == before


def test_nul_in_terms_and_filters_is_input_error(hostile_kb: KnowledgeBase) -> None:
    before = snapshot(hostile_kb.url)
    for call in (
        lambda: hostile_kb.add_synonyms("re\x00dis", ["cache"]),
        lambda: hostile_kb.add_synonyms("redis", ["ca\x00che"]),
        lambda: hostile_kb.search("re\x00dis"),
        lambda: hostile_kb.search("redis", filters={"tags": ["a\x00"]}),
        lambda: hostile_kb.search("redis", filters={"metadata": {"k": "a\x00"}}),
        lambda: hostile_kb.search("redis", filters={"metadata": {"k": {"$in": ["a\x00"]}}}),
        lambda: hostile_kb.search("redis", filters={"folder_globs": ["a\x00/**"]}),
    ):
        with pytest.raises(InputError):
            call()
    assert snapshot(hostile_kb.url) == before


def test_fuzzed_frontmatter_ingest(hostile_kb: KnowledgeBase, tmp_path_factory:
                                   pytest.TempPathFactory) -> None:
    """Random frontmatter values: each file is ingested (maybe with warnings), or reported as
    failed or skipped; nothing raises, and no other tenant's rows change."""
    others = snapshot(hostile_kb.url, tenant=HOSTILE_TENANT)
    counter = iter(range(10**6))
    yaml_value = st.one_of(st.sampled_from(HOSTILE), st.text(max_size=60)).map(
        lambda s: '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'
    ) | st.sampled_from(["[a, b", "{x: [", "*anchor", "&a [1]", "!!python/object:os.system x",
                         "- - -", "'unterminated", "@@", "|", ">-"])

    @settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
    @given(fields=st.dictionaries(
        st.sampled_from(["slug", "type", "status", "tags", "summary", "owners", "depends_on",
                         "retrieval_priority", "updated", "language", "title", "weird'key"]),
        yaml_value, max_size=6), body=st.sampled_from(HOSTILE[:-1]) | st.text(max_size=200))
    def run(fields: dict[str, str], body: str) -> None:
        folder = tmp_path_factory.mktemp("fm")
        lines = ["---", *(f'"{k}": {v}' for k, v in fields.items()), "---",
                 body.replace("\x00", "")]  # a NUL byte makes the file binary: tested elsewhere
        (folder / f"doc-{next(counter)}.md").write_text("\n".join(lines), encoding="utf-8")
        report = hostile_kb.ingest([folder], tenant="fuzz", project="fm")
        done = len(report.added) + len(report.updated) + len(report.unchanged)
        # A file with no text is skipped (reported, not written): one category, always.
        assert done + len(report.failed) + len(report.skipped) == 1, report

    run()
    assert snapshot(hostile_kb.url, tenant=HOSTILE_TENANT) == others
