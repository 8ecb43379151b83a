"""Canonical frontmatter parsing (reference §2.1): validation, list shapes, hostile YAML."""

from __future__ import annotations

import dataclasses
import json
import time
from datetime import UTC, datetime, timedelta, timezone

import pytest

from kb_retriever.ingest import FrontmatterResult, parse_frontmatter
from kb_retriever.ingest.frontmatter import as_slug, split_frontmatter

CANONICAL = "slug: auth-flow\ntype: decision\nstatus: accepted\n"


def fm(yaml_text: str, body: str = "Body text\n") -> FrontmatterResult:
    return parse_frontmatter(f"---\n{yaml_text}---\n{body}")


def warned(result: FrontmatterResult, *needles: str) -> bool:
    return any(all(n in w for n in needles) for w in result.warnings)


# --- detection ------------------------------------------------------------------------------


def test_minimal_canonical_document() -> None:
    result = fm(CANONICAL + "id: DEC-7\n")
    assert result.is_canonical
    assert result.has_frontmatter
    assert (result.slug, result.canonical_type, result.canonical_status) == (
        "auth-flow", "decision", "accepted")
    assert result.retrieval_priority == 50
    assert result.doc_id == "DEC-7"
    assert result.generation_source == "human"
    assert result.body == "Body text\n"
    assert result.warnings == ()


def test_no_frontmatter_is_plain_document() -> None:
    text = "# Title\n\nslug: not-frontmatter\n"
    result = parse_frontmatter(text)
    assert not result.is_canonical
    assert not result.has_frontmatter
    assert result.body == text
    assert result.data == {}
    assert result.warnings == ()


@pytest.mark.parametrize("text", [
    "---\nslug: a\n",                       # never closed
    "----\nslug: a\n---\nbody",             # opening line is not `---`
    " ---\nslug: a\n---\nbody",             # not at the very start
    "---\nslug: a\n---- \nbody",            # closing line is not `---`
])
def test_not_frontmatter(text: str) -> None:
    assert split_frontmatter(text) == (None, text)
    assert not parse_frontmatter(text).has_frontmatter


def test_crlf_frontmatter() -> None:
    result = parse_frontmatter("---\r\n" + CANONICAL.replace("\n", "\r\n") + "---\r\nBody\r\n")
    assert result.is_canonical
    assert result.slug == "auth-flow"
    assert result.body == "Body\r\n"


def test_closing_fence_at_end_of_text_and_leading_blank_lines_removed() -> None:
    assert split_frontmatter("---\nslug: a\n---") == ("slug: a", "")
    assert split_frontmatter("---\nslug: a\n---\n\n\nBody") == ("slug: a", "Body")


def test_empty_frontmatter_block() -> None:
    result = parse_frontmatter("---\n---\nBody")
    assert not result.is_canonical
    assert result.body == "Body"
    assert warned(result, "empty")


def test_result_is_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        fm(CANONICAL).slug = "other"  # type: ignore[misc]


# --- validation -----------------------------------------------------------------------------


@pytest.mark.parametrize("slug", ["Auth", "-auth", "auth flow", "auth_flow", "Äpfel", "Рішення"])
def test_invalid_slug_is_non_canonical_with_warning(slug: str) -> None:
    result = fm(f"slug: '{slug}'\ntype: decision\nstatus: accepted\n")
    assert not result.is_canonical
    assert result.slug is None
    assert warned(result, "slug")


def test_a_slug_in_another_script_is_canonical_and_its_links_meet_it() -> None:
    """The reference allows ASCII slugs alone: a Ukrainian or Czech team's documents lost their
    type and status, and every link to them was dropped. A link typed with a combining accent
    ("i" + U+0301) names the slug typed with the composed letter ("í")."""
    decomposed = "rozhodnuti\u0301-pacs"
    result = fm(f"slug: рішення-склад-v2\ntype: decision\nstatus: accepted\n"
                f"supersedes: ['[[рішення-склад-v1]]']\nrelated: [{decomposed}, 缓存决策]\n")
    assert result.is_canonical and not result.warnings
    assert result.slug == "рішення-склад-v2"
    assert result.supersedes == ("рішення-склад-v1",)
    assert result.related == ("rozhodnutí-pacs", "缓存决策")


