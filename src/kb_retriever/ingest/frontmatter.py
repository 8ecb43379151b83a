"""Canonical YAML frontmatter: detection, safe loading and validation (reference §2.1).

Malformed or hostile frontmatter never raises: the document is ingested as non-canonical and
:attr:`FrontmatterResult.warnings` says why.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import yaml

from kb_retriever.models import CANONICAL_STATUSES, CANONICAL_TYPES
from kb_retriever.settings import EDGE_TYPE_WEIGHTS

from .yaml_block import UnsafeYaml, load_yaml, plain

__all__ = ["EVIDENCE_TIERS", "TYPED_EDGE_KEYS", "FrontmatterResult", "as_slug", "storable_date",
           "frontmatter_from_mapping", "parse_frontmatter", "split_frontmatter"]

# Lower-case letters of any script, digits and hyphens, a letter or digit first. The reference
# allows ASCII alone (``^[a-z0-9][a-z0-9-]*$``), which refused every slug of a team that names
# its documents in Ukrainian, Czech or Chinese: the document lost its type and status.
_SLUG_RE = re.compile(r"[^\W_](?:[^\W_]|-)*")
EVIDENCE_TIERS = ("guideline", "peer_reviewed", "official", "preprint", "news", "blog",
                  "search_hint", "unverified")
# `supersedes` has its own frontmatter field (provenance frontmatter_supersedes), so it is not
# also read as a typed list.
TYPED_EDGE_KEYS = tuple(t for t in EDGE_TYPE_WEIGHTS if t != "supersedes")
DATE_KEYS = ("updated", "last_modified", "date")


def link_target(inner: str) -> str:
    r"""The slug a wikilink's inside names: Obsidian's ``target#anchor|alias`` forms name
    ``target``, and so does ``target\|alias``, its form inside a table (the pipe escaped).

    >>> link_target("dec-cache|the cache decision"), link_target(" runbook#Restart ")
    ('dec-cache', 'runbook')
    >>> link_target("dec-cache\\|the cache")
    'dec-cache'
    """
    return inner.split("|", 1)[0].split("#", 1)[0].strip().removesuffix("\\").strip()


def as_slug(text: str) -> str | None:
    """``text`` as a slug (in Unicode's composed form, so that a link typed with combining
    accents meets the slug typed without), or None when it is not one.

    >>> as_slug("dec-cache-v2"), as_slug("рішення-склад-v2"), as_slug("rozhodnutí-pacs")
    ('dec-cache-v2', 'рішення-склад-v2', 'rozhodnutí-pacs')
    >>> as_slug("निर्णय-कैश")  # Devanagari's vowel signs are combining marks
    'निर्णय-कैश'
    >>> as_slug("Dec-Cache"), as_slug("two words"), as_slug("-dash"), as_slug("snake_case")
    (None, None, None, None)
    """
    slug = unicodedata.normalize("NFC", text)
    bare = _without_marks(slug)
    return slug if slug == slug.lower() and bare and _SLUG_RE.fullmatch(bare) else None


def _without_marks(slug: str) -> str | None:
    """``slug`` without the combining marks that follow its letters or digits (the vowel signs
    of Devanagari, Thai or Tamil are marks, not letters), or None when a mark follows none.

    >>> _without_marks("निर्णय"), _without_marks("\u093f-a")
    ('नरणय', None)
    """
    kept: list[str] = []
    for char in slug:
        if unicodedata.category(char) not in ("Mn", "Mc"):
            kept.append(char)
        elif not kept or kept[-1] == "-":
            return None
    return "".join(kept)


# Reference regex `\A---\r?\n(.*?)\r?\n---\r?\n?` in two linear steps (a lazy `.*?` takes
# half a second on 10 MB); unlike the reference, the closing `---` must end its line.
_OPEN_RE = re.compile(r"\ufeff?---[ \t]*(?:\r\n|\r|\n)")  # (an in-memory text may keep its
_CLOSE_RE = re.compile(r"[\r\n]---[ \t]*(?:\r\n|\r|\n|\Z)")  # BOM, or old Mac line ends)
_WIKILINK_WRAPPER_RE = re.compile(r"^\[\[([^\[\]]+)\]\]$")
_LANGUAGE_RE = re.compile(r"^([A-Za-z]{2})(?:[-_][A-Za-z0-9]{1,8})*$")
_NUMBER_RE = re.compile(r"^\s*[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?\s*$")


@dataclass(frozen=True)
class FrontmatterResult:
    """Parsed frontmatter. ``data`` is JSON-safe; the other fields are validated values."""

    data: dict[str, Any]
    body: str
    is_canonical: bool = False
    warnings: tuple[str, ...] = ()
    has_frontmatter: bool = False
    doc_id: str | None = None
    slug: str | None = None
    canonical_type: str | None = None
    canonical_status: str | None = None
    retrieval_priority: int = 50
    related: tuple[str, ...] = ()
    supersedes: tuple[str, ...] = ()
    superseded_by: tuple[str, ...] = ()
    # (edge_type, slugs) for the typed lists present, in EDGE_TYPE_WEIGHTS order
    typed_edges: tuple[tuple[str, tuple[str, ...]], ...] = ()
    tags: tuple[str, ...] = ()
    owners: tuple[str, ...] = ()
    summary: str | None = None
    generation_source: str = "human"
    evidence_tier: str | None = None
    doc_date: datetime | None = None
    language: str | None = None
    title: str | None = None


def split_frontmatter(text: str) -> tuple[str | None, str]:
    """Return ``(raw_yaml, body)``; ``raw_yaml`` is None when the text has no frontmatter block."""
    opening = _OPEN_RE.match(text)
    # Search from the opening line's own newline so that an empty block (`---\n---`) is found.
    closing = _CLOSE_RE.search(text, opening.end() - 1) if opening else None
    if opening is None or closing is None:
        return None, text
    raw = text[opening.end():max(opening.end(), closing.start())].removesuffix("\r")
    return raw.replace("\r\n", "\n").replace("\r", "\n"), text[closing.end():].lstrip("\r\n")


def without_block(text: str) -> str:
    """``text`` without its frontmatter block, when it has one: a block whose YAML reads as
    a text or a list is no frontmatter but a text that opens with a rule (``---``), and
    stays."""
    raw, body = split_frontmatter(text)
    if raw is None:
        return text
    try:
        data = load_yaml(raw)
    except (UnsafeYaml, yaml.YAMLError, ValueError, TypeError, OverflowError, RecursionError):
        return body  # a block, malformed (its warning says so)
    return body if data is None or isinstance(data, dict) else text


def parse_frontmatter(text: str) -> FrontmatterResult:
    """Parse and validate the leading ``---`` YAML block of a markdown text.

    Example::

        fm = parse_frontmatter("---\\nslug: auth\\ntype: decision\\nstatus: accepted\\n---\\nBody")
        assert fm.is_canonical and fm.slug == "auth" and fm.body == "Body"
    """
    raw, body = split_frontmatter(text)
    if raw is None:
        return FrontmatterResult(data={}, body=text)
    try:
        data = load_yaml(raw)
    except UnsafeYaml as exc:
        return _rejected(body, f"frontmatter rejected: {exc}")
    except (yaml.YAMLError, ValueError, TypeError, OverflowError, RecursionError) as exc:
        reason = " ".join(str(exc).split())[:200]
        return _rejected(body, f"frontmatter YAML could not be parsed: {reason}")
    if data is None:
        return _rejected(body, "frontmatter is empty")
    if not isinstance(data, dict):  # a text between rules, kept as text (without_block)
        return _rejected(text, f"frontmatter is not a map (got {type(data).__name__}): "
                               "read as text")
    return _validate(data, body)


def frontmatter_from_mapping(data: Any, body: str) -> FrontmatterResult:
    """Validate canonical fields given as a mapping (an in-memory document's metadata) exactly
    as those of a YAML block; never raises, like :func:`parse_frontmatter`.

    Example::

        fm = frontmatter_from_mapping({"slug": "auth", "type": "decision", "status": "accepted"}, "")
        assert fm.is_canonical and fm.slug == "auth"
    """
    if not data:
        return FrontmatterResult(data={}, body=body)
    try:
        values = plain(dict(data), 0, set())
    except (UnsafeYaml, RecursionError) as exc:
        return _rejected(body, f"metadata rejected: {exc}")
    return _validate(values, body)


def _rejected(body: str, reason: str) -> FrontmatterResult:
    return FrontmatterResult(data={}, body=body, warnings=(reason,), has_frontmatter=True)


def _scalar_str(value: Any) -> str | None:
    """A non-empty string from a YAML scalar (YAML turns `slug: 2024` into an int)."""
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        return None
    text = str(value).strip()
    return text or None


def _choice(data: dict[str, Any], key: str, valid: tuple[str, ...], problems: list[str], *,
            required: bool = True) -> Any:
    value = data.get(key)
    if value in valid:
        return str(value)
    if value is not None:
        problems.append(f"{key} {value!r:.60} {'is' if required else 'ignored:'} not one of "
                        f"{', '.join(valid)}")
    elif required:
        problems.append(f"missing required field {key!r}")
    return None


def _priority(value: Any, invalid: list[str], warnings: list[str]) -> int:
    """Reference semantics: int or numeric string; a non-number falls back to 50."""
    if value is None:
        return 50
    numeric = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not numeric and not (isinstance(value, str) and _NUMBER_RE.match(value)):
        warnings.append(f"retrieval_priority {value!r:.60} is not a number; using 50")
        return 50
    number = value if isinstance(value, int) else float(value)  # nan and inf fail the range
    if not 0 <= number <= 100:
        invalid.append(f"retrieval_priority {value!r:.60} must be in [0, 100]")
        return 50
    return int(number)


def _validate(data: dict[str, Any], body: str) -> FrontmatterResult:
    warnings: list[str] = []
    invalid: list[str] = []
    given = _scalar_str(data.get("slug"))
    slug = None if given is None else as_slug(given)
    if given is None:
        invalid.append("missing required field 'slug'")
    elif slug is None:
        invalid.append(f"slug {given!r:.60} is not lower-case letters, digits and hyphens")
    ctype = _choice(data, "type", CANONICAL_TYPES, invalid)
    status = _choice(data, "status", CANONICAL_STATUSES, invalid)
    priority = _priority(data.get("retrieval_priority"), invalid, warnings)
    lists = {key: _list(data, key, warnings, slugs=True)
             for key in ("related", "supersedes", "superseded_by", *TYPED_EDGE_KEYS)}
    tags, owners = (_list(data, k, warnings, slugs=False) for k in ("tags", "owners"))
    summary, title = (_optional_str(data, k, warnings) for k in ("summary", "title"))
    doc_date, language = _doc_date(data, warnings), _language(data.get("language"), warnings)
    tier = _choice(data, "evidence_tier", EVIDENCE_TIERS, warnings, required=False)
    is_auto = str(data.get("generation_source", "")).strip().lower() == "auto"
    # Frontmatter that never tried to be canonical (a plain `title:`/`date:` block) is not worth
    # a "missing slug/type/status" warning on every ingest.
    attempted = any(key in data for key in ("slug", "type", "status"))
    return FrontmatterResult(
        data=data, body=body, is_canonical=not invalid,
        warnings=tuple((invalid if attempted else []) + warnings),
        has_frontmatter=True, doc_id=_scalar_str(data.get("id")), slug=slug, canonical_type=ctype,
        canonical_status=status, retrieval_priority=priority, related=lists["related"],
        supersedes=lists["supersedes"], superseded_by=lists["superseded_by"],
        typed_edges=tuple((k, lists[k]) for k in TYPED_EDGE_KEYS if lists[k]),
        tags=tags, owners=owners, summary=summary, generation_source="auto" if is_auto else "human",
        evidence_tier=tier, doc_date=doc_date, language=language, title=title,
    )


def _flatten(value: Any) -> list[Any]:
    # Unquoted `[[slug]]` is a YAML flow sequence inside a sequence: [['slug']].
    if isinstance(value, list):
        return [leaf for item in value for leaf in _flatten(item)]
    return [value]


def _list(data: dict[str, Any], key: str, warnings: list[str], *, slugs: bool) -> tuple[str, ...]:
    """Deduplicated, order-preserving strings; slug lists also unwrap ``[[slug]]``."""
    value = data.get(key)
    if isinstance(value, str):
        value = [value]  # `tags: ops` means one tag
    if value is not None and not isinstance(value, list):
        warnings.append(f"{key} ignored: expected a list, got {type(value).__name__}")
    if not isinstance(value, list):
        return ()
    out: dict[str, None] = {}  # insertion-ordered set
    for item in _flatten(value) if slugs else value:
        text = _scalar_str(item)
        if slugs and text is not None and (match := _WIKILINK_WRAPPER_RE.match(text)):
            text = link_target(match.group(1))
        if slugs and item in (None, ""):
            continue  # empty targets are skipped silently, as in the reference
        if slugs and text is not None:
            text = as_slug(text)
        if text is None:
            why = "invalid slug" if slugs else "not a non-empty string"
            warnings.append(f"{key}: dropped {item!r:.60} ({why})")
            continue
        out.setdefault(text)
    return tuple(out)


def _optional_str(data: dict[str, Any], key: str, warnings: list[str]) -> str | None:
    value = data.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        warnings.append(f"{key} ignored: expected a string, got {type(value).__name__}")
        return None
    return str(value).strip() or None


def _language(value: Any, warnings: list[str]) -> str | None:
    match = _LANGUAGE_RE.match(value) if isinstance(value, str) else None
    if value is not None and match is None:
        warnings.append(f"language {value!r:.60} ignored: expected a 2-letter ISO-639-1 code")
    return match.group(1).lower() if match else None


def _doc_date(data: dict[str, Any], warnings: list[str]) -> datetime | None:
    # `_plain` already turned YAML dates into ISO strings, so one parser covers both spellings.
    for key in (k for k in DATE_KEYS if data.get(k) is not None):
        try:
            parsed = datetime.fromisoformat(str(data[key]).strip())
        except ValueError:
            warnings.append(f"{key} {data[key]!r:.60} ignored: not an ISO date")
            continue
        if (stored := storable_date(parsed)) is None:
            warnings.append(f"{key} {data[key]!r:.60} ignored: out of the range of dates")
            continue
        return stored
    return None


# Dates a search reads back in any session time zone: a day inside Python's range
# (9999-12-31T23:59-14:00 is year 10000 in UTC, stored, and then failed every search).
_FIRST_DATE = datetime.min.replace(tzinfo=UTC) + timedelta(days=1)
_LAST_DATE = datetime.max.replace(tzinfo=UTC) - timedelta(days=1)


def storable_date(value: datetime) -> datetime | None:
    """``value`` (naive: UTC) when it is within the dates the store can give back, else None.

    >>> from datetime import timezone
    >>> storable_date(datetime(9999, 12, 31, tzinfo=timezone(timedelta(hours=-14)))) is None
    True
    >>> storable_date(datetime(2024, 5, 1)).isoformat()
    '2024-05-01T00:00:00+00:00'
    """
    aware = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
    try:
        return aware if _FIRST_DATE <= aware <= _LAST_DATE else None
    except OverflowError:
        return None
