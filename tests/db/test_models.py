"""Several embedding models in one database (issue 28, decision 0013): each project keeps the
model it was written with, each model has its own approximate index, a re-embed moves a
project atomically, halfvec indexes what vector cannot, and the doctor rebuilds an index."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import psycopg
import pytest

from kb_retriever import HashingEmbedder, KnowledgeBase, SchemaError, Settings
from kb_retriever.doctor import check_index
from kb_retriever.models import DocumentRecord
from kb_retriever.store import diagnostics, schema

pytestmark = pytest.mark.db

DOCS = {
    "queues.md": "# Queues\n\nWe chose a durable queue for billing events.",
    "cache.md": "# Cache\n\nThe cache layer is Redis with a five minute TTL.",
    "deploys.md": "# Deploys\n\nDeploys run through the blue green pipeline on Fridays.",
}


def _folder(tmp_path: Path) -> Path:
    for name, text in DOCS.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    return tmp_path


def _open(url: str, dim: int, **settings: object) -> KnowledgeBase:
    return KnowledgeBase(Settings(**settings), embedder=HashingEmbedder(dim),  # type: ignore[arg-type]
                         database_url=url).open()


def _models(url: str) -> dict[str, tuple[int, str, str | None]]:
    with psycopg.connect(url) as conn:
        return {str(m): (int(d), str(t), n) for m, d, t, n in conn.execute(
            "SELECT model_id, dimension, index_type, index_name FROM kb_models")}


def test_two_models_each_with_its_own_projects_and_index(new_database, tmp_path):
    url = new_database()
    with _open(url, 32) as small, _open(url, 64) as large:
        assert not small.ingest([_folder(tmp_path)], project="a").failed
        assert not large.ingest([tmp_path], project="b").failed
        assert _models(url) == {"hashing-md5-32": (32, "vector", "kb_chunks_hnsw_1"),
                                "hashing-md5-64": (64, "vector", "kb_chunks_hnsw_2")}
        assert small.search("durable queue billing", project="a").primary[0].document.title \
            == "Queues"
        assert large.search("redis cache ttl", project="b").primary[0].document.title == "Cache"
        with psycopg.connect(url) as conn:
            defs = dict(conn.execute("SELECT indexname, indexdef FROM pg_indexes "
                                     "WHERE indexname LIKE 'kb_chunks_hnsw_%'").fetchall())
        assert "vector(32)" in defs["kb_chunks_hnsw_1"] and "model = 1" in defs["kb_chunks_hnsw_1"]
        assert "vector(64)" in defs["kb_chunks_hnsw_2"] and "model = 2" in defs["kb_chunks_hnsw_2"]


def test_another_models_project_is_refused_with_its_name_and_nothing_written(new_database,
                                                                             tmp_path):
    url = new_database()
    with _open(url, 32) as small, _open(url, 64) as large:
        small.ingest([_folder(tmp_path)], project="a")
        (tmp_path / "new.md").write_text("# New\n\nAnother note.", encoding="utf-8")
        with pytest.raises(SchemaError, match=r"'a' is embedded with 'hashing-md5-32' \(32-d\)"):
            large.ingest([tmp_path], project="a")
        with pytest.raises(SchemaError, match="hashing-md5-32"):
            large.add_documents([DocumentRecord(id="x", text="text")], project="a")
        with pytest.raises(SchemaError, match=r"a \(hashing-md5-32, 32-d\)"):
            large.search("queue", project="a")
        with pytest.raises(SchemaError, match="embedded with another model"):
            large.search("queue", project=["a", "b"])
        assert small.projects() == {"a": 3}  # nothing of the refused writes


def test_an_emptied_project_takes_the_next_writers_model(new_database, tmp_path):
    url = new_database()
    with _open(url, 32) as small, _open(url, 64) as large:
        small.add_documents([DocumentRecord(id="x", text="a short note")], project="p")
        small.delete(["x"], project="p")
        large.add_documents([DocumentRecord(id="y", text="a short note")], project="p")
        assert [h.document.doc_key for h in large.search("short note", project="p").primary] \
            == ["y"]


def test_reembed_moves_a_project_atomically_and_the_old_model_is_refused(new_database, tmp_path):
    url = new_database()
    with _open(url, 32) as old, _open(url, 64) as new:
        old.ingest([_folder(tmp_path)], project="a")
        before = {h.document.title for h in old.search("durable queue billing", project="a",
                                                       limit=3).primary}
        report = new.reembed("a")
        assert (report.before, report.after, report.chunks) == (("hashing-md5-32", 32),
                                                                ("hashing-md5-64", 64), 3)
        assert "3 chunks moved" in report.summary()
        after = {h.document.title for h in new.search("durable queue billing", project="a",
                                                      limit=3).primary}
        assert after == before
        with psycopg.connect(url) as conn:
            dims = conn.execute("SELECT DISTINCT vector_dims(embedding), model FROM kb_chunks "
                                "WHERE project_key = 'a'").fetchall()
        assert dims == [(64, 2)]
        with pytest.raises(SchemaError, match="hashing-md5-64"):
            old.search("queue", project="a")
        with pytest.raises(SchemaError, match="hashing-md5-64"):
            old.ingest([tmp_path], project="a")
        assert new.reembed("a").chunks == 0  # already there
        # the new model's calibration replaced the old one's
        assert new.search("durable queue billing", project="a").meta.calibrated
        with psycopg.connect(url) as conn:
            probe = conn.execute("SELECT probe_model FROM kb_scope_stats "
                                 "WHERE project_key = 'a'").fetchone()
        assert probe == ("hashing-md5-64",)


def test_reembed_while_old_model_writers_run_loses_nothing(new_database):
    """Writers of the old model race the move: each write either commits before it (and is
    moved with the rest) or is refused after it; no chunk is left on the old model, and every
    write reported saved is there."""
    url = new_database()
    old, new = _open(url, 32), _open(url, 64)
    saved: list[str] = []
    refused: list[str] = []
    errors: list[BaseException] = []  # anything but the refusal: a deadlock, say
    stop = threading.Event()

    def writer(n: int) -> None:
        i = 0
        while not stop.is_set() and i < 200:
            doc = f"w{n}-{i}"
            try:
                old.add_documents([DocumentRecord(id=doc, text=f"note {doc} about queues")],
                                  project="a")
                saved.append(doc)
            except SchemaError:
                refused.append(doc)
                return
            except Exception as exc:  # noqa: BLE001 (the test reports it)
                errors.append(exc)
                return
            i += 1

    try:
        old.add_documents([DocumentRecord(id=f"seed{i}", text=f"seed {i} queues")
                           for i in range(50)], project="a")
        threads = [threading.Thread(target=writer, args=(n,)) for n in range(3)]
        for th in threads:
            th.start()
        time.sleep(0.3)
        report = new.reembed("a")
        stop.set()
        for th in threads:
            th.join(timeout=60)
        assert not any(th.is_alive() for th in threads)
        assert not errors, errors  # refused with a SchemaError, or saved: never another error
        with psycopg.connect(url) as conn:
            models = dict(conn.execute("SELECT model, count(*) FROM kb_chunks "
                                       "WHERE project_key = 'a' GROUP BY model").fetchall())
        assert set(models) == {2}, models
        stored = {d.id for d in new.get_by_ids([*saved, *refused], project="a")}
        assert set(saved) <= stored and not (set(refused) & stored)
        assert report.chunks >= 50
    finally:
        stop.set()
        old.close()
        new.close()


def test_halfvec_indexes_what_vector_cannot(new_database, tmp_path):
    url = new_database()
    with _open(url, 2100) as kb:
        kb.ingest([_folder(tmp_path)], project="a")
        assert _models(url)["hashing-md5-2100"] == (2100, "halfvec", "kb_chunks_hnsw_1")
        assert kb.search("redis cache ttl", project="a").primary[0].document.title == "Cache"
        with diagnostics.connect(url) as store:
            report = check_index(store, tenant="default", project="a", samples=3, k=2,
                                 settings=kb.settings)
        assert report.model["index_type"] == "halfvec" and report.recall_at_k == 1.0


def test_halfvec_on_request_and_no_index_above_4000(new_database, tmp_path):
    url = new_database()
    with _open(url, 48, hnsw_type="halfvec") as half, _open(url, 4100) as huge:
        half.ingest([_folder(tmp_path)], project="a")
        huge.ingest([tmp_path], project="b")
        models = _models(url)
        assert models["hashing-md5-48"][1] == "halfvec"
        assert models["hashing-md5-4100"] == (4100, "none", None)
        assert huge.search("blue green deploys", project="b").primary[0].document.title \
            == "Deploys"
        assert half.search("blue green deploys", project="a").primary[0].document.title \
            == "Deploys"


def test_vector_above_2000_is_a_config_error(new_database):
    from kb_retriever import ConfigError

    with pytest.raises(ConfigError, match="KB_HNSW_TYPE=vector indexes up to 2000"):
        _open(new_database(), 2100, hnsw_type="vector")


def test_doctor_names_the_index_and_reindex_applies_the_settings(new_database, tmp_path):
    url = new_database()
    with _open(url, 32) as kb:
        kb.add_documents([DocumentRecord(id=f"d{i}", text=f"note {i} on topic {i % 7}")
                          for i in range(300)], project="a")
        wanted = Settings(hnsw_m=8, hnsw_ef_construction=32, hnsw_type="halfvec")
        with diagnostics.connect(url) as store:
            first = check_index(store, tenant="default", project="a", samples=5, k=5,
                                settings=wanted)
            assert first.model["index_name"] == "kb_chunks_hnsw_1"
            assert first.vector_index == "kb_chunks_hnsw_1"
            assert any("doctor --reindex" in h for h in first.hints)
            again = check_index(store, tenant="default", project="a", samples=5, k=5,
                                settings=wanted, reindex=True)
        assert again.reindexed and not any("doctor --reindex" in h for h in again.hints)
        assert (again.model["index_type"], again.model["hnsw_m"],
                again.model["hnsw_ef_construction"]) == ("halfvec", 8, 32)
        assert again.vector_index == "kb_chunks_hnsw_1" and again.recall_at_k is not None
        with psycopg.connect(url) as conn:
            (definition,) = conn.execute("SELECT indexdef FROM pg_indexes "
                                         "WHERE indexname = 'kb_chunks_hnsw_1'").fetchone()
            leftovers = conn.execute("SELECT count(*) FROM pg_indexes "
                                     "WHERE indexname LIKE 'kb_chunks_hnsw_%'").fetchone()[0]
        assert "halfvec(32)" in definition and "m='8'" in definition and leftovers == 1
        # a process that opened before the rebuild still answers (it scans exactly), and a
        # new one uses the halfvec index
        assert kb.search("note 5 topic", project="a").primary
        with _open(url, 32) as fresh:
            assert fresh.search("note 5 topic", project="a").primary


def test_a_database_made_before_0008_keeps_its_model(new_database):
    """Schema 7 as it was: the typed column, one HNSW index, the model in kb_meta."""
    url = new_database()
    dim = 16
    model = HashingEmbedder(dim)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        with conn.transaction():
            for version, _, body in schema.migration_files():
                if version <= 7:
                    conn.execute(body)
                    if version in schema._AFTER:
                        schema._AFTER[version](conn)
        conn.execute("INSERT INTO kb_meta VALUES ('schema_version', '7'), "
                     "('embedding_dimension', %s), ('embedding_model', %s), "
                     "('fts_language', 'english')", [str(dim), model.model_id])
        conn.execute(f"ALTER TABLE kb_chunks ALTER COLUMN embedding TYPE vector({dim})")
        schema.add_tsv(conn, "english")
        conn.execute("CREATE INDEX kb_chunks_hnsw_ix ON kb_chunks "
                     "USING hnsw (embedding vector_cosine_ops)")
        doc = conn.execute(
            "INSERT INTO kb_documents (tenant_id, project_key, source_path, doc_key, title, "
            "source_type, content_hash) VALUES ('default', 'old', 'q.md', 'q', 'Queues', "
            "'markdown', 'h') RETURNING id").fetchone()[0]
        vec = "[" + ",".join(str(x) for x in model.embed_query("durable queue billing")) + "]"
        conn.execute("INSERT INTO kb_chunks (tenant_id, document_id, project_key, chunk_order, "
                     "text, text_hash, embedding, chunk_uid) VALUES ('default', %s, 'old', 0, "
                     "'durable queue billing', 'x', %s::vector, 'u0')", [doc, vec])
    kb = KnowledgeBase(Settings(), embedder=model, database_url=url).open()
    try:
        assert kb.search("durable queue billing", project="old").primary[0].document.title \
            == "Queues"
        assert _models(url) == {model.model_id: (dim, "vector", "kb_chunks_hnsw_1")}
        with psycopg.connect(url) as conn:
            names = {r[0] for r in conn.execute("SELECT indexname FROM pg_indexes")}
            bound = conn.execute("SELECT model FROM kb_projects WHERE project_key = 'old'"
                                 ).fetchone()
            meta = dict(conn.execute("SELECT key, value FROM kb_meta").fetchall())
        assert "kb_chunks_hnsw_ix" not in names and "kb_chunks_hnsw_1" in names
        assert bound == (1,) and "embedding_dimension" not in meta
    finally:
        kb.close()


class _OneName(HashingEmbedder):
    """One model at two output sizes under one name, as a wrapped model with a
    ``dimensions`` option is (``text-embedding-3-small`` at 1536 and at 512)."""

    @property
    def model_id(self) -> str:
        return "one-name"


def test_one_model_at_two_sizes_shares_no_cached_vector(new_database, tmp_path):
    """The embedding cache is keyed by the model's name: the texts' 64-dimension vectors,
    cached for one project, were written to another project's 32-dimension space."""
    url = new_database()
    folder = _folder(tmp_path)
    for project, dim in (("wide", 64), ("narrow", 32)):
        with KnowledgeBase(Settings(), embedder=_OneName(dim), database_url=url,
                           project=project) as kb:
            report = kb.ingest([folder])
            assert report.failed == [] and len(report.added) == 3, report
            assert report.chunks_embedded == 3  # none taken from the other size's cache
            assert kb.search("redis cache layer").primary[0].document.source_path == "cache.md"
    with KnowledgeBase(Settings(), embedder=_OneName(64), database_url=url,
                       project="wide") as kb:  # and back: the narrow vectors are not taken
        (folder / "cache.md").write_text(DOCS["cache.md"] + "\n\nEviction is LRU.", "utf-8")
        report = kb.ingest([folder])
        assert report.failed == [] and report.updated == ["cache.md"], report


