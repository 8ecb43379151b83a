"""The store against a real PostgreSQL: migrations, fixed choices, ingest semantics."""

from __future__ import annotations

import textwrap
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from kb_retriever import KnowledgeBase, SchemaError
from kb_retriever.store import diagnostics, schema
from tests.conftest import fk_lookups_by_path_index

pytestmark = pytest.mark.db


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip(), encoding="utf-8")
    return path


DOC_A = """
---
slug: dec-alpha
type: decision
status: accepted
tags: [alpha]
related: ["[[dec-beta]]"]
---
# Alpha

## Context
Alpha explains the first decision about queues.

## Decision
We use a durable queue for alpha events.
"""


def _counts(kb: KnowledgeBase) -> tuple[int, int, int]:
    with psycopg.connect(kb.url) as conn:
        return tuple(  # type: ignore[return-value]
            conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
            for t in ("kb_documents", "kb_chunks", "kb_edges")
        )


def test_migrations_are_idempotent(make_kb):
    kb = make_kb()
    with psycopg.connect(kb.url, autocommit=True) as conn:
        first = schema.migrate(conn)
        second = schema.migrate(conn)
        assert first == second == max(v for v, _, _ in schema.migration_files())
        tables = {r[0] for r in conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public'")}
        assert {"kb_documents", "kb_chunks", "kb_edges", "kb_synonyms"} <= tables
        # every tenant table's primary key starts with tenant_id
        for table in ("kb_documents", "kb_chunks", "kb_edges", "kb_synonyms", "kb_embedding_cache",
                          "kb_projects"):
            cols = conn.execute(
                "SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid "
                "AND a.attnum = i.indkey[0] WHERE i.indrelid = %s::regclass AND i.indisprimary",
                [table]).fetchone()
            assert cols[0] == "tenant_id", table
        indexes = {r[0] for r in conn.execute("SELECT indexname FROM pg_indexes")}
        assert {"kb_chunks_hnsw_1", "kb_chunks_tsv_ix"} <= indexes


def test_ingest_is_idempotent_and_replaces_changed_content(make_kb, tmp_path):
    kb = make_kb()
    _write(tmp_path / "dec-alpha.md", DOC_A)
    _write(tmp_path / "notes.txt", "plain notes about alpha queues")
    r1 = kb.ingest([tmp_path])
    assert sorted(r1.added) == ["dec-alpha.md", "notes.txt"] and not r1.failed
    docs, chunks, edges = _counts(kb)
    assert (docs, edges) == (2, 1) and chunks >= 3
    r2 = kb.ingest([tmp_path])
    assert sorted(r2.unchanged) == ["dec-alpha.md", "notes.txt"] and r2.chunks_embedded == 0
    assert _counts(kb) == (docs, chunks, edges)
    _write(tmp_path / "dec-alpha.md", DOC_A.replace("durable queue", "replicated log"))
    r3 = kb.ingest([tmp_path])
    assert r3.updated == ["dec-alpha.md"]
    # only the changed chunk is re-embedded; unchanged chunk texts come from the cache
    assert r3.chunks_embedded == 1
    assert _counts(kb) == (docs, chunks, edges)
    hit = kb.search("replicated log alpha").primary[0]
    assert "replicated log" in hit.text


def test_a_file_parsed_by_an_older_parser_is_written_again_without_new_embeddings(
        make_kb, tmp_path, monkeypatch):
    """The parser's version is part of a file's content hash: when parsing changes (a language
    detected, a chunk's indexed prefixes), the next ingest writes every file again, its chunk
    texts' embeddings from the cache."""
    from kb_retriever.ingest import loaders

    kb = make_kb()
    _write(tmp_path / "dec-alpha.md", DOC_A)
    monkeypatch.setattr(loaders, "PARSER_VERSION", "kb-retriever-ingest/older")
    assert kb.ingest([tmp_path]).added == ["dec-alpha.md"]
    monkeypatch.undo()
    again = kb.ingest([tmp_path])
    assert again.updated == ["dec-alpha.md"] and again.chunks_embedded == 0
    assert kb.ingest([tmp_path]).unchanged == ["dec-alpha.md"]


def test_prune_deletes_missing_files(make_kb, tmp_path):
    kb = make_kb()
    _write(tmp_path / "a.md", "# A\n\nalpha text")
    _write(tmp_path / "b.md", "# B\n\nbeta text")
    kb.ingest([tmp_path])
    (tmp_path / "b.md").unlink()
    report = kb.ingest([tmp_path], prune=True)
    assert report.deleted == 1
    assert _counts(kb)[0] == 1


def test_bad_file_fails_alone_and_keeps_previous_version(make_kb, tmp_path):
    kb = make_kb()
    good = _write(tmp_path / "good.md", "# Good\n\nthe original good text")
    kb.ingest([tmp_path])
    good.write_bytes(b"\xff\xfe\x00binary\x00garbage")
    _write(tmp_path / "other.md", "# Other\n\nanother document")
    report = kb.ingest([tmp_path])
    assert [p for p, _ in report.failed] == ["good.md"]
    assert report.added == ["other.md"]
    texts = [h.text for h in kb.search("original good text", limit=5).primary]
    assert any("original good text" in t for t in texts)


def test_duplicate_slug_fails_that_file_only(make_kb, tmp_path):
    kb = make_kb()
    _write(tmp_path / "one.md", DOC_A)
    _write(tmp_path / "two.md", DOC_A.replace("Alpha", "Other"))
    report = kb.ingest([tmp_path])
    assert len(report.added) == 1 and len(report.failed) == 1
    assert "already used" in report.failed[0][1]


def test_invalid_frontmatter_is_ingested_as_non_canonical_with_warning(make_kb, tmp_path):
    kb = make_kb()
    _write(tmp_path / "bad.md",
           "---\nslug: Not A Slug\ntype: decision\nstatus: accepted\n---\n# T\n\nbody text here")
    report = kb.ingest([tmp_path])
    assert report.added == ["bad.md"] and report.warnings
    hit = kb.search("body text here").primary[0]
    assert hit.document.is_canonical is False


def test_ingest_checks_chunk_foreign_keys_by_primary_key(make_kb, tmp_path):
    """A first ingest stays linear: the run refreshes kb_documents' statistics after its first
    write, so chunk inserts stop checking their foreign key through the source_path index."""
    for i in range(150):
        body = "\n\n".join(f"## Part {k}\nNote {i} part {k} about queues." for k in range(4))
        _write(tmp_path / f"n{i:03}.md", f"# Note {i}\n\n{body}\n")
    kb = make_kb()
    report = kb.ingest([tmp_path])
    assert len(report.added) == 150 and report.chunks_written >= 600
    kb.close()  # its backends exit and flush their statistics
    # Quadratic plan: ~600 inserts x ~75 documents each = ~45,000 entries read.
    assert fk_lookups_by_path_index(kb.url, documents=150) < 5_000


def _storage_and_indexes(conn: psycopg.Connection) -> tuple[str, set[str]]:
    storage = conn.execute("SELECT attstorage FROM pg_attribute WHERE attrelid = "
                           "'kb_chunks'::regclass AND attname = 'tsv'").fetchone()[0]
    indexes = {r[0] for r in conn.execute(
        "SELECT indexname FROM pg_indexes WHERE tablename = 'kb_chunks'")}
    return storage, indexes


def test_chunk_storage_keeps_tsvectors_inline_new_and_migrated(make_kb):
    """tsv is STORAGE MAIN (ranked in the heap row, not fetched from TOAST) and the duplicate
    (tenant_id, document_id, chunk_order) index is gone, in new databases and after migrating
    a version-1 database."""
    kb = make_kb()
    with psycopg.connect(kb.url, autocommit=True) as conn:
        storage, indexes = _storage_and_indexes(conn)
        assert storage == "m" and "kb_chunks_doc_ix" not in indexes
        # back to version 1's layout, then migrate
        conn.execute("ALTER TABLE kb_chunks ALTER COLUMN tsv SET STORAGE EXTENDED")
        conn.execute("CREATE INDEX kb_chunks_doc_ix ON kb_chunks "
                     "(tenant_id, document_id, chunk_order)")
        conn.execute("UPDATE kb_meta SET value = '1' WHERE key = 'schema_version'")
        assert schema.migrate(conn) >= 2
        storage, indexes = _storage_and_indexes(conn)
        assert storage == "m" and "kb_chunks_doc_ix" not in indexes


def _out_of_line(conn: psycopg.Connection) -> dict[str, int]:
    """How many chunks hold each column out of line (in TOAST)."""
    columns = ("embedding", "chunk_uid", "heading_path", "metadata", "text")
    counts = conn.execute(sql.SQL("SELECT {} FROM kb_chunks").format(sql.SQL(", ").join(
        sql.SQL("count(pg_column_toast_chunk_id({}))").format(sql.Identifier(c))
        for c in columns))).fetchone()
    return dict(zip(columns, counts, strict=True))


def test_a_chunk_keeps_all_but_its_long_texts_in_its_row_new_and_migrated(make_kb, tmp_path):
    """The embedding was stored out of line (pgvector's default) and, in a row past 2 kB, the
    chunk's uid, heading path and metadata too: the vector leg read each hit's embedding from
    TOAST, and each candidate's columns. Now only the text leaves the row, in new databases
    and in rows written after a version-9 database is migrated (migration 0010)."""
    words = " ".join(f"word{i} lexeme{i * 7}" for i in range(150))
    _write(tmp_path / "long.md", f"# Long\n\n## A section with a long heading path\n\n{words}\n")
    kb = make_kb()
    kb.ingest([tmp_path])
    with psycopg.connect(kb.url, autocommit=True) as conn:
        if conn.info.server_version < 170000:
            pytest.skip("pg_column_toast_chunk_id needs PostgreSQL 17")
        stored = dict(conn.execute("SELECT attname, attstorage FROM pg_attribute WHERE attrelid "
                                   "= 'kb_chunks'::regclass AND attnum > 0 AND NOT attisdropped"))
        assert {c for c, kind in stored.items() if kind not in "pm"} == {"text", "search_prefix"}
        assert _out_of_line(conn) == {"embedding": 0, "chunk_uid": 0, "heading_path": 0,
                                      "metadata": 0, "text": 1}
        # back to version 9's storage, the chunk written again so, then migrate
        for column in schema.ROW_STORAGE:
            kind = "EXTERNAL" if column == "embedding" else "EXTENDED"
            conn.execute(sql.SQL("ALTER TABLE kb_chunks ALTER COLUMN {} SET STORAGE {}").format(
                sql.Identifier(column), sql.SQL(kind)))
        conn.execute("VACUUM FULL kb_chunks")
        assert _out_of_line(conn)["embedding"] == 1
        conn.execute("UPDATE kb_meta SET value = '9' WHERE key = 'schema_version'")
        assert schema.migrate(conn) >= 10
        conn.execute("VACUUM FULL kb_chunks")
        assert _out_of_line(conn) == {"embedding": 0, "chunk_uid": 0, "heading_path": 0,
                                      "metadata": 0, "text": 1}


def test_a_schema_newer_than_the_library_is_refused(make_kb):
    """A newer kb-retriever migrated the database (a rolling upgrade): this one opened it and
    went on writing what the newer schema does not expect. It refuses, naming both versions, and
    the doctor says which way to go for an older one."""
    kb = make_kb()
    latest = max(v for v, _, _ in schema.migration_files())
    with psycopg.connect(kb.url, autocommit=True) as conn:
        conn.execute("UPDATE kb_meta SET value = %s WHERE key = 'schema_version'",
                     [str(latest + 1)])
    with pytest.raises(SchemaError, match=f"version {latest + 1}, newer than the {latest}"):
        KnowledgeBase(kb.settings, embedder=kb.embedder, database_url=kb.url).open()
    with pytest.raises(SchemaError, match="newer than"), diagnostics.connect(kb.url):
        pass
    with psycopg.connect(kb.url, autocommit=True) as conn:
        conn.execute("UPDATE kb_meta SET value = %s WHERE key = 'schema_version'",
                     [str(latest - 1)])
    with pytest.raises(SchemaError, match="older than .* migrates it"), \
            diagnostics.connect(kb.url):
        pass
