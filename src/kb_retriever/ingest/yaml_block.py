"""Frontmatter's YAML, loaded safely (bounded size, aliases and depth; JSON-safe values) and
with names as written (YAML 1.1 reads `slug: 0042` as the number 34)."""

from __future__ import annotations

import math
from datetime import date, datetime
from typing import Any

import yaml

from ..vocabulary import EDGE_TYPE_WEIGHTS

__all__ = ["MAX_FRONTMATTER_BYTES", "MAX_YAML_ALIASES", "MAX_YAML_DEPTH", "UnsafeYaml",
           "load_yaml", "plain"]

# Real frontmatter is a few hundred bytes; 256 KB leaves room for long summaries while keeping
# the pure-YAML parse well under a second on hostile input.
MAX_FRONTMATTER_BYTES = 256 * 1024
# Each alias can multiply the expanded size ("billion laughs"); 10 aliases bound the expansion
# to a few dozen times the raw size, and honest frontmatter needs none.
MAX_YAML_ALIASES = 10
# Deeper nesting is never legitimate here and would exhaust the recursion limit later on.
MAX_YAML_DEPTH = 32


# The safe loader (libyaml's parser when present: 5-10x faster), with lenient timestamps below.
_Loader: Any = type("_Loader", (getattr(yaml, "CSafeLoader", yaml.SafeLoader),), {})


def _timestamp(loader: Any, node: Any) -> Any:
    # `date: 2024-13-45` stays a string (and gets a warning) instead of failing the whole block.
    try:
        return loader.construct_yaml_timestamp(node)
    except ValueError:
        return loader.construct_scalar(node)


_Loader.add_constructor("tag:yaml.org,2002:timestamp", _timestamp)


class UnsafeYaml(ValueError):
    """The frontmatter is structurally hostile (too big, too many aliases, too deep, cyclic)."""


def load_yaml(raw: str) -> Any:
    if len(raw.encode("utf-8", "surrogatepass")) > MAX_FRONTMATTER_BYTES:
        raise UnsafeYaml(f"larger than {MAX_FRONTMATTER_BYTES // 1024} KB")
    # Count aliases on the event stream (linear in the capped size) before any object is built.
    aliases = sum(isinstance(e, yaml.AliasEvent) for e in yaml.parse(raw, Loader=_Loader))
    if aliases > MAX_YAML_ALIASES:
        raise UnsafeYaml(f"more than {MAX_YAML_ALIASES} YAML aliases")
    loader = _Loader(raw)  # a SafeLoader; its node tree read once, for the names too
    try:
        node = loader.get_single_node()
        _refuse_repeated_keys(node)
        data = None if node is None else loader.construct_document(node)
    finally:
        loader.dispose()
    return _as_written(node, plain(data, 0, set()))


def _refuse_repeated_keys(root: Any) -> None:
    """A ``ValueError`` naming a key that a mapping of the tree ``root`` gives twice: YAML keeps
    the last value silently (``slug: 0042`` then ``slug: auth``), and a mapping's keys are
    unique in YAML 1.2. Merge keys (``<<``) may repeat."""
    stack, seen = [root], set()
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen:  # an alias is the node it names: read once
            continue
        seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            keys: set[str] = set()
            for key, value in node.value:
                name = key.value if isinstance(key, yaml.ScalarNode) else None
                if name is not None and name != "<<":
                    if name in keys:
                        line = key.start_mark.line + 1
                        raise ValueError(f"key {name!r} given twice (line {line} of the block)")
                    keys.add(name)
                stack += [key, value]
        elif isinstance(node, yaml.SequenceNode):
            stack += node.value


# Keys whose values are names, read as written: YAML 1.1 (PyYAML's) reads the plain scalar
# `slug: 0042` as octal 34, the tag `no` as False, `language: no` (Norwegian) as False and
# `title: 12:30` as 750 (base 60); a summary of `no` was a flag. Lists of names: their items (a
# bare `tags: 12` is no list).
_NAME_KEYS = frozenset({"slug", "id", "title", "language", "summary"})
_NAME_LISTS = frozenset({"tags", "owners", "related", "supersedes", "superseded_by",
                         *EDGE_TYPE_WEIGHTS})
_READ_AS_NUMBER_OR_FLAG = frozenset({"tag:yaml.org,2002:int", "tag:yaml.org,2002:float",
                                     "tag:yaml.org,2002:bool"})


def _as_written(root: Any, data: Any) -> Any:
    """``data`` (constructed from the node ``root``) with each name (:data:`_NAME_KEYS`, or an
    item of a list of them) that YAML read as a number or a flag given back as its text."""
    if not isinstance(data, dict) or not isinstance(root, yaml.MappingNode):
        return data
    out = dict(data)
    for key, node in root.value:
        name = key.value if isinstance(key, yaml.ScalarNode) else None
        if name not in out:
            continue
        if name in _NAME_KEYS and _number_or_flag(node):
            out[name] = node.value
        elif name in _NAME_LISTS and isinstance(node, yaml.SequenceNode) \
                and isinstance(out[name], list) and len(out[name]) == len(node.value):
            out[name] = [item.value if _number_or_flag(item) else value
                         for item, value in zip(node.value, out[name], strict=True)]
    return out


def _number_or_flag(node: Any) -> bool:
    return (isinstance(node, yaml.ScalarNode) and not node.style  # plain, not quoted
            and node.tag in _READ_AS_NUMBER_OR_FLAG)


def plain(value: Any, depth: int, path: set[int]) -> Any:
    """A JSON/jsonb-safe copy: str keys, ISO dates, no NUL characters, no NaN, no cycles."""
    if depth > MAX_YAML_DEPTH:
        raise UnsafeYaml(f"nested deeper than {MAX_YAML_DEPTH} levels")
    if isinstance(value, (dict, list, tuple, set)):
        if id(value) in path:
            raise UnsafeYaml("YAML aliases form a cycle")
        path = path | {id(value)}
        if isinstance(value, dict):
            return {str(plain(k, depth + 1, path)): plain(v, depth + 1, path)
                    for k, v in value.items()}
        items = sorted(value, key=str) if isinstance(value, set) else value
        return [plain(v, depth + 1, path) for v in items]
    if isinstance(value, str):
        return value.replace("\x00", "")  # PostgreSQL text/jsonb cannot store NUL
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if value is None or isinstance(value, (bool, int, float)):
        return value
    return str(value)
