"""kb_retriever.write.calls: a call of several writes says what it saved when one fails."""

from __future__ import annotations

import asyncio

import pytest

from kb_retriever.errors import IngestError, StoreError, WriteError
from kb_retriever.write.calls import awrite_groups, write_groups


def _raise(exc: Exception):
    def write() -> None:
        raise exc
    return write


def test_every_group_saved_raises_nothing() -> None:
    done: list[str] = []
    write_groups([(["a"], lambda: done.append("a")), (["b"], lambda: done.append("b"))])
    assert done == ["a", "b"]


def test_a_refused_group_does_not_stop_the_others_and_the_saved_are_named() -> None:
    done: list[str] = []
    with pytest.raises(WriteError) as raised:
        write_groups([(["a"], _raise(IngestError("slug taken"))),
                      (["b", "c"], lambda: done.append("b"))])
    assert done == ["b"]
    assert raised.value.saved == ["b", "c"] and raised.value.failed == {"a": "slug taken"}
    assert isinstance(raised.value.__cause__, IngestError)


def test_a_store_failure_stops_the_call_and_reports_the_rest_not_written() -> None:
    with pytest.raises(WriteError) as raised:
        write_groups([(["a"], lambda: None), (["b"], _raise(StoreError("gone"))),
                      (["c"], lambda: pytest.fail("written after the store failed"))])
    assert raised.value.saved == ["a"]
    assert raised.value.failed == {"b": "gone", "c": "not written: StoreError"}


def test_a_write_error_of_a_group_is_merged() -> None:
    with pytest.raises(WriteError) as raised:
        write_groups([(["x", "y"], _raise(WriteError(["x"], {"y": "bad"}))),
                      (["z"], lambda: None)])
    assert raised.value.saved == ["x", "z"] and raised.value.failed == {"y": "bad"}


def test_nothing_saved_raises_the_first_failure_as_it_was() -> None:
    first = IngestError("slug taken")
    with pytest.raises(IngestError) as raised:
        write_groups([(["a"], _raise(first)), (["b"], _raise(StoreError("gone")))])
    assert raised.value is first


def test_the_async_twin_does_the_same() -> None:
    async def ok() -> None:
        return None

    async def bad() -> None:
        raise StoreError("gone")

    with pytest.raises(WriteError) as raised:
        asyncio.run(awrite_groups([(["a"], ok), (["b"], bad), (["c"], ok)]))
    assert raised.value.saved == ["a"]
    assert raised.value.failed == {"b": "gone", "c": "not written: StoreError"}
