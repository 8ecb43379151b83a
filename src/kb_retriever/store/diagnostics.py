"""What ``kb-retriever doctor`` reads: the scope's size, the indexes and their validity, the
tables' sizes, and nearest neighbours by the approximate index and by an exact scan (pgvector
README, "Monitoring").

:func:`connect` opens a :class:`Diagnostics` session on a database kb-retriever has written.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from typing import Any, NamedTuple

import psycopg
from pgvector.psycopg import register_vector
from psycopg import sql

from ..errors import ConfigError, InputError, SchemaError
from ..settings import Settings
from .connection import pooler_kwargs, translated
from .distribution import Distribution, describe, is_citus
from .schema import latest_version, refuse_newer, stored_version
from .session import Session
from .spaces import Space, project_space, rebuild_index

__all__ = ["Diagnostics", "IndexState", "connect"]



def _approx(space: Space) -> sql.Composed:
    """The scope's ``k`` nearest by the space's index, as the vector leg reads them."""
    return sql.SQL(
        "WITH v AS MATERIALIZED (SELECT id, {dist} AS d FROM kb_chunks "
        "WHERE tenant_id = %(tenant)s AND project_key = %(project)s AND model = {id} "
        "ORDER BY d LIMIT %(k)s) SELECT id FROM v ORDER BY d + 0, id"
    ).format(dist=space.distance("embedding", "q"), id=space.literal)


def _exact(space: Space) -> sql.Composed:
    """The scope's ``k`` nearest by full-precision distance over every row."""
    return sql.SQL(
        "SELECT id FROM kb_chunks WHERE tenant_id = %(tenant)s AND project_key = %(project)s "
        "AND model = {id} ORDER BY embedding <=> %(q)s, id LIMIT %(k)s").format(id=space.literal)


_INDEXES = (
    "SELECT c.relname AS name, am.amname AS method, i.indisvalid AS valid, "
    "i.indisready AS ready, pg_relation_size(c.oid) AS bytes "
    "FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_am am ON am.oid = c.relam "
    "WHERE i.indrelid = 'kb_chunks'::regclass ORDER BY c.relname"
)


# On Citus, each kb_chunks shard's indexes (a shard's index is named after the
# coordinator's, with the shard's id after it): [name, valid, ready, bytes] per index.
_SHARD_INDEXES = (
    "SELECT shardid, success, result FROM run_command_on_shards('kb_chunks', $$SELECT "
    "coalesce(json_agg(json_build_array(c.relname, i.indisvalid, i.indisready, "
    "pg_relation_size(c.oid))), '[]') FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
    "WHERE i.indrelid = '%s'::regclass$$)"
)


class IndexState(NamedTuple):
    """An index of kb_chunks. On Citus its validity, readiness and size are its shards' (all
    valid, all ready, the sum), ``shards`` counts them and ``shards_without`` those where it is
    missing, invalid or could not be read; on one server both are 0."""

    name: str
    method: str
    valid: bool
    ready: bool
    bytes: int
    shards: int = 0
    shards_without: int = 0


@contextlib.contextmanager
def connect(url: str, settings: Settings | None = None) -> Iterator[Diagnostics]:
    """A :class:`Diagnostics` session on ``url`` (behind a transaction pooler, as ``settings``
    say: nothing prepared); an :class:`InputError` when the database holds no kb-retriever
    schema."""
    kwargs = pooler_kwargs(settings) if settings is not None else {}
    with translated(), psycopg.connect(url, autocommit=True, connect_timeout=10,
                                       **kwargs) as conn:
        has = conn.execute("SELECT to_regclass('kb_chunks') IS NOT NULL").fetchone()
        if not has or not has[0]:
            raise InputError("this database has no kb-retriever schema yet (run ingest first)")
        _current_schema(conn)
        register_vector(conn)
        yield Diagnostics(conn, distributed=is_citus(conn))


def _current_schema(conn: psycopg.Connection[Any]) -> None:
    """The doctor reads the current schema only: an older one is migrated by any other command
    (which opens the knowledge base), a newer one by a newer kb-retriever."""
    have, latest = stored_version(conn), latest_version()
    refuse_newer(have)
    if have < latest:
        raise SchemaError(f"this database's schema is version {have}, older than this "
                          f"kb-retriever's {latest}: any other command (search, ingest) "
                          "migrates it when it opens the knowledge base")


