"""Inputs cannot surprise: wrong types and values give a typed KbError, never a raw one."""

from __future__ import annotations

import asyncio
import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kb_retriever import (
    ChunkRecord,
    ConfigError,
    DocumentRecord,
    EmbeddingError,
    HashingEmbedder,
    InputError,
    KbError,
    KnowledgeBase,
    SearchResult,
    Settings,
    compose_prompt,
)
from kb_retriever.cli import main, printable

from ._util import snapshot

pytestmark = pytest.mark.db


@pytest.fixture(scope="module")
def kb(new_database: Callable[[], str], tmp_path_factory: pytest.TempPathFactory) -> KnowledgeBase:
    from kb_retriever import HashingEmbedder

    folder = tmp_path_factory.mktemp("typed")
    (folder / "a.md").write_text("# A\n\nredis cache notes\n")
    kb = KnowledgeBase(Settings(), embedder=HashingEmbedder(64), database_url=new_database()).open()
    kb.ingest([folder])
    return kb


@pytest.mark.parametrize("call", [
    lambda kb: kb.search("redis", mention_doc_ids=["x"]),
    lambda kb: kb.search("redis", mention_doc_ids=5),
    lambda kb: kb.search("redis", now="2024-01-01"),
    lambda kb: kb.search("redis", tenant=""),
    lambda kb: kb.search("redis", project=""),
    lambda kb: kb.search("redis", project=5),
    lambda kb: kb.search("redis", filters={"metadata": {"n": 10**400}}),
    lambda kb: kb.search("redis", filters={"metadata": {"n": {"$in": [10**400]}}}),
    lambda kb: kb.ingest([5]),
    lambda kb: kb.ingest("x", tenant=""),
    lambda kb: kb.add_synonyms("redis", ["cache"], project=""),
], ids=["mention-str", "mention-int", "now-str", "tenant-empty", "project-empty", "project-int",
        "meta-huge-int", "meta-huge-in", "ingest-int", "ingest-tenant-empty", "synonyms-empty"])
def test_wrong_types_and_values_raise_input_error(kb: KnowledgeBase, call: Callable) -> None:
    with pytest.raises(InputError):
        call(kb)


def test_empty_tenant_in_the_constructor_is_an_error() -> None:
    with pytest.raises(InputError):
        KnowledgeBase(tenant="")
    with pytest.raises(InputError):
        KnowledgeBase(project=" ")


@pytest.mark.parametrize("values", [
    {"vector_weight": float("nan")}, {"keyword_weight": float("inf")},
    {"max_limit": 5}, {"pool_min_size": 9, "pool_max_size": 2},
    {"hybrid_semantic_weight": 0, "hybrid_fts_weight": 0},  # every fused score 0
    {"hybrid_semantic_weight": 0, "hybrid_search_enabled": False},
])
def test_settings_are_validated_and_cross_validated(values: dict) -> None:
    with pytest.raises(ConfigError):
        Settings(**values)
    # the documented way to change one (model_copy) checked nothing
    with pytest.raises(ConfigError):
        Settings().model_copy(update=values)


def test_a_copy_keeps_every_other_value_and_reads_no_environment(
        monkeypatch: pytest.MonkeyPatch) -> None:
    base = Settings(hybrid_search_enabled=False, replica_urls=("postgresql://r1/kb",))
    monkeypatch.setenv("KB_RRF_K", "7")
    copy = base.model_copy(update={"default_limit": 5})
    assert copy.default_limit == 5 and copy.rrf_k == base.rrf_k == 60
    assert copy.model_dump() == {**base.model_dump(), "default_limit": 5}


def test_nan_from_the_environment_is_rejected(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KB_RERANK_VECTOR_WEIGHT", "nan")
    with pytest.raises(ConfigError, match="KB_RERANK_VECTOR_WEIGHT"):
        Settings()


@pytest.mark.parametrize(("name", "value"), [
    ("KB_STATEMENT_TIMEOUT_MS", "3000000000"),  # over PostgreSQL's integer: a 30 s pool hang
    ("KB_INGEST_STATEMENT_TIMEOUT_MS", "3000000000"),
    ("KB_FTS_MATCH_CAP", "9223372036854775808"),  # "bigint out of range" at the first search
    ("KB_DATABASE_URL", ""),  # libpq's defaults: another database, silently
    ("KB_DATABASE_URL", " "),
    ("KB_PROMPT_TIMEZONE", "Mars/Olympus"),  # failed only at the first prompt
    ("KB_PROMPT_TIMEZONE", ""),
    ("KB_HOME", ""),  # the current directory
    ("KB_REFUSAL_MIN_SIMILARITY", "5"),  # a cosine: every query refused
    ("KB_BENCHMARK_THRESHOLD_NDCG", "-1"),  # every gate passed, silently
])
def test_values_that_failed_late_fail_at_load(monkeypatch: pytest.MonkeyPatch, name: str,
                                              value: str) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError, match=name):
        Settings()


