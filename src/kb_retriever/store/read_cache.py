"""The answers of a knowledge base's cacheable reads (synonyms, lexeme statistics, calibration,
rejected approaches, supersessions): each kept for its TTL, all dropped at a write of this
process to their database, whichever knowledge base of the process made it
(:meth:`ReadCache.clear`, :data:`WRITES`), and kept apart by whether the server that answered
had this process's writes (:class:`CacheView`)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .reads import Fetch

__all__ = ["WRITES", "CacheView", "Generation", "ReadCache"]

#: A cache's clears and its database's writes by the process, counted: an answer read under
#: one generation is neither kept nor served under another.
Generation = tuple[int, int]


class _Writes:
    """How many writes this process made to each database, by its URL. Each knowledge base has
    its own cache; they all count their database's writes here, so one's write drops what the
    others of the process cached from that database (their synonyms, statistics, calibration)."""

    def __init__(self) -> None:
        self._counts: dict[str, int] = {}
        self._lock = threading.Lock()

    def of(self, url: str | None) -> int:
        return 0 if url is None else self._counts.get(url, 0)

    def count(self, url: str) -> None:
        with self._lock:
            self._counts[url] = self._counts.get(url, 0) + 1


WRITES = _Writes()


class ReadCache:
    """Answers of cacheable reads, each for its TTL. At most ``max_entries`` keys (the oldest
    goes first: thousands of distinct project lists must not grow the process), and an answer
    of more than ``max_rows`` rows is not kept."""

    def __init__(self, *, url: Callable[[], str | None] = lambda: None, max_entries: int = 256,
                 max_rows: int = 20_000) -> None:
        self.max_entries, self.max_rows = max_entries, max_rows
        self._url = url  # the database's, once open (the key of its writes' count)
        # (expiry, answer, trusted, the generation it was read under)
        self._entries: dict[Any, tuple[float, Any, bool, Generation]] = {}
        self._lock = threading.Lock()
        self._cleared = 0

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def generation(self) -> Generation:
        """One more at each clear and at each write by the process to the database: a read sent
        before is not kept, and an answer kept before is not served."""
        return self._cleared, WRITES.of(self._url())

    def get(self, req: Fetch, *, trusted: bool = False) -> Any:
        """The cached answer to ``req``, or None; ``trusted``: only an answer read where this
        process's writes are seen (see :class:`CacheView`)."""
        if req.cache_key is None or req.cache_ttl <= 0:
            return None
        hit = self._entries.get(req.cache_key)
        fresh = hit is not None and hit[0] > time.monotonic() and hit[3] == self.generation
        return hit[1] if hit is not None and fresh and (hit[2] or not trusted) else None

    def answer(self, req: Fetch, rows: list[dict[str, Any]], since: Generation, *,
               trusted: bool = True) -> Any:
        """``req``'s answer (``req.parse(rows)`` when set), kept when ``req`` is cacheable and
        no :meth:`clear` came since it was sent (``since``: the :attr:`generation` then): a
        read that began before a write committed must not outlive the write's clear."""
        answer = req.parse(rows) if req.parse is not None else rows
        if req.cache_key is not None and req.cache_ttl > 0 and len(rows) <= self.max_rows:
            with self._lock:
                if since != self.generation:
                    return answer
                self._entries.pop(req.cache_key, None)
                self._entries[req.cache_key] = (time.monotonic() + req.cache_ttl, answer, trusted,
                                                since)
                while len(self._entries) > self.max_entries:
                    del self._entries[next(iter(self._entries))]
        return answer

    def clear(self) -> None:
        """Drop every answer, after a write (then every cache of the process on the database
        drops its own: :data:`WRITES`)."""
        with self._lock:
            self._cleared += 1
            self._entries.clear()
        if (url := self._url()) is not None:
            WRITES.count(url)

    def view(self, trusted: bool, since: Generation | None = None) -> CacheView:
        """The cache as one search uses it, from ``since`` (else now): when it chose its
        server."""
        return CacheView(self, trusted, self.generation if since is None else since)


@dataclass(frozen=True)
class CacheView:
    """The cache as one search uses it. ``trusted`` when its server has this process's writes
    (the primary, or the replica a ``consistent`` search chose): it reads only answers read
    so. A search on a replica that may lag reads any answer, and keeps its own as not
    trusted: after a write cleared the cache, a lagging replica's answers (synonyms,
    statistics, calibration, rejected approaches) would otherwise serve the process's
    ``consistent`` searches for their TTL. Its answers are kept only when no write came since
    the view began (``since``): the search chose its server then, and embedded its question
    before it read; a replica chosen before a write may not have it."""

    cache: ReadCache
    trusted: bool
    since: Generation

    @property
    def generation(self) -> Generation:
        return self.since

    def get(self, req: Fetch) -> Any:
        return self.cache.get(req, trusted=self.trusted)

    def answer(self, req: Fetch, rows: list[dict[str, Any]], since: Generation) -> Any:
        return self.cache.answer(req, rows, since, trusted=self.trusted)
