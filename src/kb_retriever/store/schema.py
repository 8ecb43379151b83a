"""Versioned, idempotent migrations and the per-database fixed choices (dimension, language)."""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Iterator
from importlib import resources
from typing import Any, NamedTuple

import psycopg
from psycopg import sql

from ..errors import SchemaError
from ..settings import Settings
from ..vocabulary import FTS_CONFIG_BY_LANGUAGE, FTS_CONFIG_OF_DOCUMENT, FTS_LANGUAGES, fts_language
from . import distribution, spaces, stats
from .fulltext import ENGINE

logger = logging.getLogger(__name__)

# Serialises concurrent migrators (two processes opening a new database at once).
_LOCK_KEY = 0x6B62_7265  # "kbre"


def text_configs(conn: psycopg.Connection) -> dict[str, str]:
    """Language code -> text search configuration: those of
    :data:`~kb_retriever.vocabulary.FTS_CONFIG_BY_LANGUAGE` that this server has."""
    names = sorted(set(FTS_CONFIG_BY_LANGUAGE.values()))
    have = {name for (name,) in conn.execute(
        "SELECT cfgname FROM pg_ts_config WHERE cfgname = ANY(%s) "
        "AND pg_ts_config_is_visible(oid)", [names])}
    return {code: config for code, config in FTS_CONFIG_BY_LANGUAGE.items() if config in have}


def add_tsv(conn: psycopg.Connection, default: str) -> None:
    """What the full-text engine indexes (``store/fulltext``), where missing, with every
    language the server has a configuration for; kb_meta records them (``fts_configs``),
    which is what searches stem a question by (``store.catalog_sql.fts_configs_sql``)."""
    configs = text_configs(conn)
    column, *indexes = ENGINE.ddl(default, configs)
    conn.execute(column)
    distribution.set_storage(conn, "kb_chunks", ENGINE.storage)
    for stmt in indexes:
        conn.execute(stmt)
    conn.execute("INSERT INTO kb_meta (key, value) VALUES ('fts_configs', %s) "
                 "ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value", [json.dumps(configs)])


def _rebuild_tsv(conn: psycopg.Connection, default: str) -> None:
    """The tsv column built again (:func:`add_tsv`), each chunk's ``fts_lang`` first set from
    its document's language as the writer sets it, and the scope statistics counted again:
    searches rely on them being exact (decisions 0010, 0017)."""
    codes = sorted(FTS_CONFIG_OF_DOCUMENT)
    spaces.index_memory(conn)  # adding the column rewrites kb_chunks and builds every index again
    conn.execute("ALTER TABLE kb_chunks DROP COLUMN IF EXISTS tsv")
    conn.execute(
        "UPDATE kb_chunks c SET fts_lang = l.fts_lang FROM kb_documents d, "
        "unnest(%s::text[], %s::text[]) AS l(language, fts_lang) "
        "WHERE d.tenant_id = c.tenant_id AND d.id = c.document_id "
        "AND lower(d.language) = l.language AND c.fts_lang IS DISTINCT FROM l.fts_lang",
        [codes, [fts_language(code) for code in codes]])
    add_tsv(conn, default)
    stats.recount_every_scope(conn)
    # The rewrite leaves kb_chunks without statistics on the new column, and autovacuum does
    # not count rewritten rows as changes: the planner would guess the full-text leg's
    # matches until enough writes came (measured at 100,000 chunks: no tsv row in pg_stats
    # after the rebuild).
    conn.execute("ANALYZE kb_chunks")


def _refresh_tsv(conn: psycopg.Connection, default: str, recorded: str | None) -> bool:
    """The tsv column built again when it maps other languages than this kb-retriever and
    server can (:func:`text_configs`): a database made by an older kb-retriever, or moved to
    a newer PostgreSQL. Every row is written again, once, under the migrators' lock. Whether
    it was."""
    configs = text_configs(conn)
    if json.loads(recorded or "{}") == configs:
        return False
    logger.warning("building the full-text column again, for %d languages: every chunk is "
                   "written again and kb_chunks waits for it (72 s at 100,000 chunks and 15 min "
                   "at 1,000,000 measured, docs/decisions/0022)", len(configs))
    _rebuild_tsv(conn, default)
    return True


def _has_column(conn: psycopg.Connection, table: str, column: str) -> bool:
    return conn.execute(
        "SELECT 1 FROM pg_attribute WHERE attrelid = %s::regclass AND attname = %s "
        "AND NOT attisdropped", [table, column]).fetchone() is not None


