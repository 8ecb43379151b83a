"""The answers of a knowledge base's cacheable reads (synonyms, lexeme statistics, calibration,
rejected approaches, supersessions): each kept for its TTL, all dropped at a write of this
process (:meth:`ReadCache.clear`), and kept apart by whether the server that answered had this
process's writes (:class:`CacheView`)."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

from .reads import Fetch

__all__ = ["CacheView", "ReadCache"]


class ReadCache:
    """Answers of cacheable reads, each for its TTL. At most ``max_entries`` keys (the oldest
    goes first: thousands of distinct project lists must not grow the process), and an answer
    of more than ``max_rows`` rows is not kept."""

    def __init__(self, *, max_entries: int = 256, max_rows: int = 20_000) -> None:
        self.max_entries, self.max_rows = max_entries, max_rows
        self._entries: dict[Any, tuple[float, Any, bool]] = {}  # (expiry, answer, trusted)
        self._lock = threading.Lock()
        self.generation = 0  # one more at each clear: a read sent before it is not kept

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, req: Fetch, *, trusted: bool = False) -> Any:
        """The cached answer to ``req``, or None; ``trusted``: only an answer read where this
        process's writes are seen (see :class:`CacheView`)."""
        if req.cache_key is None or req.cache_ttl <= 0:
            return None
        hit = self._entries.get(req.cache_key)
        return hit[1] if hit and hit[0] > time.monotonic() and (hit[2] or not trusted) else None

    def answer(self, req: Fetch, rows: list[dict[str, Any]], since: int, *,
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
                self._entries[req.cache_key] = (time.monotonic() + req.cache_ttl, answer, trusted)
                while len(self._entries) > self.max_entries:
                    del self._entries[next(iter(self._entries))]
        return answer

    def clear(self) -> None:
        with self._lock:
            self.generation += 1
            self._entries.clear()

    def view(self, trusted: bool) -> CacheView:
        return CacheView(self, trusted)


@dataclass(frozen=True)
class CacheView:
    """The cache as one search uses it. ``trusted`` when its server has this process's writes
    (the primary, or the replica a ``consistent`` search chose): it reads only answers read
    so. A search on a replica that may lag reads any answer, and keeps its own as not
    trusted: after a write cleared the cache, a lagging replica's answers (synonyms,
    statistics, calibration, rejected approaches) would otherwise serve the process's
    ``consistent`` searches for their TTL."""

    cache: ReadCache
    trusted: bool

    @property
    def generation(self) -> int:
        return self.cache.generation

    def get(self, req: Fetch) -> Any:
        return self.cache.get(req, trusted=self.trusted)

    def answer(self, req: Fetch, rows: list[dict[str, Any]], since: int) -> Any:
        return self.cache.answer(req, rows, since, trusted=self.trusted)
