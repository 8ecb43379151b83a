"""A project's trust channels are calibrated again only once the chunks written since the last
calibration reach a tenth of it (calibrate.RECALIBRATE_AT): adding documents one at a time
does not run the 32 probe searches on every call, and a file ingest follows the same rule."""

from __future__ import annotations

import psycopg
import pytest

from kb_retriever import HashingEmbedder, KnowledgeBase, Settings

pytestmark = pytest.mark.db


def _state(url: str) -> tuple[int, int, object]:
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT chunks, writes_since_calibration, calibrated_at "
                           "FROM kb_scope_stats WHERE project_key = 'p'").fetchone()
    assert row is not None
    return row


def test_adding_documents_one_at_a_time_recalibrates_at_a_tenth(new_database, tmp_path):
    url = new_database()
    with KnowledgeBase(Settings(), embedder=HashingEmbedder(64), database_url=url,
                       project="p") as kb:
        kb.add_documents([{"text": f"Note {i} about the payment service and its queue {i}.",
                           "id": f"n{i}"} for i in range(30)])
        chunks, written, first = _state(url)
        assert chunks == 30 and written == 0 and first is not None  # calibrated at once
        for i in range(3):  # 1, 2, 3 chunks written: under a tenth of 31, 32, 33
            kb.add_documents([{"text": f"Extra note {i} on the ledger.", "id": f"x{i}"}])
            assert _state(url)[1:] == (i + 1, first)
        kb.add_documents([{"text": "Extra note 3 on the ledger.", "id": "x3"}])  # 4 of 34
        assert _state(url)[1] == 0 and _state(url)[2] > first
        assert kb.add_documents([{"text": "Extra note 3 on the ledger.", "id": "x3"}]) == ["x3"]
        assert _state(url)[1] == 0  # unchanged content writes nothing and counts nothing
        assert kb.search("payment service queue").meta["calibration"]["calibrated"]

        root = tmp_path / "files"
        root.mkdir()
        (root / "one.md").write_text("# One\n\nThe ledger closes at midnight.\n")
        kb.ingest([root])  # 1 chunk of 35: counted, no probes
        assert _state(url)[1] == 1
        (root / "one.md").unlink()
        kb.ingest([root], prune=True)  # a prune recalibrates
        assert _state(url)[1] == 0


def test_a_project_in_another_script_is_measured_with_that_scripts_questions(new_database):
    """A Chinese project's null was measured with European questions alone (E5 scores text of
    another script low, so everyday Chinese questions cleared it); a project in Latin script
    stores the cosines of those questions only, as before."""
    from kb_retriever.ranking.calibration import ALL_PROBES, GROUPS, PROBES, Calibration

    url = new_database()
    with KnowledgeBase(Settings(), embedder=HashingEmbedder(64), database_url=url) as kb:
        kb.add_documents([{"id": f"zh{i}", "text": f"# 缓存层 {i}\n\n我们使用 Redis 作为会话缓存层，"
                                                   f"第 {i} 条说明。\n"} for i in range(4)],
                         project="zh")
        kb.add_documents([{"id": f"en{i}", "text": f"# Cache {i}\n\nRedis is the session "
                                                   f"cache layer, note {i}.\n"} for i in range(4)],
                         project="en")
        with psycopg.connect(url) as conn:
            stored = dict(conn.execute("SELECT project_key, probe_similarity FROM kb_scope_stats"
                                       ).fetchall())
        han = dict(GROUPS)["han"]
        assert len(stored["en"]) == len(PROBES) and None not in stored["en"]
        assert len(stored["zh"]) == len(ALL_PROBES)
        assert [i for i, x in enumerate(stored["zh"]) if x is not None] == [
            *range(len(PROBES)), *range(han.start, han.stop)]
        both = Calibration.from_rows([{"probe_version": "1", "probe_similarity": stored[p]}
                                      for p in ("zh", "en")])
        assert None not in both.null_top1[han] and both.null_top1[dict(GROUPS)["greek"]] == (
            None,) * 6
        assert kb.search("缓存", project=["zh", "en"]).meta["calibration"]["calibrated"]


@pytest.mark.parametrize("run", ["sync", "async"])
def test_deletes_count_toward_recalibration(new_database, run):
    """Only writes counted (migration 0006 says deletes do too): after most of a project was
    deleted, the refusal gate kept the larger corpus's calibration until later writes."""
    import asyncio

    url = new_database()
    with KnowledgeBase(Settings(), embedder=HashingEmbedder(64), database_url=url,
                       project="p") as kb:
        kb.add_documents([{"text": f"Note {i} about the payment service and its queue {i}.",
                           "id": f"n{i}"} for i in range(30)])
        first = _state(url)[2]
        gone = [f"n{i}" for i in range(20)]
        if run == "sync":
            assert kb.delete(gone) == 20
        else:
            assert asyncio.run(kb.adelete(gone)) == 20
        chunks, written, at = _state(url)
        assert chunks == 10 and written == 0 and at > first  # calibrated again, on 10 chunks


def test_writes_counted_while_a_calibration_measures_stay_counted(new_database, monkeypatch):
    """A calibration set the count of writes since the last one to 0 when it saved: a write of
    another process counted while it measured (and not in what it measured) was lost, and the
    next calibration came that much later. It subtracts what it measured."""
    import threading

    from kb_retriever.store.session import Session
    from kb_retriever.write.recalibrate import calibrate_project

    url = new_database()
    with KnowledgeBase(Settings(), embedder=HashingEmbedder(64), database_url=url,
                       project="p") as kb:
        kb.add_documents([{"text": f"Note {i} about the payment service and its queue {i}.",
                           "id": f"n{i}"} for i in range(30)])
        assert _state(url)[1] == 0
        measuring, written = threading.Event(), threading.Event()
        real = Session.top1_similarity

        def slow(self, *args, **kwargs):  # the calibration's probes wait for the other write
            if threading.current_thread() is not threading.main_thread():
                measuring.set()
                assert written.wait(60)
            return real(self, *args, **kwargs)

        monkeypatch.setattr(Session, "top1_similarity", slow)

        def calibrate() -> None:
            with kb._pools.writing() as session:
                calibrate_project(session, kb.embedder, tenant=kb.tenant, project="p")

        thread = threading.Thread(target=calibrate)
        thread.start()
        assert measuring.wait(60)
        kb.add_documents([{"text": "One more note on the ledger.", "id": "late"}])
        assert _state(url)[1] == 1
        written.set()
        thread.join(60)
        assert not thread.is_alive() and _state(url)[1] == 1
