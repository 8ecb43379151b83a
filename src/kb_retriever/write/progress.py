"""Progress of long CLI work (ingest, bench): a tqdm bar on a terminal, plain lines elsewhere.

A pipe or CI log gets one line at the start, one every ``interval_s`` seconds and one at the
end, so a 300-file ingest is never silent for minutes.
"""

from __future__ import annotations

import sys
import time
from typing import Any, TextIO

__all__ = ["Progress"]


class Progress:
    """A ``(done, total, name)`` callback, as ``KnowledgeBase.ingest(progress=...)`` takes."""

    def __init__(self, label: str, *, stream: TextIO | None = None, interval_s: float = 10.0,
                 unit: str = "file") -> None:
        self.label, self.unit, self.interval_s = label, unit, interval_s
        self.stream = stream if stream is not None else sys.stderr
        self._bar: Any = None
        self._last = 0.0

    def __call__(self, done: int, total: int, name: str) -> None:
        if self.stream.isatty():
            self._tty(done, total, name)
            return
        now = time.monotonic()
        if done == 0 or done >= total or now - self._last >= self.interval_s:
            self._last = now
            pct = 100 * done // total if total else 100
            print(f"{self.label}: {done}/{total} {self.unit}s ({pct}%)", file=self.stream,
                  flush=True)

    def _tty(self, done: int, total: int, name: str) -> None:
        if self._bar is None:
            from tqdm import tqdm

            self._bar = tqdm(total=total, desc=self.label, unit=self.unit, file=self.stream,
                             dynamic_ncols=True, leave=True)
        self._bar.n = done
        self._bar.set_postfix_str(name[-40:], refresh=False)
        self._bar.refresh()
        if done >= total:
            self._bar.close()
            self._bar = None
