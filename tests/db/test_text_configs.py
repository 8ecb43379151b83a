"""The tsv column's languages (migration 0009, ``store.schema.text_configs``): a database whose
column an older kb-retriever built for fifteen languages is built again, once, when a newer one
opens it, with every language the server has a configuration for; its chunks in the languages
the column lacked are stemmed in theirs, and the scope statistics stay exact."""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import psycopg
import pytest
from psycopg import sql

from kb_retriever import HashingEmbedder, KnowledgeBase, Settings
from kb_retriever.store import schema, stats
from kb_retriever.store.fulltext import ENGINE
from kb_retriever.vocabulary import FTS_CONFIG_BY_LANGUAGE

from .test_languages import IT_PLAIN, RO_METERS, _first_by_text

pytestmark = pytest.mark.db

#: The languages the column of kb-retriever before schema 9 mapped.
BEFORE = ("en", "it", "fr", "de", "es", "pt", "nl", "da", "fi", "hu", "no", "nb", "ru", "sv", "tr")


def _as_built_before(url: str) -> None:
    """The database as kb-retriever before schema 9 left it: the column of the fifteen
    languages, no ``fts_lang`` for a chunk in another, no record of the column's languages."""
    before = {code: FTS_CONFIG_BY_LANGUAGE[code] for code in BEFORE}
    with psycopg.connect(url, autocommit=True) as conn, conn.transaction():
        conn.execute("ALTER TABLE kb_chunks DROP COLUMN tsv")
        conn.execute("UPDATE kb_chunks SET fts_lang = NULL WHERE fts_lang <> ALL(%s)", [list(before)])
        for stmt in ENGINE.ddl("english", before):
            conn.execute(stmt)
        conn.execute("DELETE FROM kb_meta WHERE key = 'fts_configs'")
        conn.execute("UPDATE kb_meta SET value = '8' WHERE key = 'schema_version'")
        stats.recount_every_scope(conn)


def _column(conn: psycopg.Connection) -> int:
    """The tsv column's number: a column built again gets the next one."""
    return conn.execute("SELECT attnum FROM pg_attribute WHERE attrelid = 'kb_chunks'::regclass "
                        "AND attname = 'tsv' AND NOT attisdropped").fetchone()[0]


def _open(url: str) -> KnowledgeBase:
    return KnowledgeBase(Settings(), embedder=HashingEmbedder(256), database_url=url).open()


def test_a_column_built_before_gets_the_languages_it_lacked_once(make_kb, tmp_path):
    kb = make_kb()
    (tmp_path / "ro.md").write_text(RO_METERS, encoding="utf-8")
    (tmp_path / "it.md").write_text(IT_PLAIN, encoding="utf-8")
    kb.ingest([tmp_path])
    url = kb.url
    kb.close()
    _as_built_before(url)
    with psycopg.connect(url) as conn:
        before = _column(conn)
        ro = conn.execute("SELECT tsvector_to_array(c.tsv) FROM kb_chunks c JOIN kb_documents d "
                          "ON d.id = c.document_id WHERE d.doc_key = 'ro'").fetchone()[0]
        assert "contorul" not in ro and "operatorul" in ro  # English's stemmer left it whole

    with ThreadPoolExecutor(3) as pool:  # three processes' worth of opens at once
        opened = list(pool.map(_open, [url] * 3, timeout=120))
    try:
        with psycopg.connect(url) as conn:
            assert _column(conn) == before + 1  # built again once, not once per open
            rows = conn.execute(
                "SELECT d.doc_key, c.fts_lang, tsvector_to_array(c.tsv) FROM kb_chunks c "
                "JOIN kb_documents d ON d.id = c.document_id ORDER BY 1").fetchall()
            assert [(key, lang) for key, lang, _ in rows] == [("it", "it"), ("ro", "ro")]
            assert "oper" in rows[1][2] and "operatorul" not in rows[1][2]  # Romanian's stems
            recorded = schema.read_meta(conn)["fts_configs"]
            assert json.loads(recorded) == schema.text_configs(conn)
            counted = dict(conn.execute("SELECT lexeme, chunks FROM kb_lexemes").fetchall())
            truth = dict(conn.execute("SELECT u.lexeme, count(*) FROM kb_chunks c, "
                                      "unnest(c.tsv) u GROUP BY u.lexeme").fetchall())
            assert counted == truth  # the statistics searches rely on are exact
        assert _first_by_text(opened[0], "contorul jurnalului") == ["ro"]
        _open(url).close()
        with psycopg.connect(url) as conn:
            assert _column(conn) == before + 1  # an open that finds it built leaves it
    finally:
        for each in opened:
            each.close()


