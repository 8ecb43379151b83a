"""Cancellation, interruption, closing and forking: a knowledge base stays whole and says what
happened (found by an exploratory review: each test fails on the code before its fix)."""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import psycopg
import pytest

from kb_retriever import HashingEmbedder, KnowledgeBase, StoreError

from ._util import pool_timeouts, sessions

pytestmark = pytest.mark.db

MakeKb = Callable[..., KnowledgeBase]
TEXT = "Redis is the shared cache layer; the eviction policy is least recently used."


def _stored(kb: KnowledgeBase) -> int:
    with psycopg.connect(kb.url, autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM kb_documents").fetchone()
    return int(row[0]) if row else 0


def test_a_closed_base_serves_no_async_call_and_leaks_no_session(make_kb: MakeKb) -> None:
    """After close(), asearch answered and adelete deleted (a new async pool opened, and its
    sessions stayed until the process exited)."""
    kb = make_kb()
    kb.add_documents([{"text": TEXT, "id": "d1"}])
    asyncio.run(kb.asearch("cache layer"))
    kb.close()
    with pytest.raises(StoreError, match="not open"):
        asyncio.run(kb.asearch("cache layer"))
    with pytest.raises(StoreError, match="not open"):
        asyncio.run(kb.adelete(["d1"]))
    assert _stored(kb) == 1 and sessions(kb.url) == 0


def test_aclose_on_another_event_loop_closes_everything(make_kb: MakeKb) -> None:
    """``asyncio.run(kb.asearch(...))`` then ``asyncio.run(kb.aclose())`` raised a raw
    "Event loop is closed" and left the base open with its sessions."""
    kb = make_kb()
    kb.add_documents([{"text": TEXT, "id": "d1"}])
    assert asyncio.run(kb.asearch("cache layer")).primary
    asyncio.run(kb.aclose())
    assert not kb.is_open and sessions(kb.url) == 0


class SlowEmbedder(HashingEmbedder):
    """Each call takes 30 ms: a 40-document write takes over a second."""

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        time.sleep(0.03)
        return super().embed_documents(texts)


def test_nothing_is_written_after_aclose_returns(make_kb: MakeKb) -> None:
    """A cancelled ``aadd_documents`` runs to its end in its thread (a thread cannot be
    stopped); ``aclose()`` returned at once, and the write went on after it: 18 documents
    when it returned, 60 later."""
    kb = make_kb(embedder=SlowEmbedder(64))

    async def cancelled_then_closed() -> int:
        docs = [{"text": f"{TEXT} ({i})", "id": f"d{i}"} for i in range(40)]
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(kb.aadd_documents(docs), timeout=0.2)
        await kb.aclose()
        return _stored(kb)

    at_close = asyncio.run(cancelled_then_closed())
    time.sleep(0.5)
    assert at_close == _stored(kb) == 40  # the write ran whole, before aclose returned


def test_a_cancelled_write_puts_back_the_search_timeout(make_kb: MakeKb) -> None:
    """The write's statement timeout (10 minutes) was set before the ``try`` that puts the
    search's back: a write cancelled there left its connection with it, and searches ran
    on it without their bound."""
    kb = make_kb()
    kb.add_documents([{"text": TEXT, "id": "d0"}])

    async def run() -> tuple[list[str], list[str]]:
        await kb.asearch("cache layer")
        fresh = await pool_timeouts(kb)
        for delay in [0, 0.0005, 0.001, 0.002, 0.003, 0.005] * 6:
            task = asyncio.create_task(kb.adelete(["nothing"]))
            await asyncio.sleep(delay)
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):  # unless it had ended
                await task
        after = await pool_timeouts(kb)
        await kb.aclose()
        return fresh, after

    fresh, after = asyncio.run(run())
    assert set(after) == set(fresh) == {"10s"}, after


def test_ctrl_c_during_a_write_is_a_keyboard_interrupt(make_kb: MakeKb) -> None:
    """Ctrl-C during ``add_documents`` came back as ``UnavailableError`` ("another command is
    already in progress": the write's clean-up sent a statement on the interrupted
    connection), and the interrupt was lost (12 of 80 interrupts at random moments). Here the
    interrupt comes while a statement is half-way, deterministically."""
    kb = make_kb()
    with pytest.raises(KeyboardInterrupt):
        with kb._pools.writing() as session:
            session.conn.pgconn.send_query(b"SELECT pg_sleep(0.2)")  # sent, not yet read
            raise KeyboardInterrupt
    kb.add_documents([{"text": TEXT, "id": "after"}])  # the pool discarded that connection
    assert kb.search("cache layer", limit=3).primary


def test_an_interrupt_that_a_driver_error_masks_is_raised_again() -> None:
    """psycopg's clean-up of an interrupted ``executemany`` (pipeline mode) fails in turn,
    "cannot exit pipeline mode while busy"; translated, it read as a lost server."""
    from kb_retriever.store.connection import translated

    with pytest.raises(KeyboardInterrupt):
        with translated():
            try:
                raise KeyboardInterrupt
            except KeyboardInterrupt:
                raise psycopg.OperationalError("cannot exit pipeline mode while busy") from None


