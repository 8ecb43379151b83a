"""How busy the server that answers a search is, for ``KB_PARALLEL_LEGS=auto``.

Two legs at once pay on a server with an idle core and cost throughput and tail latency on a
busy one (decision 0015). A process sees only its own pool, not the other processes that
search the same server, so the server is asked, on the search's own connection, how many other
client backends are running a statement right now. Any other: busy, one statement per search
for :data:`BUSY_HOLD_S` (a sample is one instant: under load another client is often between two
statements when it is taken). After an idle sample the server is asked again within
:data:`IDLE_SAMPLE_S` (a round trip that costs little there, and load is seen within that
time), after a busy one within :data:`BUSY_SAMPLE_S`, just inside the hold (a round trip on a
busy server is a wait in its run queue: one per 4 s per process).

``pg_stat_activity`` shows the state of other roles' backends only to superusers and members
of ``pg_read_all_stats``; where it hides them the server looks idle, and the legs run at once
as with ``KB_PARALLEL_LEGS=true``.
"""

from __future__ import annotations

import threading
import time

__all__ = ["BUSY_HOLD_S", "BUSY_SAMPLE_S", "IDLE_SAMPLE_S", "OTHERS_ACTIVE", "ServerLoad"]

#: How often a process samples a server it found idle, and one it found busy (seconds).
IDLE_SAMPLE_S = 0.1
BUSY_SAMPLE_S = 4.0
#: How long a server stays busy after a sample found another backend at work (seconds).
BUSY_HOLD_S = 5.0

#: The other client backends running a statement now (this one, which asks, left out).
OTHERS_ACTIVE = (
    "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' "
    "AND backend_type = 'client backend' AND pid <> pg_backend_pid()"
)


class ServerLoad:
    """The last sample of one server's load, shared by the searches of a process."""

    def __init__(self, *, idle_sample_s: float = IDLE_SAMPLE_S,
                 busy_sample_s: float = BUSY_SAMPLE_S, hold_s: float = BUSY_HOLD_S) -> None:
        self.idle_sample_s, self.busy_sample_s, self.hold_s = idle_sample_s, busy_sample_s, hold_s
        self._next = 0.0  # when the next sample is due (time.monotonic)
        self._busy_until = 0.0  # busy until then: a sample found another backend at work
        self._lock = threading.Lock()

    @property
    def busy(self) -> bool:
        """Whether a sample within the last ``hold_s`` seconds found other backends at work."""
        return time.monotonic() < self._busy_until

    def due(self) -> bool:
        """Whether the caller should sample now: True for one caller per interval."""
        now = time.monotonic()
        if now < self._next:
            return False
        with self._lock:
            if now < self._next:
                return False
            self._next = now + (self.busy_sample_s if self.busy else self.idle_sample_s)
            return True  # the sample's own record() sets the next time by what it found

    def record(self, others_active: int) -> None:
        """Keep a sample: how many other backends were running a statement."""
        now = time.monotonic()
        if others_active > 0:
            self._busy_until = now + self.hold_s
        # an idle instant under a held load is checked again soon, as on an idle server
        self._next = now + (self.busy_sample_s if others_active > 0 else self.idle_sample_s)