def _romanian_built_before(make_kb, tmp_path) -> str:
    """A knowledge base of one Romanian document, left as before schema 9: its URL."""
    kb = make_kb()
    (tmp_path / "ro.md").write_text(RO_METERS, encoding="utf-8")
    kb.ingest([tmp_path])
    url = kb.url
    kb.close()
    _as_built_before(url)
    return url


def test_the_rebuild_builds_the_indexes_with_the_memory_their_graph_needs(make_kb, tmp_path):
    """Adding the column rewrites kb_chunks, which builds every index again, the HNSW graph
    too: with a stock server's 64 MB a million chunks' graph is built on disk (over 30 min on
    a 2-core VM; decision 0022's rebuild). The rebuild sizes ``maintenance_work_mem`` to the
    vectors for its own transaction (``spaces.index_memory``)."""
    url = _romanian_built_before(make_kb, tmp_path)
    with psycopg.connect(url) as conn:
        conn.execute("SET maintenance_work_mem = '1MB'")
        conn.commit()
        with conn.transaction():
            schema._rebuild_tsv(conn, "english")
            during = conn.execute("SHOW maintenance_work_mem").fetchone()[0]
        after = conn.execute("SHOW maintenance_work_mem").fetchone()[0]
    assert during == "64MB"  # the floor: one document's graph is small
    assert after == "1MB"  # for the rebuild's transaction only


def test_the_rebuilt_column_has_statistics(make_kb, tmp_path):
    """The rewrite leaves kb_chunks without statistics on the new tsv column, and autovacuum
    does not count rewritten rows as changes: the rebuild analyzes the table itself, so the
    planner does not guess the full-text leg's matches after an upgrade."""
    url = _romanian_built_before(make_kb, tmp_path)
    _open(url).close()
    with psycopg.connect(url) as conn:
        analyzed = conn.execute("SELECT count(*) FROM pg_stats WHERE tablename = 'kb_chunks' "
                                "AND attname = 'tsv'").fetchone()[0]
    assert analyzed == 1


def test_a_statement_timeout_does_not_cancel_the_rebuild(make_kb, tmp_path):
    """A role's or database's ``statement_timeout`` (a managed server's default, a borrowed
    pool's) does not cancel a migration or the rebuild, which take minutes on a large
    knowledge base: cancelled, they would fail every open. Here the database's timeout is
    0.3 s and a reader holds kb_chunks for 1.5 s, so the rebuild's ALTER TABLE waits longer
    than the timeout."""
    url = _romanian_built_before(make_kb, tmp_path)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql.SQL("ALTER DATABASE {} SET statement_timeout = '300ms'").format(
            sql.Identifier(conn.info.dbname)))
    with psycopg.connect(url) as reader:
        reader.execute("SELECT count(*) FROM kb_chunks")  # its lock stays until the commit
        release = threading.Timer(1.5, reader.commit)
        release.start()
        started = time.monotonic()
        opened = _open(url)
        waited = time.monotonic() - started
        release.join()
    try:
        assert waited >= 1.0  # the rebuild waited for the reader, past the timeout
        with psycopg.connect(url) as conn:
            assert conn.execute("SHOW statement_timeout").fetchone()[0] == "300ms"
            recorded = json.loads(schema.read_meta(conn)["fts_configs"])
            assert recorded == schema.text_configs(conn)  # built again
    finally:
        opened.close()