def _tsv_by_language(conn: psycopg.Connection) -> None:
    """After 0007: the tsv column reads ``fts_lang`` (rebuilt where it exists: a database made
    before; a new one gets it at first use, :func:`ensure_fixed_choices`). A chunk whose
    document's language changed since it was written is stemmed anew, so the lexeme counts
    are counted again: searches rely on them being exact (decisions 0010, 0017)."""
    if _has_column(conn, "kb_chunks", "tsv"):
        default = read_meta(conn).get("fts_language", "english")
        if default not in FTS_LANGUAGES:  # allow-list: it becomes an SQL literal
            raise SchemaError(f"unknown FTS language {default!r} in kb_meta")
        _rebuild_tsv(conn, default)
    conn.execute("ALTER TABLE kb_chunks DROP COLUMN IF EXISTS fts_config")
    conn.execute("DROP FUNCTION IF EXISTS kb_fts_config(text)")


def _stored_model(conn: psycopg.Connection) -> tuple[str, int] | None:
    """(model id, dimension) of a database's embeddings before 0008: kb_meta's, else, for
    chunks written without it, their dimension and an unknown model (a re-embed moves them)."""
    meta = read_meta(conn)
    if "embedding_dimension" in meta:
        return meta.get("embedding_model", "unknown"), int(meta["embedding_dimension"])
    row = conn.execute("SELECT min(vector_dims(embedding)), max(vector_dims(embedding)) "
                       "FROM kb_chunks").fetchone()
    if row is None or row[0] is None:
        return None
    if row[0] != row[1]:
        raise SchemaError(f"kb_chunks holds embeddings of {row[0]} and {row[1]} dimensions "
                          "and kb_meta names no model: the database cannot be migrated")
    return "unknown", int(row[0])


def _models(conn: psycopg.Connection) -> None:
    """After 0008: ``kb_chunks.model`` and an untyped vector column; a database that had a
    model gets it as space 1, with the index it had (pgvector's default ``m`` 16 and
    ``ef_construction`` 64) rebuilt as that space's partial index, and its projects bound.
    Idempotent, as the migrations' SQL."""
    if _has_column(conn, "kb_chunks", "model"):
        return
    stored = _stored_model(conn)
    conn.execute("DROP INDEX IF EXISTS kb_chunks_hnsw_ix")
    for table in ("kb_chunks", "kb_embedding_cache"):
        conn.execute(sql.SQL("ALTER TABLE {} ALTER COLUMN embedding TYPE vector").format(
            sql.Identifier(table)))
    if stored is None:
        conn.execute("ALTER TABLE kb_chunks ADD COLUMN model smallint NOT NULL")
        return
    model_id, dim = stored
    kind = "vector" if dim <= spaces.HNSW_MAX_VECTOR else "none"
    space = spaces.Space(1, model_id, dim, kind,
                         *(("kb_chunks_hnsw_1", 16, 64) if kind == "vector" else (None,) * 3))
    conn.execute("INSERT INTO kb_models (id, model_id, dimension, index_type, index_name, hnsw_m, "
                 "hnsw_ef_construction) VALUES (%s, %s, %s, %s, %s, %s, %s)",
                 [space.id, space.model_id, dim, kind, space.index_name, space.m,
                  space.ef_construction])
    # a default on ADD COLUMN fills the existing rows without rewriting the table
    conn.execute("ALTER TABLE kb_chunks ADD COLUMN model smallint NOT NULL DEFAULT 1")
    conn.execute("ALTER TABLE kb_chunks ALTER COLUMN model DROP DEFAULT")
    conn.execute("INSERT INTO kb_projects (tenant_id, project_key, model) "
                 "SELECT DISTINCT tenant_id, project_key, 1 FROM kb_documents")
    if space.index_name is not None:
        spaces.index_memory(conn, space.id)
        conn.execute(spaces.index_ddl(space, space.index_name))
    conn.execute("DELETE FROM kb_meta WHERE key IN ('embedding_dimension', 'embedding_model')")


#: The migration after which kb_chunks' storage is :data:`ROW_STORAGE`.
_ROW_STORAGE_VERSION = 10
#: kb_chunks' storage (migration 0010): every column that a search or a write reads by row
#: stays in the heap row (tsv too: ``store.fulltext``), only the two long texts (``text``,
#: ``search_prefix``) leave it when a row passes 2 kB. A column stored MAIN still goes out of
#: line when the row would not fit a page (a large embedding), never before.
ROW_STORAGE = {column: "MAIN" for column in (
    "tenant_id", "project_key", "heading_path", "text_hash", "metadata", "embedding",
    "chunk_uid", "fts_lang")}