class _QueriesFail(HashingEmbedder):
    """Embeds documents; its query embedding (the calibration's probes) fails."""

    @property
    def model_id(self) -> str:
        return "queries-fail"

    def embed_query(self, text: str) -> list[float]:
        raise RuntimeError("the query endpoint is down")


def test_a_reembed_that_moved_the_project_is_reported_done_when_its_calibration_fails(
        new_database, tmp_path):
    """The calibration runs after the move committed; its error came out of ``reembed``,
    which said the move failed, and the retry said "already embedded"."""
    url = new_database()
    with _open(url, 32) as old:
        old.ingest([_folder(tmp_path)], project="a")
    with KnowledgeBase(Settings(), embedder=_QueriesFail(64), database_url=url) as new:
        report = new.reembed("a")
        assert (report.after, report.chunks) == (("queries-fail", 64), 3)


def test_reembed_chosen_as_a_deadlock_victim_runs_again(new_database, tmp_path):
    """The move of a project updates its chunks in id order in one transaction; a writer that
    holds a later chunk and then asks for an earlier one makes a deadlock, and PostgreSQL
    aborts the transaction that waited first, the move. Every other write transaction runs
    again then (``store.retry``); the move came back as a StoreError saying so."""
    url = new_database()
    with _open(url, 32) as old, _open(url, 64) as new:
        old.ingest([_folder(tmp_path)], project="a")
        with psycopg.connect(url) as conn:
            first, last = conn.execute("SELECT min(id), max(id) FROM kb_chunks "
                                       "WHERE project_key = 'a'").fetchone()
        touch = "UPDATE kb_chunks SET heading_path = heading_path WHERE id = %s"
        with psycopg.connect(url) as other:
            other.execute(touch, [last])  # held until this transaction ends
            moved: list[object] = []
            thread = threading.Thread(target=lambda: moved.append(_reembed(new)))
            thread.start()
            time.sleep(0.5)  # the move waits for the last chunk, holding the others
            other.execute(touch, [first])  # waits for the move: a deadlock, the move aborted
            other.commit()
            thread.join(60)
        assert not thread.is_alive()
        assert [getattr(m, "chunks", m) for m in moved] == [3]


def _reembed(kb: KnowledgeBase) -> object:
    try:
        return kb.reembed("a")
    except Exception as exc:  # noqa: BLE001 (the test reports it)
        return exc
