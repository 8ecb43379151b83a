"""Citus: the library's tables distributed by tenant, co-located, when the database has the
``citus`` extension (decision 0012).

Every table that holds tenant data is distributed by ``tenant_id`` in one co-location group
(``kb_documents`` first: the others' foreign keys point at it), so every statement of a one-tenant
search, write or documents call runs on one shard; ``kb_meta`` and ``kb_models``, which hold no
tenant, are reference tables (a copy on every node). Nothing here runs on a database without Citus.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, NamedTuple

import psycopg
from psycopg import sql

from ..errors import SchemaError
from ..settings import Settings

__all__ = ["DISTRIBUTED", "REFERENCE", "Distribution", "describe", "distribute", "is_citus",
           "set_shard_storage", "set_storage", "shard_settings"]

logger = logging.getLogger(__name__)

#: Distributed by tenant_id, co-located with the first.
DISTRIBUTED = ("kb_documents", "kb_chunks", "kb_edges", "kb_synonyms", "kb_embedding_cache",
               "kb_lexemes", "kb_lexeme_log", "kb_scope_stats", "kb_projects")
#: A copy on every node.
REFERENCE = ("kb_meta", "kb_models")


def citus_version(conn: psycopg.Connection[Any]) -> str | None:
    row = conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'citus'").fetchone()
    return None if row is None else str(row[0])


def is_citus(conn: psycopg.Connection[Any]) -> bool:
    return citus_version(conn) is not None


def distribute(conn: psycopg.Connection[Any]) -> None:
    """Distribute the library's tables (those not distributed yet) on a Citus coordinator;
    nothing without Citus. A coordinator without workers is a :class:`SchemaError`."""
    if not is_citus(conn):
        return
    done = {str(r[0]) for r in conn.execute(
        "SELECT logicalrelid::regclass::text FROM pg_dist_partition")}
    if all(t in done for t in (*DISTRIBUTED, *REFERENCE)):
        return
    row = conn.execute("SELECT count(*) FROM pg_dist_node WHERE noderole = 'primary' "
                       "AND isactive AND shouldhaveshards").fetchone()
    if not row or not row[0]:
        raise SchemaError("this Citus coordinator has no node that may hold shards: add workers "
                          "(SELECT citus_add_node(host, port)) or let the coordinator hold them "
                          "(SELECT citus_set_node_property(host, port, 'shouldhaveshards', true))")
    for table in REFERENCE:
        if table not in done:
            conn.execute("SELECT create_reference_table(%s)", [table])
    for table in DISTRIBUTED:
        if table in done:
            continue
        if table == DISTRIBUTED[0]:
            conn.execute("SELECT create_distributed_table(%s, 'tenant_id')", [table])
        else:
            conn.execute("SELECT create_distributed_table(%s, 'tenant_id', "
                         "colocate_with => %s)", [table, DISTRIBUTED[0]])
        logger.info("distributed %s by tenant_id", table)


def set_storage(conn: psycopg.Connection[Any], table: str, storage: Mapping[str, str]) -> None:
    """``ALTER TABLE table ALTER COLUMN column SET STORAGE ...`` for each column of
    ``storage``, in the caller's transaction. Citus propagates no such command: on a distributed
    table this sets the coordinator's table only, and :func:`set_shard_storage`, after the
    commit, its shards."""
    distributed = _is_distributed(conn, table)
    if distributed:
        conn.execute("SET LOCAL citus.enable_ddl_propagation TO off")
    for stmt in _storage(sql.Identifier(table), storage):
        conn.execute(stmt)
    if distributed:
        conn.execute("SET LOCAL citus.enable_ddl_propagation TO on")


def set_shard_storage(conn: psycopg.Connection[Any], table: str,
                      storage: Mapping[str, str]) -> None:
    """:func:`set_storage` on each shard of a distributed ``table``; nothing on another. Not in
    a transaction that changed the shards: Citus runs it on connections of its own, which would
    wait for that transaction's locks."""
    if not _is_distributed(conn, table):
        return
    # run_command_on_shards puts each shard's name where the command has %s
    for stmt in _storage(sql.SQL("%s"), storage):
        command = stmt.as_string(conn)
        failed = [ok for (ok,) in conn.execute(
            "SELECT success FROM run_command_on_shards(%s, %s)", [table, command]) if not ok]
        if failed:
            raise SchemaError(f"{len(failed)} shards of {table} did not take {command!r}")


def _storage(table: sql.Composable, storage: Mapping[str, str]) -> list[sql.Composed]:
    return [sql.SQL("ALTER TABLE {} ALTER COLUMN {} SET STORAGE {}").format(
        table, sql.Identifier(column), sql.SQL(kind)) for column, kind in storage.items()]


def _is_distributed(conn: psycopg.Connection[Any], table: str) -> bool:
    return is_citus(conn) and conn.execute(
        "SELECT 1 FROM pg_dist_partition WHERE logicalrelid = %s::regclass", [table]
    ).fetchone() is not None


def shard_settings(settings: Settings) -> list[sql.Composed]:
    """What a vector read sends first, in its own transaction, on Citus: the HNSW settings as
    ``SET LOCAL`` with ``citus.propagate_set_commands = local``, so that they reach the worker
    that runs the shard's query (a session's ``SET`` stays on the coordinator, and the worker
    would search with pgvector's defaults: ``ef_search`` 40, no iterative scan)."""
    return [sql.SQL("SET LOCAL citus.propagate_set_commands = 'local'").format(),
            sql.SQL("SET LOCAL hnsw.ef_search = {}").format(sql.Literal(int(settings.hnsw_ef_search))),
            sql.SQL("SET LOCAL hnsw.iterative_scan = relaxed_order").format()]


class Distribution(NamedTuple):
    """How a database is distributed, as ``kb-retriever doctor`` reports it."""

    citus: str | None  # the extension's version, None on plain PostgreSQL
    workers: int = 0
    tables: tuple[tuple[str, str, int], ...] = ()  # (table, method, shards)
    colocated: bool = False


def describe(conn: psycopg.Connection[Any]) -> Distribution:
    version = citus_version(conn)
    if version is None:
        return Distribution(None)
    workers = conn.execute("SELECT count(*) FROM pg_dist_node WHERE noderole = 'primary' "
                           "AND isactive AND shouldhaveshards").fetchone()
    rows = conn.execute(
        "SELECT p.logicalrelid::regclass::text, p.partmethod, p.colocationid, "
        "(SELECT count(*) FROM pg_dist_shard s WHERE s.logicalrelid = p.logicalrelid) "
        "FROM pg_dist_partition p WHERE p.logicalrelid::regclass::text = ANY(%s) ORDER BY 1",
        [list((*DISTRIBUTED, *REFERENCE))]).fetchall()
    kinds = {"h": "hash by tenant_id", "n": "reference"}
    groups = {r[2] for r in rows if r[1] == "h"}
    return Distribution(version, int(workers[0]) if workers else 0,
                        tuple((str(t), kinds.get(m, m), int(n)) for t, m, _, n in rows),
                        colocated=len(groups) == 1)
