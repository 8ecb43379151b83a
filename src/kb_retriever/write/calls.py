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
    def __init__(self) -> None:
        self.saved: list[str] = []
        self.failed: dict[str, str] = {}
        self.first: KbError | None = None

    def done(self, ids: Sequence[str]) -> None:
        self.saved += ids

    def refused(self, ids: Sequence[str], exc: KbError) -> bool:
        """Record ``exc`` for ``ids``; whether the call goes on with the next group."""
        self.first = self.first or exc
        if isinstance(exc, WriteError):
            self.saved += exc.saved
            self.failed.update(exc.failed)
            return True
        self.failed.update(dict.fromkeys(ids, " ".join(str(exc).split()) or type(exc).__name__))
        return isinstance(exc, IngestError)

    def stopped(self, groups: Sequence[Sequence[str]], exc: KbError) -> None:
        for ids in groups:
            self.failed.update(dict.fromkeys(ids, f"not written: {type(exc).__name__}"))

    def result(self) -> None:
        if self.first is None:
            return
        if not self.saved:
            raise self.first
        raise WriteError(self.saved, self.failed) from self.first


def write_groups(groups: Sequence[Group]) -> None:
    """Run each group's write in order (module docstring)."""
    out = _Outcome()
    for i, (ids, write) in enumerate(groups):
        try:
            write()
        except KbError as exc:
            if not out.refused(ids, exc):
                out.stopped([g[0] for g in groups[i + 1:]], exc)
                break
        else:
            out.done(ids)
    out.result()


async def awrite_groups(groups: Sequence[tuple[Sequence[str],
                                               Callable[[], Awaitable[Any]]]]) -> None:
    """The async twin of :func:`write_groups`."""
    out = _Outcome()
    for i, (ids, write) in enumerate(groups):
        try:
            await write()
        except KbError as exc:
            if not out.refused(ids, exc):
                out.stopped([g[0] for g in groups[i + 1:]], exc)
                break
        else:
            out.done(ids)
    out.result()