class Diagnostics(Session):
    """The doctor's reads (see the module docstring)."""

    def distribution(self) -> Distribution:
        """Whether the database is distributed by Citus, and how."""
        return describe(self.conn)

    def chunks_in_scope(self, tenant: str, project: str) -> int:
        row = self.conn.execute("SELECT count(*) FROM kb_chunks WHERE tenant_id = %s "
                                "AND project_key = %s", [tenant, project]).fetchone()
        return int(row[0]) if row else 0

    def indexes(self) -> list[IndexState]:
        """kb_chunks' indexes: name, access method, validity, size (on Citus, its shards':
        the coordinator holds empty shells, valid whatever the shards hold)."""
        shells = [IndexState(str(n), str(m), bool(v), bool(r), int(b))
                  for n, m, v, r, b in self.conn.execute(_INDEXES).fetchall()]
        if not self.distributed:
            return shells
        shards = self._shard_indexes()
        out = []
        for shell in shells:
            states = [shard.get(shell.name) for shard in shards]
            held = [s for s in states if s is not None]
            without = sum(1 for s in states if s is None or not s[0])
            out.append(shell._replace(
                valid=shell.valid and not without,
                ready=shell.ready and len(held) == len(states) and all(s[1] for s in held),
                bytes=sum(s[2] for s in held), shards=len(states), shards_without=without))
        return out

    def _shard_indexes(self) -> list[dict[str, tuple[bool, bool, int]]]:
        """Per kb_chunks shard, its indexes by the coordinator's name: (valid, ready, bytes);
        a shard that could not be read holds none."""
        out: list[dict[str, tuple[bool, bool, int]]] = []
        for shard, success, result in self.conn.execute(_SHARD_INDEXES).fetchall():
            suffix = f"_{shard}"
            out.append({str(n).removesuffix(suffix): (bool(v), bool(r), int(b))
                        for n, v, r, b in (json.loads(result) if success else [])})
        return out

    def relation_size(self, relation: str) -> int:
        """Bytes of ``relation`` with its indexes and TOAST (a name of our own tables; on
        Citus, of all its shards)."""
        size = "citus_total_relation_size" if self.distributed else "pg_total_relation_size"
        row = self.conn.execute(f"SELECT {size}(%s::regclass)",  # one of the two names above
                                [relation]).fetchone()
        return int(row[0]) if row else 0

    def shared_buffers(self) -> int:
        """Bytes of the server's ``shared_buffers`` (on Citus, the coordinator's)."""
        row = self.conn.execute("SELECT setting::bigint * current_setting('block_size')::bigint "
                                "FROM pg_settings WHERE name = 'shared_buffers'").fetchone()
        return int(row[0]) if row else 0

    def project_space(self, tenant: str, project: str) -> Space | None:
        """The embedding model the project's chunks are of (None: it holds none)."""
        return project_space(self.conn, tenant, project)

    def rebuild_index(self, space: Space, settings: Settings) -> Space:
        """Build the space's index again with ``settings`` (``spaces.rebuild_index``): on a
        direct connection, its session lock and settings span many transactions."""
        if settings.transaction_pooler:
            raise ConfigError("doctor --reindex holds a session lock and sets its memory for "
                              "the session, which a transaction pooler gives to other "
                              "clients: run it on a direct connection to the server "
                              "(--database-url, KB_TRANSACTION_POOLER unset)")
        return rebuild_index(self.conn, space, settings)

    def plan_index(self, tenant: str, project: str, space: Space, vector: Any, k: int) -> str | None:
        """The index the planner picks for the scope's approximate read (None: none, an exact
        scan), as the vector leg would run it."""
        explain = sql.SQL("EXPLAIN (FORMAT JSON) {}").format(_approx(space))
        row = self.conn.execute(explain, {"tenant": tenant, "project": project, "q": vector,
                                          "k": k}).fetchone()
        names: list[str] = []

        def walk(node: Any) -> None:
            if isinstance(node, dict):
                if "Index Name" in node:
                    names.append(str(node["Index Name"]))
                for value in node.values():
                    walk(value)
            elif isinstance(node, list):
                for value in node:
                    walk(value)

        walk(row[0] if row else [])
        hnsw = [n for n in names if n.startswith("kb_chunks_hnsw")]
        return hnsw[0] if hnsw else None

    def sample(self, tenant: str, project: str, n: int) -> list[tuple[int, Any]]:
        """(chunk id, embedding) of ``n`` chunks of the scope, the same on every run."""
        # (one transaction: through a transaction pooler, the seed's server connection)
        with self.conn.transaction(), self.conn.cursor(binary=True) as cur:  # vectors
            cur.execute("SELECT setseed(0.42)")
            return [(int(i), v) for i, v in cur.execute(
                "SELECT id, embedding FROM kb_chunks WHERE tenant_id = %(tenant)s "
                "AND project_key = %(project)s ORDER BY random() LIMIT %(n)s",
                {"tenant": tenant, "project": project, "n": n}).fetchall()]

    def nearest(self, tenant: str, project: str, space: Space, vector: Any, k: int, *,
                exact: bool, ef_search: int) -> tuple[list[int], float]:
        """The ``k`` chunk ids nearest ``vector`` in the scope, by the HNSW index (with the
        library's settings) or by an exact scan, and the milliseconds it took."""
        local = ([("enable_indexscan", "off")] if exact else
                 [("hnsw.ef_search", str(int(ef_search))),
                  ("hnsw.iterative_scan", "relaxed_order")])
        if self.distributed:  # SET LOCAL statements reach the worker that runs the shard's query
            local.insert(0, ("citus.propagate_set_commands", "local"))
        params = {"tenant": tenant, "project": project, "q": vector, "k": k}
        t = time.perf_counter()
        with self.conn.transaction():
            for name, value in local:  # SET LOCAL: gone when the transaction ends
                self.conn.execute(sql.SQL("SET LOCAL {} = {}").format(
                    sql.SQL(name), sql.Literal(value)))  # names from the lists above
            rows = self.conn.execute(_exact(space) if exact else _approx(space),
                                     params).fetchall()
        return [int(r[0]) for r in rows], (time.perf_counter() - t) * 1000
