"""What every frozen model shares: the empty mapping default and the fast constructor."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import MISSING, fields
from types import MappingProxyType
from typing import Any, NamedTuple, TypeVar

__all__ = ["construct", "empty"]


def empty() -> Mapping[str, Any]:
    return MappingProxyType({})


_T = TypeVar("_T")


class _Spec(NamedTuple):
    plain: dict[str, Any]  # the fields with a default value
    factories: dict[str, Callable[[], Any]]  # the fields with a default factory
    names: frozenset[str]
    size: int  # the number of fields


_SPECS: dict[type, _Spec] = {}


def _spec(cls: type) -> _Spec:
    fs = fields(cls)  # type: ignore[arg-type]
    spec = _SPECS[cls] = _Spec(
        plain={f.name: f.default for f in fs if f.default is not MISSING},
        factories={f.name: f.default_factory for f in fs if f.default_factory is not MISSING},
        names=frozenset(f.name for f in fs), size=len(fs))
    return spec


def construct(cls: type[_T], values: Mapping[str, Any]) -> _T:
    """``cls(**values)`` for a frozen model of this module, without running its ``__init__``.

    A frozen dataclass's ``__init__`` sets each field through ``object.__setattr__``, and a
    search builds four such objects per candidate: this fills the instance's ``__dict__`` at
    once (like pydantic's ``model_construct``); decision 0004 measured that it pays under load.
    Defaults apply as in ``__init__``; an
    unknown or missing required field raises :class:`TypeError` (mypy cannot check the keys:
    tests/unit/test_rows.py compares each converter with the ordinary constructor).

    >>> from kb_retriever.models import DocumentRef
    >>> ref = construct(DocumentRef, {"id": 1, "tenant_id": "t", "project_key": "p",
    ...                               "doc_key": "k", "title": "T", "source_path": "a.md"})
    >>> ref == DocumentRef(1, "t", "p", "k", "T", "a.md"), ref.retrieval_priority
    (True, 50)
    """
    spec = _SPECS.get(cls) or _spec(cls)
    obj = object.__new__(cls)
    data = obj.__dict__
    if len(values) != spec.size:  # some fields left to their defaults
        data.update(spec.plain)
        data.update(values)
        for name, factory in spec.factories.items():
            if name not in values:
                data[name] = factory()
    else:
        data.update(values)
    if len(data) != spec.size or not data.keys() <= spec.names:
        bad = sorted(data.keys() - spec.names) or sorted(spec.names - data.keys())
        raise TypeError(f"{cls.__name__}: unknown or missing fields {bad}")
    return obj