@pytest.mark.parametrize("slug,link", [
    ("निर्णय-कैश-v2", "निर्णय-कैश-v1"),  # Hindi: vowel signs (Mc, Mn) and a virama
    ("การตัดสินใจ-แคช", "บันทึก-แคช"),  # Thai: vowels and tone marks above and below
    ("முடிவு-கேச்", "பதிவு-கேச்"),  # Tamil
])
def test_a_slug_whose_letters_carry_combining_marks_is_canonical(slug: str, link: str) -> None:
    """The vowel signs of Devanagari, Thai or Tamil are combining marks, not letters: a Hindi
    team's documents lost their type and status, and every link to them was dropped. A mark
    must still follow a letter."""
    result = fm(f"slug: {slug}\ntype: decision\nstatus: accepted\nsupersedes: ['[[{link}]]']\n")
    assert result.is_canonical and not result.warnings
    assert (result.slug, result.supersedes) == (slug, (link,))
    assert as_slug("\u093f-" + slug) is None and as_slug(slug + "-\u093f") is None


def test_numeric_slug_from_yaml_int_is_accepted() -> None:
    assert fm("slug: 2024\ntype: decision\nstatus: accepted\n").slug == "2024"


@pytest.mark.parametrize("field,value", [("type", "memo"), ("status", "done"), ("type", "[1]")])
def test_invalid_type_or_status(field: str, value: str) -> None:
    yaml_text = CANONICAL.replace(
        f"{field}: {'decision' if field == 'type' else 'accepted'}", f"{field}: {value}")
    result = fm(yaml_text)
    assert not result.is_canonical
    assert warned(result, field, "not one of")


def test_missing_required_fields_are_named() -> None:
    result = fm("slug: auth\n")
    assert not result.is_canonical
    assert warned(result, "missing", "type")
    assert warned(result, "missing", "status")


def test_plain_frontmatter_gets_no_missing_field_noise() -> None:
    result = fm("title: Meeting notes\ndate: 2024-03-01\ntags: [ops]\n")
    assert not result.is_canonical
    assert result.warnings == ()
    assert result.title == "Meeting notes"
    assert result.tags == ("ops",)
    assert result.doc_date == datetime(2024, 3, 1, tzinfo=UTC)


@pytest.mark.parametrize("raw,expected", [
    ("0", 0), ("100", 100), ("'70'", 70), ("\" 42 \"", 42), ("42.9", 42), ("'7.0'", 7),
])
def test_priority_accepted_values(raw: str, expected: int) -> None:
    result = fm(CANONICAL + f"retrieval_priority: {raw}\n")
    assert result.is_canonical
    assert result.retrieval_priority == expected


@pytest.mark.parametrize("raw", ["101", "-1", "'150'", "1e3", "'1e400'", "'" + "9" * 5000 + "'"])
def test_priority_out_of_range_is_non_canonical(raw: str) -> None:
    result = fm(CANONICAL + f"retrieval_priority: {raw}\n")
    assert not result.is_canonical
    assert result.retrieval_priority == 50
    assert warned(result, "retrieval_priority", "[0, 100]")


@pytest.mark.parametrize("raw", ["high", "true", "[50]", "''", ".nan", ".inf"])
def test_priority_not_a_number_falls_back_to_50(raw: str) -> None:
    # Reference semantics: a non-numeric priority is the default, not an error.
    result = fm(CANONICAL + f"retrieval_priority: {raw}\n")
    assert result.is_canonical
    assert result.retrieval_priority == 50
    assert warned(result, "retrieval_priority", "not a number")


# --- slug lists and edges -------------------------------------------------------------------