def _row_storage(conn: psycopg.Connection) -> None:
    """After 0010: :data:`ROW_STORAGE` (on Citus, the coordinator's table; :func:`migrate` sets
    the shards' after the commit)."""
    distribution.set_storage(conn, "kb_chunks", ROW_STORAGE)


#: Steps in Python that follow a migration's SQL, in its transaction.
_AFTER: dict[int, Any] = {7: _tsv_by_language, 8: _models,
                          _ROW_STORAGE_VERSION: _row_storage}


class Choices(NamedTuple):
    """What a knowledge base brings to its database: the embedder's model and dimension (its
    space, created at first use: ``store/spaces.py``), and the default full-text language
    (fixed at first use)."""

    dimension: int
    model_id: str
    fts_language: str
    #: False: a knowledge base opened to list and delete finds the model's space, if any,
    #: and creates none (no index is built for a model that only reads the catalog).
    register: bool = True


@contextlib.contextmanager
def _as_migrator(conn: psycopg.Connection) -> Iterator[None]:
    """A transaction under the migrators' lock, with no statement timeout: a migration or the
    tsv rebuild is maintenance work, as a bulk load is (15 min at a million chunks, decision
    0022), that a role's, database's or borrowed pool's ``statement_timeout`` must not cancel
    on every open; the processes that wait for the lock wait for the migration."""
    with conn.transaction():
        conn.execute("SET LOCAL statement_timeout = 0")
        conn.execute("SELECT pg_advisory_xact_lock(%s)", [_LOCK_KEY])
        yield


def prepare(conn: psycopg.Connection, choices: Choices, settings: Settings
            ) -> spaces.Space | None:
    """Migrate, fix or check the full-text language (:func:`ensure_fixed_choices`), find or
    create the embedder's space, then distribute the tables on a Citus coordinator
    (``store/distribution.py``): last, so that a new database's tables are complete (tsv stored
    in the row, indexes) when Citus copies their definition to the shards. The space."""
    try:
        migrate(conn)
        ensure_fixed_choices(conn, fts_language=choices.fts_language)
        later = choices.register and _builds_later(conn, settings)
        with _as_migrator(conn):
            space = (spaces.ensure(conn, choices.model_id, choices.dimension, settings,
                                   build=not later)
                     if choices.register else
                     spaces.find(conn, choices.model_id, choices.dimension))
            distribution.distribute(conn)
        if later and space is not None:
            space = spaces.build_missing_index(conn, space, settings)
    except psycopg.errors.InsufficientPrivilege as exc:
        # A role granted only reads and writes opens a database that is set up; setting it up
        # (the tables, a migration, a new embedding model's index) takes its owner.
        reason = str(exc).strip().splitlines()[0]
        raise SchemaError(
            f"this role may not set up the knowledge base ({reason}): open it once as the role "
            "that owns its tables (the first one needs CREATE on the schema), which creates "
            "them, applies migrations and builds each embedding model's index"
        ) from None
    return space


# Whether this role may build kb_chunks' indexes (its owner), and the table holds chunks.
_OWNS_CHUNKS = ("SELECT pg_has_role(c.relowner, 'USAGE'), EXISTS (SELECT 1 FROM kb_chunks) "
                "FROM pg_class c WHERE c.oid = 'kb_chunks'::regclass")


def _builds_later(conn: psycopg.Connection, settings: Settings) -> bool:
    """Whether the embedder's index is built (or mended) after the registration commits,
    concurrently (``spaces.build_missing_index``): on a table that holds chunks (a plain build
    held writes back while it scanned them all), by a role that may build it (the tables'
    owner: a role of reads and writes only gets the :class:`SchemaError` of a new model, and
    opens with a missing index as it did), on a connection in autocommit (a borrowed one may
    not be), not through a transaction pooler (a session lock) and not on Citus (the plain
    build, as the tables were distributed)."""
    return (conn.autocommit and not settings.transaction_pooler and not distribution.is_citus(conn)
            and conn.execute(_OWNS_CHUNKS).fetchone() == (True, True))


def check_current(conn: psycopg.Connection, choices: Choices) -> spaces.Space | None:
    """On a read-only server (a replica while the primary is down): the schema must be the
    library's current one and know the embedder's model; a :class:`SchemaError` says what
    differs. The embedder's space."""
    latest, have = latest_version(), stored_version(conn)
    if have != latest:
        raise SchemaError(f"this server holds schema version {have}, the library needs {latest}: "
                          "open the knowledge base with its primary reachable to migrate it")
    space = spaces.find(conn, choices.model_id, choices.dimension)
    if space is None and choices.register:
        raise SchemaError(f"this database has never stored {choices.dimension}-d embeddings of "
                          f"{choices.model_id!r}: open the knowledge base once with its primary "
                          "reachable")
    return space


