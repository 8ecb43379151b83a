"""The primary's WAL position for the replicas' lag, read beside the searches while the
primary is down (a search waited up to the connect timeout for it, one in ``retry_s``)."""

from __future__ import annotations

import threading

from kb_retriever.store.replicas import PrimaryTrail


def test_a_read_while_the_primary_is_down_does_not_hold_the_search() -> None:
    trail = PrimaryTrail(keep_s=30, retry_s=10)
    trail.read(lambda: None, now=100.0)  # the primary does not answer
    answer, asked = threading.Event(), threading.Event()

    def slow_position() -> str | None:  # a connect that hangs until the test lets it go
        asked.set()
        answer.wait(30)
        return "0/40"

    trail.read(slow_position, now=111.0)  # returns at once: the read runs in a thread
    assert asked.wait(30) and not answer.is_set()
    trail.read(lambda: "0/99", now=112.5)  # one at a time: ignored while that one hangs
    answer.set()
    for thread in threading.enumerate():
        if thread.name == "kb-retriever-primary-position":
            thread.join(30)
    assert trail.behind("0/30", now=115.0) == 4.0  # the position the thread read, at 111
    trail.read(lambda: "0/50", now=116.0)  # the primary is back: read in line again
    assert trail.behind("0/45", now=117.0) == 1.0
