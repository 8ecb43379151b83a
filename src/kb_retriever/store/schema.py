"""Versioned, idempotent migrations and the per-database fixed choices (dimension, language)."""

from __future__ import annotations

import logging
from importlib import resources
from typing import Any, NamedTuple

import psycopg
from psycopg import sql

from ..errors import SchemaError
from ..settings import FTS_LANGUAGES
from . import distribution
from .fulltext import ENGINE

logger = logging.getLogger(__name__)

# Serialises concurrent migrators (two processes opening a new database at once).
_LOCK_KEY = 0x6B62_7265  # "kbre"
# pgvector's HNSW index supports up to 2000 dimensions for `vector`.
HNSW_MAX_DIM = 2000


def add_tsv(conn: psycopg.Connection, default: str) -> None:
    """What the full-text engine indexes (``store/fulltext``), where missing."""
    for stmt in ENGINE.ddl(default):
        conn.execute(stmt)


def _has_column(conn: psycopg.Connection, table: str, column: str) -> bool:
    return conn.execute(
        "SELECT 1 FROM pg_attribute WHERE attrelid = %s::regclass AND attname = %s "
        "AND NOT attisdropped", [table, column]).fetchone() is not None


def _tsv_by_language(conn: psycopg.Connection) -> None:
    """After 0007: the tsv column reads ``fts_lang`` (rebuilt where it exists: a database made
    before; a new one gets it at first use, :func:`ensure_fixed_choices`)."""
    if _has_column(conn, "kb_chunks", "tsv"):
        default = read_meta(conn).get("fts_language", "english")
        if default not in FTS_LANGUAGES:  # allow-list: it becomes an SQL literal
            raise SchemaError(f"unknown FTS language {default!r} in kb_meta")
        conn.execute("ALTER TABLE kb_chunks DROP COLUMN tsv")
        add_tsv(conn, default)
    conn.execute("ALTER TABLE kb_chunks DROP COLUMN IF EXISTS fts_config")
    conn.execute("DROP FUNCTION IF EXISTS kb_fts_config(text)")


#: Steps in Python that follow a migration's SQL, in its transaction.
_AFTER: dict[int, Any] = {7: _tsv_by_language}


class Choices(NamedTuple):
    """What a knowledge base fixes in its database at first use: the embedder's dimension and
    model, and the default full-text language."""

    dimension: int
    model_id: str
    fts_language: str


def prepare(conn: psycopg.Connection, choices: Choices) -> None:
    """Migrate, fix or check the database's choices (:func:`ensure_fixed_choices`), then
    distribute the tables on a Citus coordinator (``store/distribution.py``): last, so that a
    new database's tables are complete (typed vector column, tsv stored in the row, indexes)
    when Citus copies their definition to the shards."""
    migrate(conn)
    ensure_fixed_choices(conn, dimension=choices.dimension, model_id=choices.model_id,
                         fts_language=choices.fts_language)
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", [_LOCK_KEY])
        distribution.distribute(conn)


def check_current(conn: psycopg.Connection, choices: Choices) -> None:
    """On a read-only server (a replica while the primary is down): the schema must be the
    library's current one, with these choices; a :class:`SchemaError` says what differs."""
    latest = max(v for v, _, _ in migration_files())
    meta = read_meta(conn)
    have = int(meta.get("schema_version", 0))
    if have != latest:
        raise SchemaError(f"this server holds schema version {have}, the library needs {latest}: "
                          "open the knowledge base with its primary reachable to migrate it")
    if meta.get("embedding_dimension") != str(choices.dimension):
        raise SchemaError(f"this database stores {meta.get('embedding_dimension')}-d embeddings; "
                          f"the embedder {choices.model_id!r} makes {choices.dimension}-d vectors")


