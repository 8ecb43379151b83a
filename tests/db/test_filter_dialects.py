"""The filter language ($and/$or/$not and every operator), rendered and run on real rows."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from kb_retriever import FilterError, HashingEmbedder, KnowledgeBase, Settings
from kb_retriever.filters.dimensions import parse_filters, where_filters
from kb_retriever.filters.expressions import parse_expr

pytestmark = pytest.mark.db

DOCS = {
    "dec-cache.md": ("decision", "accepted", 80, "[cache, redis]", "platform", 5, "2026-03-01"),
    "dec-queue.md": ("decision", "superseded", 40, "[queue]", "platform-core", 9, "2025-06-01"),
    "run-deploy.md": ("runbook", "accepted", 60, "[deploy, cache]", "infra", 2, "2026-10-01"),
}


@pytest.fixture(scope="module")
def kb(new_database: Callable[[], str], tmp_path_factory: pytest.TempPathFactory
       ) -> Iterator[KnowledgeBase]:
    folder = tmp_path_factory.mktemp("dialects")
    for name, (typ, status, prio, tags, team, score, updated) in DOCS.items():
        slug = name[:-3]
        (folder / name).write_text(
            f"---\nid: {slug.upper()}\nslug: {slug}\ntype: {typ}\nstatus: {status}\n"
            f"retrieval_priority: {prio}\ntags: {tags}\nteam: {team}\nscore: {score}\n"
            f"updated: {updated}\n{'language: en' + chr(10) if slug == 'dec-cache' else ''}"
            f"---\n# {slug}\n\nshared words about the platform {slug}\n")
    (folder / "note.md").write_text("# A note\n\nshared words about the platform, no metadata\n")
    with KnowledgeBase(Settings(default_min_similarity=-1.0),
                       embedder=HashingEmbedder(64), database_url=new_database()) as kb:
        report = kb.ingest([folder])
        assert not report.failed, report.failed
        yield kb


def _keys(kb: KnowledgeBase, filters: Any) -> set[str]:
    result = kb.search("shared words about the platform", limit=10, filters=filters)
    return {hit.document.doc_key for hit in result.primary}


ALL = {"dec-cache", "dec-queue", "run-deploy", "note"}
CASES: list[tuple[dict[str, Any], set[str]]] = [
    ({"canonical_type": "decision"}, {"dec-cache", "dec-queue"}),
    ({"canonical_type": {"$ne": "decision"}}, {"run-deploy", "note"}),
    ({"canonical_status": {"$in": ["superseded", "deprecated"]}}, {"dec-queue"}),
    ({"canonical_type": {"$nin": ["decision"]}}, {"run-deploy", "note"}),
    ({"retrieval_priority": {"$gte": 60}}, {"dec-cache", "run-deploy"}),
    ({"retrieval_priority": {"$between": [30, 70]}}, {"dec-queue", "run-deploy", "note"}),
    ({"tags": "cache"}, {"dec-cache", "run-deploy"}),
    ({"tags": {"$in": ["queue", "deploy"]}}, {"dec-queue", "run-deploy"}),
    ({"tags": {"$nin": ["cache"]}}, {"dec-queue", "note"}),
    ({"tags": {"$like": "dep%"}}, {"run-deploy"}),
    ({"tags": {"$exists": False}}, {"note"}),
    ({"is_canonical": False}, {"note"}),
    ({"team": "platform"}, {"dec-cache"}),
    ({"team": {"$like": "platform%"}}, {"dec-cache", "dec-queue"}),
    ({"team": {"$ilike": "INFRA"}}, {"run-deploy"}),
    ({"score": {"$gt": 4}}, {"dec-cache", "dec-queue"}),
    ({"score": {"$between": [1, 5]}}, {"dec-cache", "run-deploy"}),
    ({"score": {"$lte": 2.5}}, {"run-deploy"}),
    ({"team": {"$exists": True}}, {"dec-cache", "dec-queue", "run-deploy"}),
    ({"team": {"$nin": ["infra"]}}, {"dec-cache", "dec-queue", "note"}),
    ({"doc_date": {"$gte": "2026-01-01"}}, {"dec-cache", "run-deploy"} | {"note"}),
    ({"$or": [{"team": "infra"}, {"canonical_status": "superseded"}]}, {"dec-queue", "run-deploy"}),
    ({"$and": [{"canonical_type": "decision"}, {"$not": {"team": "platform"}}]}, {"dec-queue"}),
    ({"$not": {"team": "platform"}}, {"dec-queue", "run-deploy", "note"}),
    ({"$not": {"$or": [{"tags": "cache"}, {"tags": "queue"}]}}, {"note"}),
    ({"canonical_type": "decision", "score": {"$lt": 6}}, {"dec-cache"}),
    # metadata.<key>: the frontmatter's key even when a document field has its name
    ({"metadata.retrieval_priority": 80}, {"dec-cache"}),
    ({"metadata.slug": {"$exists": False}}, {"note"}),
    ({"$or": [{"metadata.team": "infra"}, {"metadata.type": "decision", "score": 9}]},
     {"dec-queue", "run-deploy"}),
    # the document's own date: its fallback (when it was ingested) is always there
    ({"doc_date": {"$exists": True}}, {"dec-cache", "dec-queue", "run-deploy"}),
    ({"doc_date": {"$exists": False}}, {"note"}),
    ({"language": "EN"}, {"dec-cache"}),  # as the languages dimension: stored lower-case
]


@pytest.mark.parametrize(("expression", "expected"), CASES,
                         ids=[str(c[0])[:60] for c in CASES])
def test_expression_runs_and_selects(kb: KnowledgeBase, expression: dict, expected: set) -> None:
    assert _keys(kb, where_filters(expression)) == expected
    # the same through the core's own mapping: a top-level $and beside the dimensions
    assert _keys(kb, {"$and": [expression]}) == expected


def test_expressions_and_dimensions_combine(kb: KnowledgeBase) -> None:
    assert _keys(kb, {"tags": ["cache"], "$or": [{"team": "infra"}, {"score": 5}]}) == {
        "dec-cache", "run-deploy"}
    assert _keys(kb, {"canonical_types": ["decision"], "$not": {"tags": "queue"}}) == {"dec-cache"}
    assert _keys(kb, None) == ALL


def test_a_chunk_is_selected_by_its_stable_id(kb: KnowledgeBase) -> None:
    """``chunk_uid`` names chunks (a framework's node ids) in search, get_chunks alike; the
    vector leg finds them however far down the ranking they are."""
    uids = {h.document.doc_key: h.chunk_uid for h in kb.search(
        "shared words about the platform", limit=10).primary}
    wanted = [uids["note"], uids["dec-queue"]]
    assert _keys(kb, {"$and": [{"chunk_uid": {"$in": wanted}}]}) == {"note", "dec-queue"}
    assert _keys(kb, {"$not": {"chunk_uid": uids["note"]}}) == ALL - {"note"}
    assert {c.id for c in kb.get_chunks(filters={"$and": [{"chunk_uid": wanted[0]}]})} == \
        {wanted[0]}


def test_every_value_is_bound(kb: KnowledgeBase) -> None:
    hostile = "x'); DROP TABLE kb_chunks; --"
    sql = kb.search_sql("platform", filters={"$or": [{"team": hostile}, {"title": hostile}]})
    assert hostile not in sql and "DROP" not in sql
    assert _keys(kb, {"$or": [{"team": hostile}, {"title": {"$like": hostile}}]}) == set()


@pytest.mark.parametrize("bad", [
    {"$xor": [{"a": 1}]}, {"$and": []}, {"$and": {"a": 1}}, {"$or": [5]}, {"a": {"$regex": "."}},
    {"retrieval_priority": {"$gt": "high"}}, {"tags": {"$gt": "a"}}, {"is_canonical": "yes"},
    {"score": {"$between": [1]}}, {"a b": 1}, {"doc_date": {"$gt": "last week"}},
    {"score": 10**400}, {"team": {"$like": 5}}, {"a": {"$in": "x"}},
    {"team": {"$like": "platform\\"}},  # ends in the escape character: the server's error
])
def test_malformed_expressions_are_filter_errors(bad: dict) -> None:
    with pytest.raises(FilterError):
        where_filters(bad)


def test_depth_and_size_are_bounded() -> None:
    deep: dict[str, Any] = {"a": 1}
    for _ in range(40):
        deep = {"$not": deep}
    with pytest.raises(FilterError, match="nested"):
        parse_expr(deep)
    with pytest.raises(FilterError, match="at most"):
        parse_expr({"$or": [{"a": i} for i in range(500)]})


def test_unknown_top_level_keys_still_fail_with_the_valid_names() -> None:
    with pytest.raises(FilterError, match=r"valid: source_types.*\$and"):
        parse_filters({"tag": ["cache"]})


def test_filters_applied_counts_the_expression(kb: KnowledgeBase, tmp_path: Path) -> None:
    result = kb.search("platform", filters={"tags": ["cache"], "$or": [{"a": 1}, {"b": 2}]})
    assert result.meta["search_strategy"]["filters_applied"] == 2


def test_date_only_bounds_take_whole_days() -> None:
    from datetime import UTC, datetime

    def bound(expr: dict) -> Any:
        return parse_expr(expr)

    lt = bound({"doc_date": {"$lt": "2024-01-01"}})
    assert lt.value == datetime(2024, 1, 1, tzinfo=UTC)  # type: ignore[union-attr]
    gt = bound({"doc_date": {"$gt": "2024-01-01"}})
    assert gt.value.hour == 23  # type: ignore[union-attr]
    on = bound({"doc_date": "2024-01-01"})
    assert on.op == "$between" and on.value[1].hour == 23  # type: ignore[union-attr]
    between = bound({"doc_date": {"$between": ["2024-01-01", "2024-01-31"]}})
    assert between.value[1].day == 31 and between.value[1].hour == 23  # type: ignore[union-attr]


def test_typed_checks_come_before_between(kb: KnowledgeBase) -> None:
    with pytest.raises(FilterError, match="tags take"):
        where_filters({"tags": {"$between": ["a", "z"]}})
    with pytest.raises(FilterError):
        where_filters({"is_canonical": {"$between": [False, True]}})


def test_a_day_matches_its_documents(kb: KnowledgeBase) -> None:
    assert _keys(kb, where_filters({"doc_date": "2026-03-01"})) == {"dec-cache"}
    assert "dec-cache" not in _keys(kb, where_filters({"doc_date": {"$ne": "2026-03-01"}}))


def test_days_in_lists_and_in_the_basic_format_take_whole_days(make_kb, tmp_path: Path) -> None:
    """A day in ``$in``/``$nin`` was compared with its midnight (a document dated at 10:30
    never matched), and the basic ISO format ``20260301`` was not read as a day at all (an
    ``$eq`` on midnight, a ``date_to`` that left the day out)."""
    for name, updated in (("morning", "2026-03-01T10:30:00Z"), ("next", "2026-03-02T09:00:00Z")):
        (tmp_path / f"{name}.md").write_text(f"---\nupdated: {updated}\n---\n# {name}\n\n"
                                             "shared words about the platform\n")
    kb = make_kb(settings=Settings(default_min_similarity=-1.0, context_cutoff=0))
    assert not kb.ingest([tmp_path]).failed
    for filters, expected in (
            (where_filters({"doc_date": {"$in": ["2026-03-01"]}}), {"morning"}),
            (where_filters({"doc_date": {"$in": ["2026-03-01", "2026-03-02"]}}), {"morning", "next"}),
            (where_filters({"doc_date": {"$nin": ["2026-03-01"]}}), {"next"}),
            (where_filters({"doc_date": "20260301"}), {"morning"}),
            ({"date_to": "20260301"}, {"morning"}),
            ({"date_from": "20260302"}, {"next"}),
            # a list of a day and a datetime: the day is still whole (it was its midnight)
            (where_filters({"doc_date": {"$in": ["2026-03-01", "2026-03-02T09:00:00Z"]}}),
             {"morning", "next"}),
            (where_filters({"doc_date": {"$nin": ["2026-03-01", "2026-03-02T09:00:00Z"]}}),
             set())):
        assert _keys(kb, filters) == expected, filters


def test_a_metadata_filter_beside_doc_ids_in_filter_mode_keeps_its_values(make_kb) -> None:
    """``KB_MENTIONS_MODE=filter`` with doc ids and a metadata filter: the legs named the
    expression's values from w1 (after ``f_doc_ids``), the graph hop of the same statement,
    which leaves doc ids out, from w0, and its values overwrote the legs' (the legs looked
    up the key '"sre"'): every such search came back empty."""
    kb = make_kb(settings=Settings(mentions_mode="filter"))
    kb.add_documents([
        {"id": "pager", "text": "# Pager\n\nThe on-call engineer is paged by Opsgenie.",
         "metadata": {"team": "sre"}},
        {"id": "payroll", "text": "# Payroll\n\nThe on-call allowance is paid monthly.",
         "metadata": {"team": "finance"}}])
    pager = next(h.document.id for h in kb.search("Opsgenie pager").primary
                 if h.document.source_path == "pager")
    found = kb.search("on-call engineer", filters={"doc_ids": [pager],
                                                     "metadata": {"team": "sre"}})
    assert [h.document.source_path for h in found.primary] == ["pager"]


def test_a_filter_on_true_after_one_on_1_binds_true(make_kb) -> None:
    """The statement cache keyed the filters by equality, and ``True == 1`` in Python: a search
    filtering ``archived == true`` after one filtering ``archived == 1`` bound 1, and got the
    other document, silently (JSON's 1 is not true)."""
    kb = make_kb()
    kb.add_documents([
        {"id": "one", "text": "# Cache\n\nRedis is the cache layer.", "metadata": {"archived": 1}},
        {"id": "true", "text": "# Cache\n\nRedis is the cache layer, archived.",
         "metadata": {"archived": True}}])
    for value, want in ((1, ["one"]), (True, ["true"]), (0, []), (False, []), (1.0, ["one"])):
        found = kb.search("redis cache layer", filters={"metadata": {"archived": value}})
        assert [h.document.source_path for h in found.primary] == want, value


def test_a_datetime_in_metadata_compares_as_the_iso_text_filters_give(make_kb) -> None:
    """A datetime in an added document's metadata was stored as str() gives it,
    "2026-03-01 10:00:00+00:00", which sorts below "2026-03-01T09:00:00" (a space before
    "T"): a filter from 09:00 on left it out. It is stored as ISO text, as frontmatter is."""
    from datetime import UTC, datetime

    kb = make_kb()
    kb.add_documents([{"id": "r", "text": "reviewed cache note",
                       "metadata": {"reviewed": datetime(2026, 3, 1, 10, tzinfo=UTC)}}])
    found = kb.search("reviewed cache note",
                      filters={"$and": [{"reviewed": {"$gte": "2026-03-01T09:00:00"}}]})
    assert [h.document.source_path for h in found.primary] == ["r"]
    assert kb.get_by_ids(["r"])[0].metadata["reviewed"] == "2026-03-01T10:00:00+00:00"