def test_related_accepts_every_spelling_dedupes_and_drops_invalid() -> None:
    result = fm(CANONICAL + (
        "related:\n"
        "  - [[token-store]]\n"       # unquoted: YAML makes it [['token-store']]
        "  - \"[[session]]\"\n"
        "  - plain-slug\n"
        "  - \"[[ spaced ]]\"\n"
        "  - Not A Slug\n"
        "  - [[token-store]]\n"
        "  - ''\n"
        "  - 42\n"
    ))
    assert result.related == ("token-store", "session", "plain-slug", "spaced", "42")
    assert result.is_canonical  # a bad entry is dropped, the document stays canonical
    assert warned(result, "related", "Not A Slug")
    assert len(result.warnings) == 1  # the empty entry is skipped silently


def test_flow_list_of_unquoted_wikilinks() -> None:
    result = fm(CANONICAL + "supersedes: [[[old-auth]], [[older-auth]]]\n"
                "superseded_by: \"[[new]]\"\n")
    assert result.supersedes == ("old-auth", "older-auth")
    assert result.superseded_by == ("new",)


def test_typed_edge_lists() -> None:
    result = fm(CANONICAL + "depends_on: [db, '[[cache]]']\nowned_by: [team-a]\nuses: []\n")
    assert result.typed_edges == (("depends_on", ("db", "cache")), ("owned_by", ("team-a",)))


def test_slug_list_of_wrong_type_is_ignored_with_warning() -> None:
    result = fm(CANONICAL + "related: {a: b}\n")
    assert result.related == ()
    assert warned(result, "related", "expected a list")


# --- descriptive fields ---------------------------------------------------------------------


def test_tags_and_owners() -> None:
    result = fm(CANONICAL + "tags: [ops, ' auth ', ops, '', 2024]\nowners: alice\n")
    assert result.tags == ("ops", "auth", "2024")
    assert result.owners == ("alice",)
    assert warned(result, "tags", "dropped")


@pytest.mark.parametrize("raw", ["{a: 1}", "12", "true"])
def test_tags_not_a_list_is_ignored_with_warning(raw: str) -> None:
    result = fm(CANONICAL + f"tags: {raw}\n")
    assert result.tags == ()
    assert result.is_canonical
    assert warned(result, "tags")


def test_summary_title_generation_source_and_evidence_tier() -> None:
    result = fm(CANONICAL + "summary: Why we chose OAuth\ntitle: OAuth\n"
                "generation_source: Auto\nevidence_tier: official\n")
    assert result.summary == "Why we chose OAuth"
    assert result.title == "OAuth"
    assert result.generation_source == "auto"
    assert result.evidence_tier == "official"
    assert fm(CANONICAL + "generation_source: llm\n").generation_source == "human"


def test_unknown_evidence_tier_is_ignored_with_warning() -> None:
    result = fm(CANONICAL + "evidence_tier: rumour\n")
    assert result.evidence_tier is None
    assert result.is_canonical
    assert warned(result, "evidence_tier")


def test_summary_of_wrong_type_is_ignored() -> None:
    result = fm(CANONICAL + "summary: [a, b]\n")
    assert result.summary is None
    assert warned(result, "summary")


@pytest.mark.parametrize("raw,expected", [
    ("updated: 2024-05-01", datetime(2024, 5, 1, tzinfo=UTC)),
    ("last_modified: 2024-05-01 10:30:00", datetime(2024, 5, 1, 10, 30, tzinfo=UTC)),
    ("date: '2024-05-01T10:30:00Z'", datetime(2024, 5, 1, 10, 30, tzinfo=UTC)),
    ("date: 2024-05-01T10:30:00+02:00",
     datetime(2024, 5, 1, 10, 30, tzinfo=timezone(timedelta(hours=2)))),
    ("updated: 2024-06-01\ndate: 2020-01-01", datetime(2024, 6, 1, tzinfo=UTC)),
])
def test_document_date(raw: str, expected: datetime) -> None:
    result = fm(raw + "\n")
    assert result.doc_date == expected
    assert result.doc_date is not None and result.doc_date.tzinfo is not None


def test_invalid_date_warns_and_falls_through_to_next_key() -> None:
    result = fm(CANONICAL + "updated: 2024-13-45\ndate: 2023-01-02\n")
    assert result.is_canonical  # an impossible date does not break the block
    assert result.doc_date == datetime(2023, 1, 2, tzinfo=UTC)
    assert warned(result, "updated", "ISO date")


