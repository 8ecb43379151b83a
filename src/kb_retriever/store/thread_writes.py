"""The writes of async twins, run in worker threads, and the wait for them.

``aadd_documents`` and its kin embed (CPU work) and write in a worker thread, so the event
loop stays free. A thread cannot be cancelled: a caller cancelled meanwhile (``wait_for``, a
task's ``cancel()``) leaves its write running to its commit or rollback. Closing therefore
waits for them: before, 255 of 258 cancelled adds were saved, some after ``aclose()`` had
returned.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["ThreadWrites"]


class ThreadWrites:
    """Counts the writes :meth:`run` started until each has ended."""

    def __init__(self) -> None:
        self._ended = threading.Condition()
        self._running = 0

    async def run(self, write: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        """``write(*args, **kwargs)`` in a worker thread, counted while it runs."""
        def counted() -> Any:
            with self._ended:
                self._running += 1
            try:
                return write(*args, **kwargs)
            finally:
                with self._ended:
                    self._running -= 1
                    self._ended.notify_all()

        return await asyncio.to_thread(counted)

    def wait(self) -> None:
        """Until every write :meth:`run` started has ended (each is bounded by its statement
        timeout, ``KB_INGEST_STATEMENT_TIMEOUT_MS``)."""
        with self._ended:
            self._ended.wait_for(lambda: self._running == 0)
