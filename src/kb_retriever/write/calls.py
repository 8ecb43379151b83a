"""A framework call that writes several documents, each in its own transaction (the adapters'
``add_documents`` and ``add``: documents of their own, then the parts of each canonical slug).

A write that committed is never reported as failed: when one group fails after another was
saved, the call raises :class:`~kb_retriever.errors.WriteError` with both lists, as
:meth:`~kb_retriever.KnowledgeBase.add_documents` does for its own documents. A group that is
refused (``IngestError``) does not stop the others; a store failure stops the call, and the
groups after it are reported not written. When nothing was saved the first failure is raised
as it was (its own type tells what went wrong).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from ..errors import IngestError, KbError, WriteError

__all__ = ["Group", "awrite_groups", "write_groups"]

#: The ids a group writes, and the call that writes them (one transaction).
Group = tuple[Sequence[str], Callable[[], Any]]


class _Outcome:
    """What the groups of one call came to, recorded in their order."""

    def __init__(self, groups: Sequence[tuple[Sequence[str], Any]]) -> None:
        self.ids = [list(ids) for ids, _ in groups]
        self.saved: list[str] = []
        self.failed: dict[str, str] = {}
        self.first: KbError | None = None
        self.stopped = False

    def record(self, i: int, exc: KbError | None) -> None:
        """Group ``i`` saved (``exc`` None) or failed; a store failure stops the call, and
        the groups after it are not written."""
        if exc is None:
            self.saved += self.ids[i]
            return
        self.first = self.first or exc
        if isinstance(exc, WriteError):
            self.saved += exc.saved
            self.failed.update(exc.failed)
            return
        self.failed.update(dict.fromkeys(self.ids[i], " ".join(str(exc).split()) or
                                         type(exc).__name__))
        if not isinstance(exc, IngestError):
            self.stopped = True
            for ids in self.ids[i + 1:]:
                self.failed.update(dict.fromkeys(ids, f"not written: {type(exc).__name__}"))

    def result(self) -> None:
        if self.first is None:
            return
        if not self.saved:
            raise self.first
        raise WriteError(self.saved, self.failed) from self.first


def _attempt(write: Callable[[], Any]) -> KbError | None:
    try:
        write()
    except KbError as exc:
        return exc
    return None


async def _aattempt(write: Callable[[], Awaitable[Any]]) -> KbError | None:
    try:
        await write()
    except KbError as exc:
        return exc
    return None


def write_groups(groups: Sequence[Group]) -> None:
    """Run each group's write in order (module docstring)."""
    out = _Outcome(groups)
    for i in range(len(groups)):
        out.record(i, _attempt(groups[i][1]))
        if out.stopped:
            break
    out.result()


async def awrite_groups(groups: Sequence[tuple[Sequence[str],
                                               Callable[[], Awaitable[Any]]]]) -> None:
    """The async twin of :func:`write_groups`."""
    out = _Outcome(groups)
    for i in range(len(groups)):
        out.record(i, await _aattempt(groups[i][1]))
        if out.stopped:
            break
    out.result()