def migration_files() -> list[tuple[int, str, str]]:
    """(version, name, sql) of every packaged migration, in order."""
    files = []
    for entry in resources.files("kb_retriever.migrations").iterdir():
        if entry.name.endswith(".sql"):
            version = int(entry.name.split("_", 1)[0])
            files.append((version, entry.name, entry.read_text(encoding="utf-8")))
    return sorted(files)


def migrate(conn: psycopg.Connection) -> int:
    """Apply pending migrations in one transaction each; return the schema version."""
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", [_LOCK_KEY])
        try:
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        except psycopg.Error as exc:
            raise SchemaError(
                "the database has no pgvector extension (CREATE EXTENSION vector failed): "
                f"{str(exc).strip().splitlines()[0]}"
            ) from None
        conn.execute("CREATE TABLE IF NOT EXISTS kb_meta (key text PRIMARY KEY, value text NOT NULL)")
        row = conn.execute("SELECT value FROM kb_meta WHERE key = 'schema_version'").fetchone()
        current = int(row[0]) if row else 0
        for version, name, body in migration_files():
            if version <= current:
                continue
            logger.info("applying migration %s", name)
            conn.execute(body)
            if version in _AFTER:
                _AFTER[version](conn)
            conn.execute(
                "INSERT INTO kb_meta (key, value) VALUES ('schema_version', %s) "
                "ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
                [str(version)],
            )
            current = version
    return current


def read_meta(conn: psycopg.Connection) -> dict[str, str]:
    return dict(conn.execute("SELECT key, value FROM kb_meta").fetchall())


def ensure_fixed_choices(conn: psycopg.Connection, *, dimension: int, model_id: str,
                         fts_language: str) -> None:
    """Fix the embedding dimension and the default FTS language at first use; refuse a mismatch
    later. Each chunk is indexed with its document's language's configuration
    (``store.fulltext``), this default when it has none.

    A different embedder on an existing database would corrupt similarity, so it is an error
    that names both models, not a silent re-typing.
    """
    if fts_language not in FTS_LANGUAGES:  # allow-list: it becomes an SQL literal below
        raise SchemaError(f"unknown FTS language {fts_language!r}")
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", [_LOCK_KEY])
        meta = read_meta(conn)
        if "embedding_dimension" in meta:
            have = int(meta["embedding_dimension"])
            if have != dimension:
                raise SchemaError(
                    f"this database stores {have}-d embeddings from model "
                    f"{meta.get('embedding_model', '?')!r}; the configured embedder "
                    f"{model_id!r} makes {dimension}-d vectors. Use the same embedder, or a new "
                    "database/KB_HOME."
                )
            if meta.get("fts_language") != fts_language:
                raise SchemaError(
                    f"this database's full-text index uses {meta.get('fts_language')!r}; "
                    f"KB_FTS_LANGUAGE is {fts_language!r}. Set KB_FTS_LANGUAGE to match."
                )
            if meta.get("embedding_model") != model_id:
                logger.warning(
                    "embedder %r differs from %r that built this database (same dimension)",
                    model_id, meta.get("embedding_model"),
                )
            return
        dim = sql.Literal(dimension)
        for table in ("kb_chunks", "kb_embedding_cache"):
            conn.execute(
                sql.SQL("ALTER TABLE {} ALTER COLUMN embedding TYPE vector({})").format(
                    sql.Identifier(table), dim
                )
            )
        add_tsv(conn, fts_language)
        if dimension <= HNSW_MAX_DIM:
            conn.execute(
                "CREATE INDEX IF NOT EXISTS kb_chunks_hnsw_ix ON kb_chunks "
                "USING hnsw (embedding vector_cosine_ops)"
            )
        else:
            logger.warning("%d-d vectors exceed HNSW's limit; searches scan exactly", dimension)
        conn.execute(
            "INSERT INTO kb_meta (key, value) VALUES ('embedding_dimension', %s), "
            "('embedding_model', %s), ('fts_language', %s)",
            [str(dimension), model_id, fts_language],
        )