@pytest.mark.parametrize("raw", ["9999-12-31T23:59:59-14:00", "0001-01-01T00:00:00+14:00",
                                 "9999-12-31"])
def test_a_date_the_store_cannot_give_back_warns_and_falls_through(raw: str) -> None:
    """Year 10000 in UTC was stored, and then every search of the project failed (psycopg
    cannot read it back: "timestamp too large")."""
    result = fm(CANONICAL + f"updated: '{raw}'\ndate: 2023-01-02\n")
    assert result.doc_date == datetime(2023, 1, 2, tzinfo=UTC)
    assert warned(result, "updated", "range")


@pytest.mark.parametrize("raw,expected", [("EN", "en"), ("it", "it"), ("en-US", "en"),
                                          ("english", None), ("e", None)])
def test_language(raw: str, expected: str | None) -> None:
    result = fm(f"language: {raw}\n")
    assert result.language == expected
    assert (expected is None) == warned(result, "language")


def test_data_is_json_safe() -> None:
    result = fm(CANONICAL + 'when: 2024-01-01\nnul: "a\\0b"\nnan: .nan\n1: one\n'
                "nested: {d: 2024-02-02}\n")
    json.dumps(result.data, allow_nan=False)  # must not raise
    assert result.data["when"] == "2024-01-01"
    assert result.data["nul"] == "ab"
    assert result.data["1"] == "one"
    assert result.data["nested"] == {"d": "2024-02-02"}


# --- malformed and hostile YAML -------------------------------------------------------------


@pytest.mark.parametrize("yaml_text", [
    "slug: [unclosed\n", "a: b: c\n", "\tslug: tab\n", "key: 'unterminated\n", "? [a]\n: b\n",
])
def test_malformed_yaml_is_non_canonical_with_warning(yaml_text: str) -> None:
    result = fm(yaml_text, body="# Still here\n")
    assert not result.is_canonical
    assert result.has_frontmatter
    assert result.body == "# Still here\n"
    assert len(result.warnings) == 1
    assert "\n" not in result.warnings[0]


@pytest.mark.parametrize("yaml_text,kind", [("- a\n- b\n", "list"), ("just text\n", "str"),
                                            ("42\n", "int")])
def test_frontmatter_not_a_map(yaml_text: str, kind: str) -> None:
    result = fm(yaml_text)
    assert not result.is_canonical
    assert warned(result, "not a map", kind)


def test_billion_laughs_is_rejected_quickly() -> None:
    levels = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for prev, name in zip("abcdefgh", "bcdefghi", strict=True):
        levels.append(f"{name}: &{name} [" + ",".join([f"*{prev}"] * 9) + "]")
    started = time.perf_counter()
    result = fm(CANONICAL + "\n".join(levels) + "\n")
    assert time.perf_counter() - started < 1.0
    assert not result.is_canonical
    assert warned(result, "aliases")


def test_a_few_aliases_are_fine() -> None:
    result = fm(CANONICAL + "base: &b [x, y]\ncopy: *b\n")
    assert result.is_canonical
    assert result.data["copy"] == ["x", "y"]


def test_recursive_alias_is_rejected() -> None:
    result = fm(CANONICAL + "loop: &l [*l]\n")
    assert not result.is_canonical
    assert warned(result, "cycle")


def test_deep_nesting_is_rejected() -> None:
    result = fm("deep: " + "[" * 3000 + "]" * 3000 + "\n")
    assert not result.is_canonical
    assert warned(result, "frontmatter")


def test_ten_megabyte_field_is_rejected_without_hanging() -> None:
    started = time.perf_counter()
    result = fm(CANONICAL + "summary: " + "x" * 10_000_000 + "\n", body="Body")
    assert time.perf_counter() - started < 2.0
    assert not result.is_canonical
    assert result.body == "Body"
    assert warned(result, "256 KB")


def test_ten_megabyte_unclosed_frontmatter_does_not_hang() -> None:
    text = "---\nsummary: " + "x" * 10_000_000
    started = time.perf_counter()
    result = parse_frontmatter(text)
    assert time.perf_counter() - started < 2.0
    assert not result.has_frontmatter