@pytest.mark.parametrize("url", ["abc", "postgresql://u:s3cret@[h/db"])
def test_a_malformed_replica_url_is_named_without_its_password(url: str) -> None:
    """It failed at every search, in the pool's log only; now the knowledge base refuses it
    when it is made (the settings hold no driver to parse it)."""
    with pytest.raises(ConfigError, match="KB_REPLICA_URLS") as info:
        KnowledgeBase(Settings(replica_urls=(url,)))
    assert "s3cret" not in str(info.value)


def test_dead_settings_are_gone() -> None:
    for name in ("embeddings_dimensions", "runner_up_min_similarity"):
        assert name not in Settings.model_fields
        with pytest.raises(ConfigError):
            Settings(**{name: 1})


def test_deeply_nested_cli_filters_are_a_usage_error(new_database: Callable[[], str],
                                                     capsys: pytest.CaptureFixture[str],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KB_EMBEDDER", "hashing")
    deep = "[" * 60_000 + "]" * 60_000
    code = main(["--database-url", new_database(), "search", "redis", "--filters", deep])
    assert code == 2
    assert "nested too deeply" in capsys.readouterr().err


def test_terminal_output_escapes_control_characters() -> None:
    assert printable("a\x1b[31mred\nline\x07") == "a\\x1b[31mred\\nline\\x07"
    assert printable("ünïcode ok") == "ünïcode ok"


def test_cached_reads_are_bounded_by_scope_count(kb: KnowledgeBase) -> None:
    bound = kb._reads.max_entries
    for i in range(bound + 50):
        kb.search("redis", project=["default", f"p{i}"])
    assert len(kb._reads) <= bound


def test_a_vanished_folder_is_an_input_error_not_a_database_error(kb: KnowledgeBase,
                                                                 tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such file"):
        kb.ingest([tmp_path / "gone"])
    assert issubclass(InputError, KbError)


# --- issue 23, part 5: the raw errors, typed at the boundary -------------------------------

LONE = "\ud800"  # a lone surrogate: not Unicode text, and not encodable as UTF-8


@pytest.mark.parametrize("call", [
    lambda kb: kb.search(f"redis {LONE}"),
    lambda kb: kb.search("redis", tenant=f"t{LONE}"),
    lambda kb: kb.search("redis", project=f"p{LONE}"),
    lambda kb: kb.search("redis", project=["default", f"p{LONE}"]),
    lambda kb: kb.search("redis", filters={"tags": [f"x{LONE}"]}),
    lambda kb: kb.search("redis", filters={"metadata": {"k": f"x{LONE}"}}),
    lambda kb: kb.search("redis", filters={"metadata": {"k": {"$in": [f"x{LONE}"]}}}),
    lambda kb: kb.search_sql(f"redis {LONE}"),
    lambda kb: kb.ingest("x", tenant=f"t{LONE}"),
    lambda kb: kb.add_documents([{"text": f"redis {LONE}"}]),
    lambda kb: kb.add_documents([{"text": "redis", "id": f"id{LONE}"}]),
    lambda kb: kb.add_documents([{"text": "redis", "metadata": {"k": f"v{LONE}"}}]),
    lambda kb: kb.add_documents([{"text": "redis", "metadata": {f"k{LONE}": "v"}}]),
    lambda kb: kb.add_documents([{"text": "redis", "metadata": {"k": [{"deep": LONE}]}}]),
    lambda kb: kb.add_documents([{"text": "redis", "chunks": [{"text": f"c {LONE}"}]}]),
    lambda kb: kb.add_documents([{"text": "redis", "chunks": [{"text": "c", "id": LONE}]}]),
    lambda kb: kb.add_documents([{"text": "redis"}], project=f"p{LONE}"),
    lambda kb: kb.add_synonyms(f"redis{LONE}", ["cache"]),
    lambda kb: kb.add_synonyms("redis", [f"cache{LONE}"]),
    lambda kb: kb.get_by_ids([f"a.md{LONE}"]),
    lambda kb: kb.get_chunks([f"c{LONE}"]),
    lambda kb: kb.delete([f"a.md{LONE}"]),
    lambda kb: kb.delete_chunks([f"c{LONE}"]),
    lambda kb: kb.projects(tenant=f"t{LONE}"),
    lambda kb: asyncio.run(kb.aadd_documents([{"text": f"redis {LONE}"}])),
])
def test_lone_surrogates_are_input_errors_naming_the_field(kb: KnowledgeBase,
                                                          call: Callable) -> None:
    """They reached the driver as a raw UnicodeEncodeError; nothing may be written."""
    before = snapshot(kb.url)
    with pytest.raises(InputError) as err:
        call(kb)
    assert "surrogate" in str(err.value)
    assert snapshot(kb.url) == before


def _nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(depth):
        value = {"k": value}
    return value


def _cycle() -> dict[str, Any]:
    value: dict[str, Any] = {}
    value["self"] = value
    return value


@pytest.mark.parametrize(("call", "error"), [
    (lambda kb: kb.add_documents(None), InputError),
    (lambda kb: kb.add_documents(5), InputError),
    (lambda kb: kb.add_documents("redis"), InputError),  # one text is not a list of documents
    (lambda kb: kb.add_documents({"text": "redis"}), InputError),  # nor is one mapping
    (lambda kb: kb.add_documents([None]), InputError),
    (lambda kb: kb.add_documents([{"text": "redis", "chunks": 5}]), InputError),
    (lambda kb: kb.add_documents([{"text": "redis", "chunks": "abc"}]), InputError),
    (lambda kb: kb.add_documents([DocumentRecord("redis", chunks=5)]), InputError),
    (lambda kb: kb.add_documents([DocumentRecord("redis", chunks=(5,))]), InputError),
    (lambda kb: kb.add_documents([{"text": "r", "chunks": [{"text": "c", "embedding": "abc"}]}]),
     EmbeddingError),
    (lambda kb: kb.add_documents([DocumentRecord(
        "r", chunks=(ChunkRecord("c", embedding=[[1.0]]),))]), EmbeddingError),
    (lambda kb: kb.add_documents([{"text": "redis", "metadata": _nested(5_000)}]), InputError),
    (lambda kb: kb.add_documents([{"text": "redis", "metadata": {"k": [_nested(200)]}}]),
     InputError),
    (lambda kb: kb.add_documents([{"text": "redis", "metadata": _cycle()}]), InputError),
    (lambda kb: kb.add_documents([{"text": "redis", "metadata": {"k": "a\x00b"}}]), InputError),
    (lambda kb: kb.add_documents([{"text": "r", "chunks": [
        {"text": "c", "metadata": _nested(5_000)}]}]), InputError),
    (lambda kb: asyncio.run(kb.aadd_documents(None)), InputError),
    (lambda kb: asyncio.run(kb.aadd_documents(5)), InputError),
    (lambda kb: kb.add_synonyms("redis", None), InputError),
    (lambda kb: kb.add_synonyms("redis", "cache"), InputError),  # not c, a, c, h, e
    (lambda kb: kb.get_by_ids([None]), InputError),
    (lambda kb: kb.get_by_ids(["a.md", None]), InputError),
    (lambda kb: kb.get_by_ids(None), InputError),
    (lambda kb: kb.get_chunks([None]), InputError),
    (lambda kb: kb.delete([None]), InputError),
    (lambda kb: kb.delete(["a.md", None]), InputError),
    (lambda kb: kb.delete_chunks([None]), InputError),
    (lambda kb: asyncio.run(kb.aget_by_ids([None])), InputError),
    (lambda kb: asyncio.run(kb.adelete([None])), InputError),
], ids=["docs-none", "docs-int", "docs-str", "docs-mapping", "doc-none", "chunks-int",
        "chunks-str", "record-chunks-int", "record-chunk-int", "embedding-str",
        "embedding-nested", "metadata-5000-deep", "metadata-list-deep", "metadata-cycle",
        "metadata-nul", "chunk-metadata-deep", "async-docs-none", "async-docs-int",
        "synonyms-none", "synonyms-str", "get-none", "get-some-none", "get-ids-none",
        "chunks-get-none", "delete-none", "delete-some-none", "delete-chunks-none",
        "async-get-none", "async-delete-none"])
def test_wrong_documents_and_ids_are_typed_and_write_nothing(kb: KnowledgeBase, call: Callable,
                                                            error: type[KbError]) -> None:
    """Raw TypeError / RecursionError before; None ids were read and deleted as the id ""."""
    before = snapshot(kb.url)
    with pytest.raises(error):
        call(kb)
    assert snapshot(kb.url) == before
    assert [d.id for d in kb.get_by_ids(["a.md"])] == ["a.md"]  # nothing deleted either


def test_metadata_of_ordinary_depth_is_still_stored(kb: KnowledgeBase) -> None:
    ids = kb.add_documents([{"text": "deep notes", "id": "deep", "metadata": _nested(90)}],
                           project="depth")
    (doc,) = kb.get_by_ids(ids, project="depth")
    assert doc.metadata == _nested(90)


@pytest.mark.parametrize("name", [" acme ", "acme ", " acme", "\tacme", "acme\n"])
def test_names_with_whitespace_around_them_are_errors_not_trimmed(kb: KnowledgeBase,
                                                                 name: str) -> None:
    """tenant=" acme " read tenant acme's documents: names are exact."""
    kb.add_documents([{"text": "acme's secret roadmap", "id": "roadmap"}], tenant="acme")
    before = snapshot(kb.url)
    for call in (
        lambda: kb.search("roadmap", tenant=name),
        lambda: kb.search("roadmap", project=name),
        lambda: kb.get_by_ids(["roadmap"], tenant=name),
        lambda: kb.delete(["roadmap"], tenant=name),
        lambda: kb.add_documents([{"text": "x"}], tenant=name),
        lambda: kb.ingest("x", project=name),
        lambda: kb.add_synonyms(name, ["cache"]),
        lambda: kb.add_synonyms("redis", [name]),
        lambda: kb.projects(tenant=name),
        lambda: KnowledgeBase(Settings(), embedder=HashingEmbedder(64), tenant=name),
        lambda: KnowledgeBase(Settings(), embedder=HashingEmbedder(64), project=name),
    ):
        with pytest.raises(InputError, match="whitespace"):
            call()
    assert snapshot(kb.url) == before
    assert [d.id for d in kb.get_by_ids(["roadmap"], tenant="acme")] == ["roadmap"]


@pytest.mark.parametrize(("kwargs", "error"), [
    ({"max_chars": "x"}, InputError), ({"max_chars": -1}, InputError),
    ({"max_chars": 0}, InputError), ({"max_chars": math.nan}, InputError),
    ({"max_chars": 10.5}, InputError), ({"max_chars": True}, InputError),
    ({"project": 5}, InputError), ({"now": "2024-01-01"}, InputError),
    ({"template": "## Context"}, InputError), ({"timezone": 5}, ConfigError),
])
def test_compose_prompt_arguments_are_checked(kwargs: dict[str, Any],
                                              error: type[KbError]) -> None:
    with pytest.raises(error):
        compose_prompt(SearchResult(primary=()), **kwargs)


@pytest.mark.parametrize("result", [None, "text", {"primary": []}])
def test_compose_prompt_takes_a_search_result(result: Any) -> None:
    with pytest.raises(InputError, match="SearchResult"):
        compose_prompt(result)


@pytest.fixture(scope="module")
def cli_url(new_database: Callable[[], str]) -> str:
    """A database set up for the CLI's embedder (4096-d hashing): its first use says once
    that HNSW does not index 4096-d, which would be a second line on stderr."""
    url = new_database()
    KnowledgeBase(Settings(), embedder=HashingEmbedder(4096), database_url=url).open().close()
    return url


@pytest.mark.parametrize("argv", [
    ["prompt", "redis", "--max-chars", "-5"],
    ["prompt", "redis", "--max-chars", "0"],
    ["prompt", "redis", "--max-chars", "many"],
    ["search", "redis", "--tenant", " acme "],
    ["search", "redis", "--project", "docs "],
    ["search", f"redis {LONE}"],
    ["search", "redis", "--tenant", "\udcff"],  # an undecodable byte in argv
    ["doctor", "--project", " default"],
])
def test_cli_bad_names_and_budgets_exit_2_with_one_line(
        cli_url: str, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch, argv: list[str]) -> None:
    monkeypatch.setenv("KB_EMBEDDER", "hashing")
    try:
        code = main(["--database-url", cli_url, *argv])
    except SystemExit as exc:  # argparse's own usage errors
        code = int(exc.code or 0)
    err = capsys.readouterr().err
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and err.startswith("kb-retriever: "), err


def test_a_kb_home_that_is_a_symlink_loop_is_a_config_error(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    os.symlink(home, home)
    kb = KnowledgeBase(Settings(), embedder=HashingEmbedder(64), home=home)
    with pytest.raises(ConfigError, match="KB_HOME"):
        kb.open()
    monkeypatch.setenv("KB_EMBEDDER", "hashing")
    monkeypatch.setenv("KB_HOME", str(home))
    assert main(["search", "redis"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "KB_HOME" in err and "Traceback" not in err


def test_replica_urls_with_several_hosts_are_not_cut_at_their_commas(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``KB_REPLICA_URLS`` was split at every comma: a multi-host URI (libpq's failover
    list) became two broken connection strings."""
    monkeypatch.setenv("KB_REPLICA_URLS", "postgresql://u@r1:5432,r2:5432/kb,"
                       "postgresql://u@r3/kb, host=r4,r5 dbname=kb")
    assert Settings().replica_urls == ("postgresql://u@r1:5432,r2:5432/kb",
                                       "postgresql://u@r3/kb", "host=r4,r5 dbname=kb")
