"""store.load.ServerLoad: one sample per interval, busy held for a while after a busy sample."""

from __future__ import annotations

import threading

from kb_retriever.store import load
from kb_retriever.store.load import ServerLoad


def test_one_caller_per_interval_samples_often_while_idle_and_less_while_busy(monkeypatch):
    now = [100.0]
    monkeypatch.setattr(load.time, "monotonic", lambda: now[0])
    state = ServerLoad(idle_sample_s=0.1, busy_sample_s=1.0, hold_s=5.0)
    assert state.due() and not state.due()  # the first caller samples, the next does not
    state.record(0)
    now[0] += 0.05
    assert not state.due()
    now[0] += 0.06
    assert state.due()  # idle: sampled again after 0.1 s
    state.record(2)
    now[0] += 0.5
    assert not state.due()  # busy: next after 1 s
    now[0] += 0.6
    assert state.due()
    state.record(0)  # an idle instant under the held load: busy still, asked again soon
    assert state.busy
    now[0] += 0.11
    assert state.due()


def test_busy_is_held_after_a_busy_sample_and_idle_needs_none(monkeypatch):
    now = [100.0]
    monkeypatch.setattr(load.time, "monotonic", lambda: now[0])
    state = ServerLoad(hold_s=5.0)
    assert not state.busy  # never sampled: idle
    state.record(0)
    assert not state.busy
    state.record(3)
    assert state.busy
    now[0] += 4.9
    state.record(0)  # an idle instant does not end the hold
    assert state.busy
    now[0] += 0.2
    assert not state.busy


def test_concurrent_callers_sample_once():
    state = ServerLoad(idle_sample_s=60.0)
    answers: list[bool] = []
    lock = threading.Lock()

    def ask() -> None:
        due = state.due()
        with lock:
            answers.append(due)

    threads = [threading.Thread(target=ask) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(5)
    assert answers.count(True) == 1 and len(answers) == 16
