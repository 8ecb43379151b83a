"""Read replicas: which server answers a read (decision 0012).

Searches and reads go to a streaming replica, spread over several in turn; writes and schema
work go to the primary. A replica that cannot be reached is skipped for
``KB_REPLICA_RETRY_S`` seconds, one that lags more than ``KB_REPLICA_MAX_LAG_S`` behind is
skipped until it catches up, and with no replica left the primary answers. A read that must see
the caller's own writes (``consistent``) goes to a replica only once it has replayed the
primary's WAL up to the end of those writes.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import PoolTimeout

from ..errors import ConfigError, redact
from ..settings import Settings
from .connection import finish_idle, loop_ended, make_async_pool, make_pool

__all__ = ["WRITTEN", "Replica", "Replicas", "Target", "Written", "latest_lsn"]

logger = logging.getLogger(__name__)

# Lag, as the replica tells it: none while it streams from the primary and has replayed all
# it received (an idle primary sends nothing, and the last replayed transaction's time would
# only grow); else
# the age of its last replayed transaction. One that streams nothing (cut off from the primary:
# no WAL receiver, or one not streaming) is as old as that, and infinitely when it replayed none:
# equal positions then only say that nothing arrives. (Without pg_read_all_stats a receiver's
# status reads NULL: one that runs counts as streaming.)
_STATE = (
    "SELECT pg_is_in_recovery() AS standby, pg_last_wal_replay_lsn()::text AS replayed, "
    "CASE WHEN EXISTS (SELECT FROM pg_stat_wal_receiver "
    "                  WHERE coalesce(status, 'streaming') = 'streaming') "
    "AND pg_last_wal_receive_lsn() IS NOT DISTINCT FROM pg_last_wal_replay_lsn() THEN 0.0 "
    "ELSE coalesce(extract(epoch FROM now() - pg_last_xact_replay_timestamp())::float8, "
    "'Infinity') END AS lag")
_CAUGHT_UP = "SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn"
# How long a measured lag is trusted before it is read again.
_STATE_TTL_S = 1.0

PrimaryPosition = Callable[[], "str | None"]


def _lsn(text: str) -> int:
    high, _, low = text.partition("/")
    return (int(high, 16) << 32) | int(low or "0", 16)


def latest_lsn(a: str | None, b: str) -> str:
    """The later of two WAL positions (``pg_lsn`` text, ``16/B374D848``).

    >>> latest_lsn("0/10", "0/9"), latest_lsn(None, "1/0"), latest_lsn("1/0", "0/FFFFFFFF")
    ('0/10', '1/0', '1/0')
    """
    return b if a is None or _lsn(b) > _lsn(a) else a


class Written:
    """The primary's WAL position after this process's last write to it, by the primary's URL:
    every knowledge base of the process on one primary shares it, so a ``consistent`` read sees
    the process's own writes whichever knowledge base made them (a mark of each one's own missed
    the writes of another in the same process)."""

    def __init__(self) -> None:
        self._marks: dict[str, str] = {}
        self._lock = threading.Lock()

    def get(self, primary: str | None) -> str | None:
        return None if primary is None else self._marks.get(primary)

    def advance(self, primary: str, lsn: str) -> None:
        with self._lock:
            self._marks[primary] = latest_lsn(self._marks.get(primary), lsn)


WRITTEN = Written()


class PrimaryTrail:
    """When this process first saw the primary's WAL at each position (oldest first), for the
    replicas' lag as the primary tells it: how long the primary has held WAL that a replica
    has not replayed. A replica's receiver that still says "streaming" while its link has
    silently dropped reads as no lag to the replica itself until ``wal_receiver_timeout``
    (60 s by default); measured here, its lag grows from the first write it misses. The trail
    starts with the process's first look: a replica that stalled before is measured from then.
    """

    def __init__(self, keep_s: float, retry_s: float) -> None:
        self._seen: deque[tuple[float, int]] = deque()
        self._keep_s, self._retry_s = keep_s, retry_s
        self._next_read = -1e9
        self._lock = threading.Lock()
        # the last read found no primary: the next ones run beside the searches (each waited
        # up to the connect timeout, one search in ``retry_s``), one at a time
        self._down = self._reading = False

    def read(self, position: PrimaryPosition, now: float) -> None:
        """Note the primary's position (``position()``, None when it does not answer: not
        asked again for ``retry_s``), at most once a second; in a thread of its own while the
        primary is down."""
        with self._lock:
            if now < self._next_read or self._reading:
                return
            self._next_read = now + _STATE_TTL_S
            self._reading = self._down
        if self._reading:
            threading.Thread(target=self._note, args=(position, now), daemon=True,
                             name="kb-retriever-primary-position").start()
        else:
            self._note(position, now)

    def _note(self, position: PrimaryPosition, now: float) -> None:
        text = None
        try:
            text = position()
        finally:
            with self._lock:
                self._reading, self._down = False, text is None
                if text is None:
                    self._next_read = now + self._retry_s
                elif not self._seen or _lsn(text) > self._seen[-1][1]:
                    self._seen.append((now, _lsn(text)))
                # the newest position older than the bound stays: a replica short of it is past
                while len(self._seen) > 1 and self._seen[1][0] < now - self._keep_s:
                    self._seen.popleft()

    def behind(self, replayed: str | None, now: float) -> float:
        """Since when the primary has held WAL past ``replayed``, in seconds (0: none seen).

        >>> trail = PrimaryTrail(keep_s=30, retry_s=10)
        >>> trail.read(lambda: "0/10", now=100.0); trail.read(lambda: "0/20", now=105.0)
        >>> trail.behind("0/10", now=107.0), trail.behind("0/20", now=107.0), trail.behind("0/5", now=107.0)
        (2.0, 0.0, 7.0)
        """
        if replayed is None:
            return 0.0
        mark = _lsn(replayed)
        with self._lock:
            return next((now - at for at, lsn in self._seen if lsn > mark), 0.0)


@dataclass
class Replica:
    """One replica: its pools, and what is known of its health."""

    label: str
    url: str
    pool: Any
    apool: Any = None
    apool_loop: Any = None
    down_until: float = 0.0
    standby: bool = True  # in recovery at the last check (a promoted server is not)
    lag_s: float | None = None
    checked_at: float = field(default=-1e9)


class Target:
    """The server chosen for one read: its pool and its label; ``lag_s`` when a replica."""

    __slots__ = ("label", "lag_s", "pool", "replica")

    def __init__(self, pool: Any, label: str | None, replica: Replica | None = None) -> None:
        self.pool, self.label, self.replica = pool, label, replica
        self.lag_s = replica.lag_s if replica is not None else None


class Replicas:
    """The replicas of one knowledge base (see the module docstring)."""

    def __init__(self, urls: tuple[str, ...], settings: Settings) -> None:
        self.settings = settings
        for url in urls:  # a malformed one failed at every search, in the pool's log only
            try:
                conninfo_to_dict(url)
            except psycopg.ProgrammingError as exc:
                raise ConfigError("KB_REPLICA_URLS: a replica URL is not a connection "
                                  "string: " + redact(str(exc).splitlines()[0])) from None
        self._replicas = [Replica(f"replica {i + 1}", url, None) for i, url in enumerate(urls)]
        self.trail = PrimaryTrail(settings.replica_max_lag_s, settings.replica_retry_s)
        self._turn = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._replicas)

    def open(self, conn_kwargs: dict[str, Any]) -> None:
        """Open a pool per replica (a replica down now is skipped until it answers)."""
        for r in self._replicas:
            if r.pool is None:
                r.pool = make_pool(r.url, self.settings, vector_ready=True,
                                   conn_kwargs=conn_kwargs)
                r.pool.open(wait=False)

    async def apool(self, r: Replica, conn_kwargs: dict[str, Any]) -> Any | None:
        """``r``'s async pool for the running event loop, opened on first use with its
        connections made, as the primary's is; None, and ``r`` marked down, when it cannot
        make them within ``KB_REPLICA_CONNECT_TIMEOUT_S``.

        Opened without waiting, a pool still connects when a short event loop ends
        (``asyncio.run(kb.asearch(...))``); psycopg_pool takes the cancelled connect for a
        failed one and schedules it again, and ``asyncio.run`` never returns."""
        loop = asyncio.get_running_loop()
        if r.apool is None or r.apool_loop is not loop:
            self._claim(r, loop)
            pool = make_async_pool(r.url, self.settings, conn_kwargs)
            try:
                await pool.open(wait=True, timeout=self.settings.replica_connect_timeout_s)
            except psycopg.Error as exc:  # PoolTimeout is a psycopg.Error too
                await pool.close()
                logger.debug("%s: %s", r.label, exc)
                self.mark_down(r)
                return None
            if r.apool is not None and r.apool_loop is loop:  # another task opened one first
                await pool.close()
            else:
                r.apool, r.apool_loop = pool, loop
        return r.apool

    def _claim(self, r: Replica, loop: asyncio.AbstractEventLoop) -> None:
        """Let ``loop`` open ``r``'s async pool: refused while another running loop owns one
        (as the primary's is); the pool of a loop that has ended is let go, its sockets
        closed (its tasks ended with the loop)."""
        with self._lock:
            if r.apool is not None and loop_ended(r.apool_loop, loop):
                finish_idle(r.apool)
                r.apool = r.apool_loop = None

    def check_schema(self, choices: Any, conn_kwargs: dict[str, Any]) -> tuple[bool, Any]:
        """With the primary unreachable: the first replica that answers must hold this
        version of the schema and know the embedder's model; (whether the database is
        distributed, the embedder's space)."""
        from . import distribution, schema

        errors = []
        for r in self._replicas:
            try:
                with psycopg.connect(r.url, autocommit=True, connect_timeout=10,
                                     **conn_kwargs) as conn:
                    space = schema.check_current(conn, choices)
                    return distribution.is_citus(conn), space
            except psycopg.OperationalError as exc:
                errors.append(f"{r.label}: {str(exc).strip().splitlines()[0]}")
        raise psycopg.OperationalError("neither the primary nor a replica answers ("
                                       + "; ".join(errors) + ")")

    def close(self) -> None:
        for r in self._replicas:
            if r.pool is not None:
                r.pool.close()
                r.pool = None
            if r.apool is not None:  # its loop may be gone: close its idle sockets
                finish_idle(r.apool)
                r.apool = r.apool_loop = None

    async def aclose(self) -> None:
        for r in self._replicas:
            if r.apool is not None and r.apool_loop is asyncio.get_running_loop():
                await r.apool.close()
                r.apool = r.apool_loop = None

    def mark_down(self, replica: Replica) -> None:
        replica.down_until = time.monotonic() + self.settings.replica_retry_s
        logger.warning("%s (%s) is unreachable: skipped for %.0f s", replica.label,
                       _where(replica.url), self.settings.replica_retry_s)

    def pick(self, wrote_lsn: str | None,
             primary: PrimaryPosition | None = None) -> Replica | None:
        """The next healthy replica in turn (reachable, within the lag bound, and past
        ``wrote_lsn`` when given), or None. ``primary`` reads the primary's WAL position, for
        the lag as the primary tells it (:class:`PrimaryTrail`)."""
        with self._lock:
            order = self._replicas[self._turn:] + self._replicas[:self._turn]
            self._turn = (self._turn + 1) % max(len(self._replicas), 1)
        now = time.monotonic()
        for r in order:
            if (r.down_until <= now and r.pool is not None
                    and self._fresh(r, now, wrote_lsn, primary)):
                return r
        return None

    def _fresh(self, r: Replica, now: float, wrote_lsn: str | None,
               primary: PrimaryPosition | None) -> bool:
        """Whether ``r`` may answer now. Its state is read again once a second, and its
        position checked against ``wrote_lsn`` when given; when neither is due, no connection
        is taken. With every connection of its pool in use, it answers, just not now."""
        due = now - r.checked_at > _STATE_TTL_S
        if not due and wrote_lsn is None:
            return self._healthy(r)
        try:
            with r.pool.connection(timeout=self.settings.replica_connect_timeout_s) as conn:
                if due:
                    if primary is not None:  # first: a replica past it has all it had then
                        self.trail.read(primary, now)
                    row = conn.execute(_STATE).fetchone()
                    r.checked_at = now
                    r.standby = bool(row and row[0])
                    r.lag_s = None if row is None or row[2] is None else round(
                        max(float(row[2]), self.trail.behind(row[1], now)), 3)
                    if not r.standby:  # promoted: its data went its own way from the primary's
                        logger.warning("%s is not a standby (promoted?): skipped", r.label)
                if not self._healthy(r):
                    return False
                if wrote_lsn is not None:
                    row = conn.execute(_CAUGHT_UP, [wrote_lsn]).fetchone()
                    return bool(row and row[0])
                return True
        except PoolTimeout:  # busy, not down: this read goes elsewhere
            return False
        except (psycopg.Error, OSError) as exc:
            logger.debug("%s: %s", r.label, exc)
            self.mark_down(r)
            return False

    def _healthy(self, r: Replica) -> bool:
        """In recovery and within the lag bound at its last check."""
        return (r.standby and r.lag_s is not None
                and r.lag_s <= self.settings.replica_max_lag_s)


def _where(url: str) -> str:
    """A replica's server as a log line names it, ``host:port/dbname``: never its URL, which
    may hold a password (in its user part, a ``password`` parameter or a key=value pair)."""
    params = conninfo_to_dict(url)  # (checked when the replicas were configured)
    return f"{params.get('host', '')}:{params.get('port', '')}/{params.get('dbname', '')}"