def refuse_newer(version: int) -> None:
    """A :class:`SchemaError` when a newer kb-retriever migrated the database past the versions
    this one knows: run on, this one would write what the newer schema does not expect (a
    rolling upgrade; docs/scaling.md, "Upgrading")."""
    latest = latest_version()
    if version > latest:
        raise SchemaError(f"this database's schema is version {version}, newer than the "
                          f"{latest} this kb-retriever knows: a newer kb-retriever migrated it; "
                          "upgrade this one (pip install -U kb-retriever)")


def latest_version() -> int:
    """The newest schema version this kb-retriever knows (its last migration's)."""
    return max(v for v, _, _ in migration_files())


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
    with _as_migrator(conn):
        try:  # only when missing: on Citus the statement goes to every worker, and a knowledge
            # base could not open while one was down, whichever worker held its tenant
            if conn.execute("SELECT FROM pg_extension WHERE extname = 'vector'").fetchone() is None:
                conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        except psycopg.Error as exc:
            raise SchemaError(
                "the database has no pgvector extension (CREATE EXTENSION vector failed): "
                f"{str(exc).strip().splitlines()[0]}"
            ) from None
        # Only when missing: PostgreSQL checks the CREATE privilege before IF NOT EXISTS, so a
        # role granted only reads and writes on a migrated database could not open it.
        if conn.execute("SELECT to_regclass('kb_meta')").fetchone() == (None,):
            conn.execute("CREATE TABLE kb_meta (key text PRIMARY KEY, value text NOT NULL)")
        current = before = stored_version(conn)
        refuse_newer(current)
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
    # Citus propagates no SET STORAGE: each shard's, after the commit
    if before < _ROW_STORAGE_VERSION <= current:
        distribution.set_shard_storage(conn, "kb_chunks", ROW_STORAGE)
    return current


def read_meta(conn: psycopg.Connection) -> dict[str, str]:
    return dict(conn.execute("SELECT key, value FROM kb_meta").fetchall())


def stored_version(conn: psycopg.Connection) -> int:
    """The schema version the database holds (0: none migrated yet)."""
    row = conn.execute("SELECT value FROM kb_meta WHERE key = 'schema_version'").fetchone()
    return int(row[0]) if row else 0


def ensure_fixed_choices(conn: psycopg.Connection, *, fts_language: str) -> None:
    """Fix the default full-text language at first use; refuse a mismatch later. Each chunk is
    indexed with its document's language's configuration (``store.fulltext``), this default
    when it has none; a column built for fewer languages than this server has is built again
    (:func:`_refresh_tsv`). (The embedding model is no longer fixed per database: each project
    has its own, ``store/spaces.py``.)"""
    if fts_language not in FTS_LANGUAGES:  # allow-list: it becomes an SQL literal below
        raise SchemaError(f"unknown FTS language {fts_language!r}")
    with _as_migrator(conn):
        rebuilt = _fix_language(conn, fts_language)
    if rebuilt:  # on Citus, the storage of the shards' new column, after the commit
        distribution.set_shard_storage(conn, "kb_chunks", ENGINE.storage)


def _fix_language(conn: psycopg.Connection, fts_language: str) -> bool:
    """:func:`ensure_fixed_choices`' work, in its transaction: whether the tsv column was built
    again."""
    meta = read_meta(conn)
    have = meta.get("fts_language")
    if have is not None:
        if have != fts_language:
            raise SchemaError(
                f"this database's full-text index uses {have!r}; "
                f"KB_FTS_LANGUAGE is {fts_language!r}. Set KB_FTS_LANGUAGE to match."
            )
        return _refresh_tsv(conn, have, meta.get("fts_configs"))
    if fts_language != "simple" and fts_language not in text_configs(conn).values():
        raise SchemaError(f"this server has no text search configuration {fts_language!r} "
                          "(KB_FTS_LANGUAGE): PostgreSQL 16 added Armenian, Basque, Catalan, "
                          "Hindi, Serbian and Yiddish, a later one Estonian")
    add_tsv(conn, fts_language)
    conn.execute("INSERT INTO kb_meta (key, value) VALUES ('fts_language', %s)", [fts_language])
    return False