def test_a_link_with_an_alias_or_an_anchor_names_its_target() -> None:
    """``[[b|Bee]]`` and ``[[e#Heading]]`` (Obsidian's alias and anchor) were dropped, with a
    warning in frontmatter and silently in the body."""
    from kb_retriever.ingest.chunking import extract_wikilinks

    result = fm(CANONICAL + "related: ['[[b|Bee]]', '[[c#Setup]]', '[[d#Setup|Dee]]']\n")
    assert result.related == ("b", "c", "d") and not result.warnings
    assert extract_wikilinks("See [[d|Dee]] and [[e#Heading]] and [[f]].") == ("d", "e", "f")


def test_yaml_1_1_numbers_and_booleans_keep_their_text_in_names() -> None:
    """PyYAML reads YAML 1.1: ``slug: 0042`` became '34' (octal), ``id: 0010`` '8', the tag
    ``no`` False (dropped), ``language: no`` (Norwegian) was ignored, and ``title: 12:30``
    became '750' (base 60). A name is its text."""
    result = fm("slug: 0042\ntype: decision\nstatus: accepted\nid: 0010\n"
                "tags: [0042, no, ops]\nlanguage: no\ntitle: 12:30\n"
                "related: ['[[0042]]', 0010]\n")
    assert (result.slug, result.doc_id, result.tags) == ("0042", "0010", ("0042", "no", "ops"))
    assert result.language == "no" and result.title == "12:30"
    assert result.related == ("0042", "0010")
    assert fm("slug: 2024\ntype: decision\nstatus: accepted\n").slug == "2024"


@pytest.mark.parametrize("text", [
    "\ufeff---\nslug: a\ntype: decision\nstatus: accepted\n---\n# Title\nBody",
    "---\rslug: a\rtype: decision\rstatus: accepted\r---\r# Title\rBody"])
def test_a_block_after_a_bom_or_with_cr_line_ends_is_frontmatter(text: str) -> None:
    """Files are decoded first (the BOM dropped, line ends made \\n), an in-memory record's
    text is not: LangChain's ``TextLoader`` keeps a BOM, and the block was indexed as text."""
    result = parse_frontmatter(text)
    assert result.is_canonical and result.slug == "a"
    assert result.body.replace("\r", "\n") == "# Title\nBody"


@pytest.mark.parametrize("yaml_text, key", [
    ("slug: 0042\nslug: auth\ntype: decision\nstatus: accepted\n", "slug"),
    (CANONICAL + "tags: [1, yes]\ntags: [ops, db]\n", "tags"),
    (CANONICAL + "owners:\n  team: a\n  team: b\n", "team")])
def test_a_key_given_twice_is_refused_by_name(yaml_text: str, key: str) -> None:
    """YAML keeps a repeated key's last value, but the names were read back from its first:
    ``slug: 0042`` then ``slug: auth`` gave the slug '0042', and ``tags`` mixed both lists. A
    mapping's key is unique (YAML 1.2); the block is refused with a warning naming the key."""
    result = fm(yaml_text)
    assert not result.is_canonical and result.slug is None
    assert warned(result, "given twice", repr(key))


def test_a_summary_keeps_its_text() -> None:
    """``summary: 12:30`` was the number 750 (YAML 1.1's base 60) and ``summary: no`` was
    dropped as a flag: a summary is text as written."""
    assert fm(CANONICAL + "summary: 12:30\n").summary == "12:30"
    result = fm(CANONICAL + "summary: no\n")
    assert result.summary == "no" and not result.warnings


def test_a_link_escaped_inside_a_table_names_its_target() -> None:
    """Obsidian writes ``[[target\\|alias]]`` in a table (the pipe escaped from the table's
    columns): the link named ``target\\`` and was dropped."""
    from kb_retriever.ingest.chunking import extract_wikilinks

    assert extract_wikilinks("| a | [[dec-cache\\|the cache]] |") == ("dec-cache",)
    assert fm(CANONICAL + "related: ['[[dec-cache\\|the cache]]']\n").related == ("dec-cache",)