def _child(kb: KnowledgeBase, out: Any) -> None:
    try:
        hits = [kb.search("cache layer", limit=2).primary[0].document.source_path for _ in range(10)]
        kb.add_documents([{"text": f"{TEXT} from the child", "id": "child"}])
        out.put(("ok", hits[0]))
    except BaseException as exc:  # reported to the parent
        out.put(("failed", f"{type(exc).__name__}: {exc}"))


def _forked(kb: Any, target: Any) -> tuple[Any, Any]:
    """A child forked after ``kb`` wrote and searched, running ``target(kb, queue)``."""
    kb.add_documents([{"text": TEXT, "id": "d1"}])
    assert kb.search("cache layer").primary
    context = multiprocessing.get_context("fork")
    out = context.Queue()
    child = context.Process(target=target, args=(kb, out))
    child.start()
    return child, out


@pytest.mark.parametrize("legs", ["true", "false"])
def test_a_forked_child_gets_its_own_connections(make_kb: MakeKb, legs: str) -> None:
    """After ``fork`` the child hung on the legs' threads (which it has not), or used the
    parent's sockets: "prepared statement already exists", "lost synchronization", and the
    parent's next searches failed too."""
    from kb_retriever import Settings

    kb = make_kb(settings=Settings(parallel_legs=legs))
    child, out = _forked(kb, _child)
    for _ in range(20):  # the parent searches while the child does
        assert kb.search("cache layer", limit=2).primary
    child.join(60)
    assert child.exitcode == 0 and out.get(timeout=5) == ("ok", "d1")
    for _ in range(20):
        assert kb.search("cache layer", limit=2).primary
    assert [d.id for d in kb.get_by_ids(["child"])] == ["child"]


def _child_whose_restart_fails_once(kb: Any, out: Any) -> None:
    from kb_retriever import StoreError

    calls: list[int] = []

    def restart() -> None:  # the embedded server's start in the child, failing the first time
        calls.append(1)
        if len(calls) == 1:
            raise StoreError("could not start the embedded PostgreSQL")

    kb._pools.restart = restart
    try:
        try:
            kb.search("cache layer")
            out.put(("no error", len(calls)))
            return
        except StoreError:
            pass
        hits = [kb.search("cache layer", limit=2).primary[0].document.source_path
                for _ in range(10)]
        out.put(("ok", len(calls), hits[0]))
    except BaseException as exc:  # reported to the parent
        out.put(("failed", f"{type(exc).__name__}: {exc}"))


def test_a_forked_child_whose_first_start_fails_tries_again_on_its_own_connections(
        make_kb: MakeKb) -> None:
    """The child marked itself set up before the start: when that failed, every later call
    went on with the parent's pool and threads (its sockets, threads it has not)."""
    kb = make_kb()
    child, out = _forked(kb, _child_whose_restart_fails_once)
    child.join(60)
    assert child.exitcode == 0 and out.get(timeout=5) == ("ok", 2, "d1")
    for _ in range(20):
        assert kb.search("cache layer", limit=2).primary


def test_a_cancelled_first_search_does_not_throw_the_opening_pool_away(
        make_kb: MakeKb) -> None:
    """Each cancelled first ``asearch`` threw its half-open async pool away ("Task was
    destroyed but it is pending!"): with a 20 ms bound, none of 50 searches ever ran. The pool
    opens once now, whoever waits for it."""
    kb = make_kb()
    kb.add_documents([{"text": TEXT, "id": "d1"}])

    async def bounded() -> Counter[str]:
        done: Counter[str] = Counter()
        for _ in range(50):
            try:
                await asyncio.wait_for(kb.asearch("cache layer"), timeout=0.02)
                done["ok"] += 1
            except TimeoutError:
                done["timed out"] += 1
        await kb.aclose()
        return done

    done = asyncio.run(bounded())
    assert done["ok"] >= 10, done


def test_an_async_write_after_the_server_dropped_the_pools_connections(make_kb: MakeKb) -> None:
    """A write is not retried, so the sync twins check the pool's idle connections first; the
    async ones did not, and after the server had dropped them (a restart, a pooler's, an
    ``idle_session_timeout``) an ``adelete`` failed with UnavailableError."""
    kb = make_kb()
    kb.add_documents([{"text": f"{TEXT} ({i})", "id": f"d{i}"} for i in range(3)])

    async def drop_then_delete() -> int:
        try:
            assert (await kb.asearch("cache layer")).primary  # the loop's pool is open, idle
            with psycopg.connect(kb.url, autocommit=True) as conn:
                conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE "
                             "datname = current_database() AND pid <> pg_backend_pid()")
            return await kb.adelete(["d0"])
        finally:
            await kb.aclose()

    assert asyncio.run(drop_then_delete()) == 1
