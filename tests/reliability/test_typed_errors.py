"""Inputs cannot surprise: wrong types and values give a typed KbError, never a raw one."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from kb_retriever import ConfigError, InputError, KbError, KnowledgeBase, Settings
from kb_retriever.cli import main, printable

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
])
def test_settings_are_validated_and_cross_validated(values: dict) -> None:
    with pytest.raises(ConfigError):
        Settings(**values)


def test_nan_from_the_environment_is_rejected(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KB_RERANK_VECTOR_WEIGHT", "nan")
    with pytest.raises(ConfigError, match="KB_RERANK_VECTOR_WEIGHT"):
        Settings()


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
