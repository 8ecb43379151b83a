"""The one retry policy for write transactions.

PostgreSQL may abort a transaction as a deadlock victim (40P01) or, under REPEATABLE READ, as
a serialization failure (40001). Neither changed anything, and both succeed when run again:
:func:`retried` runs the whole transaction again, a bounded number of times, after a short
jittered pause. Nothing else is retried (a constraint, a timeout or a lost connection is the
caller's to see).
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import psycopg

__all__ = ["ATTEMPTS", "aretried", "retried"]

logger = logging.getLogger(__name__)

T = TypeVar("T")

#: Runs of one transaction at most: a fourth deadlock in a row is a design fault to surface.
ATTEMPTS = 4
_RETRYABLE = (psycopg.errors.DeadlockDetected, psycopg.errors.SerializationFailure)


def _pause(exc: BaseException, attempt: int, attempts: int) -> float:
    """Seconds to wait before run ``attempt + 1``: jittered, doubling from 40 ms, at most 0.5 s."""
    pause = min(0.02 * 2 ** attempt, 0.5) * random.uniform(0.5, 1.5)
    logger.info("transaction aborted (%s), run %d of %d in %.0f ms", type(exc).__name__,
                attempt + 1, attempts, pause * 1000)
    return pause


def retried(transaction: Callable[[], T], *, attempts: int = ATTEMPTS) -> T:
    """``transaction()`` (which opens, runs and commits one whole transaction), run again when
    PostgreSQL aborted it as a deadlock victim or a serialization failure."""
    for attempt in range(1, attempts):
        try:
            return transaction()
        except _RETRYABLE as exc:
            time.sleep(_pause(exc, attempt, attempts))
    return transaction()


async def aretried(transaction: Callable[[], Awaitable[T]], *, attempts: int = ATTEMPTS) -> T:
    """The async twin of :func:`retried`."""
    for attempt in range(1, attempts):
        try:
            return await transaction()
        except _RETRYABLE as exc:
            await asyncio.sleep(_pause(exc, attempt, attempts))
    return await transaction()
