"""Migration 0004 on a database written before it: per-document FTS configuration and the
per-scope lexeme counts are built from what the database holds, and searches work."""

from __future__ import annotations

import psycopg
import pytest

from kb_retriever import HashingEmbedder, KnowledgeBase, Settings
from kb_retriever.store import schema

pytestmark = pytest.mark.db

DIM = 16


def _old_database(url: str, model_id: str) -> None:
    """Schema v2 as it was: migrations 0001-0002 and the tsv column of the old fixed choices."""
    with psycopg.connect(url, autocommit=True) as conn:
        for version, _, body in schema.migration_files():
            if version <= 2:
                conn.execute(body)
        conn.execute("INSERT INTO kb_meta VALUES ('schema_version', '2'), "
                     "('embedding_dimension', %s), ('embedding_model', %s), "
                     "('fts_language', 'english')", [str(DIM), model_id])
        conn.execute(f"ALTER TABLE kb_chunks ALTER COLUMN embedding TYPE vector({DIM})")
        conn.execute("ALTER TABLE kb_chunks ADD COLUMN tsv tsvector GENERATED ALWAYS AS "
                     "(to_tsvector('english'::regconfig, search_prefix || ' ' || text)) STORED")
        zero = "[" + ",".join(["0.1"] * DIM) + "]"
        for i, (lang, text) in enumerate([("it", "Le notifiche della app passano da FCM."),
                                          (None, "The mobile releases ship every week.")]):
            doc = conn.execute(
                "INSERT INTO kb_documents (tenant_id, project_key, source_path, doc_key, title, "
                "source_type, content_hash, language) VALUES ('default', 'default', %s, %s, %s, "
                "'markdown', 'h', %s) RETURNING id", [f"d{i}.md", f"d{i}", f"Doc {i}", lang]
            ).fetchone()[0]
            conn.execute(
                "INSERT INTO kb_chunks (tenant_id, document_id, project_key, chunk_order, text, "
                "text_hash, embedding) VALUES ('default', %s, 'default', 0, %s, 'x', %s::vector)",
                [doc, text, zero])


def test_upgrading_a_v2_database(new_database):
    url = new_database()
    embedder = HashingEmbedder(DIM)
    _old_database(url, embedder.model_id)
    with psycopg.connect(url, autocommit=True) as conn:
        assert schema.migrate(conn) >= 4
        # Since 0007 a chunk keeps its language's code (fts_config before, a trigger's)
        configs = dict(conn.execute(
            "SELECT d.doc_key, c.fts_lang FROM kb_chunks c JOIN kb_documents d "
            "ON d.tenant_id = c.tenant_id AND d.id = c.document_id").fetchall())
        assert configs == {"d0": "it", "d1": None}
        it = conn.execute("SELECT tsvector_to_array(c.tsv) FROM kb_chunks c JOIN kb_documents d "
                          "ON d.id = c.document_id WHERE d.doc_key = 'd0'").fetchone()[0]
        assert "della" not in it and "notif" in it  # re-indexed in Italian
        lexemes = dict(conn.execute("SELECT lexeme, chunks FROM kb_lexemes").fetchall())
        truth = dict(conn.execute("SELECT u.lexeme, count(*) FROM kb_chunks c, unnest(c.tsv) u "
                                  "GROUP BY u.lexeme").fetchall())
        assert lexemes == truth
        assert conn.execute("SELECT chunks FROM kb_scope_stats").fetchone()[0] == 2
        assert conn.execute("SELECT count(*) FROM pg_indexes WHERE indexname = "
                            "'kb_chunks_tsv_ix'").fetchone()[0] == 1
    with KnowledgeBase(Settings(), embedder=embedder, database_url=url) as kb:
        result = kb.search("notifica", limit=2)
        assert result.primary[0].document.doc_key == "d0"
        assert not result.meta["calibration"]["calibrated"]  # until the next ingest


def test_upgrading_a_v6_database_counts_what_0007_stems_anew(new_database):
    """Migration 0007 stems each chunk by its document's language as it is now: a chunk whose
    document changed language since it was written (stemmed in English, its document Italian
    now) changes lexemes, and the per-scope counts follow (searches rely on them: decision
    0017)."""
    url = new_database()
    embedder = HashingEmbedder(DIM)
    _old_database(url, embedder.model_id)
    with psycopg.connect(url, autocommit=True) as conn:
        for version, _, body in schema.migration_files():
            if 2 < version <= 6:
                conn.execute(body)
        conn.execute("UPDATE kb_meta SET value = '6' WHERE key = 'schema_version'")
        conn.execute("UPDATE kb_documents SET language = 'it' WHERE doc_key = 'd1'")
        assert schema.migrate(conn) >= 7
        lexemes = dict(conn.execute("SELECT lexeme, chunks FROM kb_lexemes").fetchall())
        truth = dict(conn.execute("SELECT u.lexeme, count(*) FROM kb_chunks c, unnest(c.tsv) u "
                                  "GROUP BY u.lexeme").fetchall())
        assert "the" in truth  # not an Italian stop word: stemmed anew
        assert lexemes == truth
