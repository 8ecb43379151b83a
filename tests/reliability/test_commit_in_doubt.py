"""A write whose connection is lost after its COMMIT reached the server is reported saved (issue
23: a committed write must never be reported as failed)."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterator

import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from kb_retriever import HashingEmbedder, KnowledgeBase, Settings, UnavailableError, WriteError

pytestmark = pytest.mark.db


class _CommitCutter:
    """A TCP front for the server that cuts the connection which sent a document's COMMIT (the
    first COMMIT after a ``COPY kb_chunks``) once the server had time to commit it, before the
    reply comes back; new connections pass."""

    def __init__(self, target: dict[str, str]) -> None:
        host, port = target.get("host", "localhost"), int(target.get("port") or 5432)
        self.family = socket.AF_UNIX if host.startswith("/") else socket.AF_INET
        self.address = f"{host}/.s.PGSQL.{port}" if host.startswith("/") else (host, port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.armed = False
        self.cuts = 0
        self.muted: set[int] = set()  # the pairs whose replies are no longer passed on
        self.lose_commit = False  # cut before the COMMIT reaches the server: nothing commits
        self.cut_all = False  # every connection cut with it, as a server restart cuts them
        self.after = b"COPY kb_chunks"  # the statement whose transaction's COMMIT is cut
        self.cut_at = b"COMMIT"  # (or the first statement of this after it)
        self.pairs: list[tuple[socket.socket, ...]] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.socket(self.family, socket.SOCK_STREAM)
            upstream.connect(self.address)
            pair = (client, upstream)
            self.pairs.append(pair)
            threading.Thread(target=self._pipe, args=(client, upstream, pair, True),
                             daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client, pair, False),
                             daemon=True).start()

    def _pipe(self, a: socket.socket, b: socket.socket, pair: tuple[socket.socket, ...],
              outbound: bool) -> None:
        copying = False
        try:
            while data := a.recv(65536):
                if not outbound and id(pair) in self.muted:
                    return  # the reply to the COMMIT: lost
                cut = False
                if outbound and self.armed:
                    copying = copying or self.after in data
                    cut = copying and self.cut_at in data
                if cut:
                    self.armed = False
                    self.muted.add(id(pair))
                if not (cut and self.lose_commit):
                    b.sendall(data)
                if cut:
                    time.sleep(0.5)  # the server commits; its reply is not passed on
                    self.cuts += 1
                    for cut_pair in list(self.pairs) if self.cut_all else [pair]:
                        for s in cut_pair:
                            try:
                                s.shutdown(socket.SHUT_RDWR)
                            except OSError:
                                pass  # closed before
                    return
        except OSError:
            pass

    def close(self) -> None:
        self.listener.close()


@contextlib.contextmanager
def _behind_a_cutter(url: str, pool: tuple[int, int] = (1, 2), timeout_s: float = 10.0,
                     ) -> Iterator[tuple[KnowledgeBase, _CommitCutter]]:
    """A knowledge base (``pool``: its pool's min and max size, and how long a caller waits
    for one of its connections) whose connections go through a :class:`_CommitCutter` in front
    of ``url``; both closed after."""
    proxy = _CommitCutter(conninfo_to_dict(url))
    via = make_conninfo(url, host="127.0.0.1", port=str(proxy.port))
    kb = KnowledgeBase(Settings(pool_min_size=pool[0], pool_max_size=pool[1],
                                pool_timeout_s=timeout_s),
                       embedder=HashingEmbedder(64), database_url=via).open()
    try:
        yield kb, proxy
    finally:
        kb.close()
        proxy.close()


def test_a_write_committed_before_its_connection_died_is_reported_saved(
        new_database: Callable[[], str]) -> None:
    with _behind_a_cutter(new_database()) as (kb, proxy):
        kb.add_documents([{"text": "# First\n\nsaved before", "id": "first"}])
        proxy.armed = True
        ids = kb.add_documents([{"text": "# Second\n\nits reply was lost", "id": "second"}])
        assert proxy.cuts == 1 and ids == ["second"]
        assert [d.id for d in kb.get_by_ids(["first", "second"])] == ["first", "second"]
        proxy.armed = True  # lost at the first's commit: it is saved, the others are not tried
        with pytest.raises(WriteError) as err:
            kb.add_documents([{"text": "# Third\n\none", "id": "third"},
                              {"text": "# Fourth\n\ntwo", "id": "fourth"},
                              {"text": "# Fifth\n\nnever tried", "id": "fifth"}])
        assert err.value.saved == ["third"] and set(err.value.failed) == {"fourth", "fifth"}


def test_chunks_committed_before_their_connection_died_are_reported_saved(
        new_database: Callable[[], str]) -> None:
    """``upsert_chunks`` (every LlamaIndex ``add`` and LangChain canonical split) had no such
    check: a commit whose reply was lost came back as UnavailableError, and the framework
    stores reported the saved group failed and every later one not written."""
    chunks = [{"text": "Redis is the cache.", "id": "c1", "metadata": {"page": 1}},
              {"text": "Eviction is LRU.", "id": "c2", "metadata": {"page": 2, "at": None}}]
    with _behind_a_cutter(new_database()) as (kb, proxy):
        proxy.armed = True
        assert kb.upsert_chunks("dec-cache", chunks, metadata={"type": "decision"}) == ["c1", "c2"]
        assert proxy.cuts == 1
        assert [c.id for c in kb.get_chunks(["c1", "c2"])] == ["c1", "c2"]
        proxy.armed = proxy.lose_commit = True  # not committed: reported failed, nothing saved
        with pytest.raises(UnavailableError):
            kb.upsert_chunks("dec-cache", [{**chunks[0], "text": "Memcached is the cache."}])
        assert [c.text for c in kb.get_chunks(["c1"])] == ["Redis is the cache."]


@pytest.mark.parametrize("call", ["add_documents", "upsert_chunks"])
def test_a_commit_in_doubt_is_checked_on_a_live_connection(
        new_database: Callable[[], str], call: str) -> None:
    """The usual causes of a lost reply (a server restart, a failover, a pooler's restart)
    cut the pool's idle connections too: the check of the commit took one of them, failed,
    and a committed write was reported failed."""
    with _behind_a_cutter(new_database(), pool=(3, 3)) as (kb, proxy):
        kb.search("warm the pool")
        proxy.armed = proxy.cut_all = True
        if call == "add_documents":
            assert kb.add_documents([{"text": "# Doc\n\nits reply was lost", "id": "d"}]) == ["d"]
        else:
            assert kb.upsert_chunks("d", [{"text": "Redis is the cache.", "id": "c1"}]) == ["c1"]
        assert proxy.cuts == 1 and [d.id for d in kb.get_by_ids(["d"])] == ["d"]


@pytest.mark.parametrize("call", ["add_documents", "upsert_chunks"])
def test_a_commit_in_doubt_is_checked_when_the_writers_hold_every_pool_connection(
        new_database: Callable[[], str], call: str) -> None:
    """The check took another connection of the pool while its writer still held the broken
    one: with every connection held so (one of one here; four writers of four after a
    failover), it waited out ``pool_timeout_s`` and the committed write was reported failed.
    It runs on a connection of its own."""
    with _behind_a_cutter(new_database(), pool=(1, 1), timeout_s=2.0) as (kb, proxy):
        proxy.armed = True
        if call == "add_documents":
            assert kb.add_documents([{"text": "# Doc\n\nits reply was lost", "id": "d"}]) == ["d"]
        else:
            assert kb.upsert_chunks("d", [{"text": "Redis is the cache.", "id": "c1"}]) == ["c1"]
        assert proxy.cuts == 1 and [d.id for d in kb.get_by_ids(["d"])] == ["d"]


def test_an_upsert_that_changes_only_the_documents_fields_is_not_reported_saved_uncommitted(
        new_database: Callable[[], str]) -> None:
    """The check compared the chunks only: an upsert of the same chunks with the document's
    status changed, whose COMMIT never reached the server, was reported saved; the
    document kept its old status."""
    chunks = [{"text": "Redis is the cache.", "id": "c1"}]
    accepted = {"type": "decision", "status": "accepted", "slug": "dec-cache"}
    with _behind_a_cutter(new_database()) as (kb, proxy):
        kb.upsert_chunks("dec-cache", chunks, metadata=accepted)
        proxy.armed = proxy.lose_commit = True
        proxy.after = b"UPDATE kb_documents"
        with pytest.raises(UnavailableError):
            kb.upsert_chunks("dec-cache", chunks, metadata={**accepted, "status": "superseded"})
        assert proxy.cuts == 1
        assert kb.get_by_ids(["dec-cache"])[0].metadata["status"] == "accepted"
        proxy.armed, proxy.lose_commit = True, False  # committed, its reply lost: saved
        assert kb.upsert_chunks("dec-cache", chunks,
                                metadata={**accepted, "status": "superseded"}) == ["c1"]
        assert proxy.cuts == 2
        assert kb.get_by_ids(["dec-cache"])[0].metadata["status"] == "superseded"


def test_a_write_whose_connection_is_lost_after_it_committed_is_reported_saved(
        new_database: Callable[[], str]) -> None:
    """The connection lost after the write's last commit, while the search's statement
    timeout was put back: the error of that reset came out of the write, reported failed."""
    with _behind_a_cutter(new_database()) as (kb, proxy):
        proxy.armed = proxy.lose_commit = True
        proxy.cut_at = b"SELECT set_config('statement_timeout'"
        assert kb.add_documents([{"text": "# Doc\n\nsaved, then cut", "id": "d"}]) == ["d"]
        assert proxy.cuts == 1 and [d.id for d in kb.get_by_ids(["d"])] == ["d"]
        assert kb.search("saved").primary  # the pool goes on without the cut connection
