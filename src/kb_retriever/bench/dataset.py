"""Load and validate an AskMyDocs benchmark queries file (reference §20 step 2).

A malformed file raises :class:`~kb_retriever.errors.InputError` naming the query and field,
because a silently ignored typo (``expect_citaton``) would quietly change what is measured.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

import yaml

from kb_retriever.errors import InputError

__all__ = ["KNOWN_KEYS", "BenchQuery", "load_queries", "parse_queries"]

KNOWN_KEYS = frozenset({
    "id", "query", "relevance", "expect_citation", "expect_related", "expect_rejected",
    "expect_refusal", "expect_answer",
})
MAX_GRADE = 3  # reference grades: 0 not relevant .. 3 directly answers


def _no_grades() -> Mapping[str, int]:
    return MappingProxyType({})


@dataclass(frozen=True)
class BenchQuery:
    """One labelled query. ``relevance`` maps doc key (file name without extension) → 0..3."""

    id: str
    query: str
    relevance: Mapping[str, int] = field(default_factory=_no_grades)
    expect_citation: str | None = None
    expect_related: tuple[str, ...] = ()
    expect_rejected: tuple[str, ...] = ()
    expect_refusal: bool = False
    expect_answer: str | None = None

    @property
    def relevant(self) -> frozenset[str]:
        """Doc keys graded above 0."""
        return frozenset(k for k, g in self.relevance.items() if g > 0)

    def doc_keys(self) -> set[str]:
        """Every doc key the labels mention (to check them against the corpus)."""
        keys = set(self.relevance) | set(self.expect_related) | set(self.expect_rejected)
        if self.expect_citation:
            keys.add(self.expect_citation)
        return keys


class _UniqueKeysLoader(yaml.SafeLoader):
    """``yaml.safe_load`` that refuses a key given twice in one mapping (the safe loader
    keeps the last: a second ``relevance:`` block dropped the first's labels)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)  # type: ignore[no-untyped-call]
            if isinstance(key, str | int | float | bool) and key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"the key {key!r} is given twice", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def load_queries(path: str | Path) -> list[BenchQuery]:
    """Read and validate a queries YAML file (top-level ``queries:`` list)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeError) as exc:
        raise InputError(f"cannot read queries file {p}: {exc}") from None
    try:
        data = yaml.load(text, Loader=_UniqueKeysLoader)  # noqa: S506 (a SafeLoader)
    except yaml.YAMLError as exc:
        raise InputError(f"queries file {p} is not valid YAML: {exc}") from None
    return parse_queries(data, source=str(p))


def parse_queries(data: Any, *, source: str = "queries") -> list[BenchQuery]:
    """Validate already-parsed YAML data; see :func:`load_queries`."""
    if not isinstance(data, Mapping) or not isinstance(data.get("queries"), list):
        raise InputError(f"{source}: expected a top-level 'queries:' list")
    if not data["queries"]:
        raise InputError(f"{source}: the 'queries' list is empty")
    out: list[BenchQuery] = []
    seen: set[str] = set()
    for i, raw in enumerate(data["queries"], start=1):
        q = _parse_one(raw, f"{source}: query #{i}")
        if q.id in seen:
            raise InputError(f"{source}: duplicate query id {q.id!r}")
        seen.add(q.id)
        out.append(q)
    return out


def _parse_one(raw: Any, where: str) -> BenchQuery:
    if not isinstance(raw, Mapping):
        raise InputError(f"{where}: expected a mapping, got {type(raw).__name__}")
    unknown = sorted(str(k) for k in raw if k not in KNOWN_KEYS)
    if unknown:
        raise InputError(
            f"{where}: unknown key(s) {', '.join(unknown)}; valid: {', '.join(sorted(KNOWN_KEYS))}"
        )
    qid = _text(raw.get("id"), f"{where}: 'id'")
    where = f"{where} ({qid})"
    return BenchQuery(
        id=qid,
        query=_text(raw.get("query"), f"{where}: 'query'"),
        relevance=MappingProxyType(_grades(raw.get("relevance"), where)),
        expect_citation=_optional_text(raw.get("expect_citation"), f"{where}: 'expect_citation'"),
        expect_related=_keys(raw.get("expect_related"), f"{where}: 'expect_related'"),
        expect_rejected=_keys(raw.get("expect_rejected"), f"{where}: 'expect_rejected'"),
        expect_refusal=_flag(raw.get("expect_refusal"), f"{where}: 'expect_refusal'"),
        expect_answer=_optional_text(raw.get("expect_answer"), f"{where}: 'expect_answer'"),
    )


def _text(value: Any, what: str) -> str:
    # YAML reads unquoted `id: 12` as an int; a scalar id is still a usable label.
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str) or not value.strip():
        raise InputError(f"{what} is missing or not a non-empty string")
    return value.strip()


def _optional_text(value: Any, what: str) -> str | None:
    return None if value is None else _text(value, what)


def _keys(value: Any, what: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):  # `expect_related: mod-x` is a one-item list, not characters
        value = [value]
    if not isinstance(value, list):
        raise InputError(f"{what} must be a list of doc keys")
    return tuple(dict.fromkeys(_text(v, what) for v in value))


def _flag(value: Any, what: str) -> bool:
    if value is None:
        return False
    if not isinstance(value, bool):
        raise InputError(f"{what} must be true or false, got {value!r}")
    return value


def _grades(value: Any, where: str) -> dict[str, int]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InputError(f"{where}: 'relevance' must be a mapping of doc key to grade 0..3")
    grades: dict[str, int] = {}
    for key, grade in value.items():
        doc = _text(key, f"{where}: a 'relevance' key")
        if isinstance(grade, bool) or not isinstance(grade, int) or not 0 <= grade <= MAX_GRADE:
            raise InputError(
                f"{where}: relevance grade of {doc!r} must be an integer 0..{MAX_GRADE}, "
                f"got {grade!r}"
            )
        if doc in grades:  # ("a" and "a ": one doc key)
            raise InputError(f"{where}: relevance names {doc!r} twice")
        grades[doc] = grade
    return grades
