"""Embedding models in one database (migration 0008, decision 0013).

Each embedding model, an id and a dimension, is a *space*: a row of ``kb_models`` with an
approximate index of its own, a partial HNSW index over ``embedding::vector(d)`` (or
``::halfvec(d)``) for the chunks of that model only. The ``embedding`` column is untyped, so
chunks of several dimensions share one table. Each project is bound to one space in
``kb_projects``: the project's writes and searches use it, and :func:`move_project` re-embeds a
project into another.

A search orders by the space's indexed expression (:meth:`Space.distance`) and names the space
as a literal (``c.model = 3``), so PostgreSQL matches the partial index.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import psycopg
from psycopg import sql

from ..errors import ConfigError, InputError, SchemaError
from ..settings import Settings

__all__ = ["HNSW_MAX_HALFVEC", "HNSW_MAX_VECTOR", "Space", "bind", "check", "ensure", "find",
           "graph_memory_mb", "index_ddl", "index_memory", "index_type_for", "matching",
           "move_project", "project_space", "rebuild_index"]

logger = logging.getLogger(__name__)

#: pgvector's HNSW limits: ``vector`` up to 2,000 dimensions, ``halfvec`` up to 4,000.
HNSW_MAX_VECTOR = 2000
HNSW_MAX_HALFVEC = 4000

_COLUMNS = "id, model_id, dimension, index_type, index_name, hnsw_m, hnsw_ef_construction"


@dataclass(frozen=True)
class Space:
    """One embedding model's place in the database: its row in ``kb_models``."""

    id: int
    model_id: str
    dimension: int
    index_type: str  # "vector", "halfvec" or "none" (searches scan exactly)
    index_name: str | None = None
    m: int | None = None
    ef_construction: int | None = None

    def _cast(self, expr: sql.Composable) -> sql.Composable:
        if self.index_type == "none":
            return expr
        return sql.SQL("({}::{}({}))").format(expr, sql.SQL(self.index_type),
                                              sql.Literal(self.dimension))

    def indexed(self, column: str = "c.embedding") -> sql.Composable:
        """The expression the space's index holds, over ``column``."""
        return self._cast(sql.SQL(column))

    def distance(self, column: str = "c.embedding", param: str = "qvec") -> sql.Composable:
        """The cosine distance from the bound vector ``param`` in the index's type: the form
        an ``ORDER BY ... LIMIT`` needs to use the index."""
        return sql.SQL("{} <=> {}").format(self.indexed(column),
                                           self._cast(sql.Placeholder(param)))

    @property
    def literal(self) -> sql.Composable:
        return sql.Literal(self.id)

    def describe(self) -> str:
        index = ("no approximate index (exact scans)" if self.index_type == "none" else
                 f"HNSW on {self.index_type}({self.dimension}) {self.index_name} "
                 f"(m={self.m}, ef_construction={self.ef_construction})")
        return f"{self.model_id} ({self.dimension}-d): {index}"


def index_type_for(dimension: int, settings: Settings) -> str:
    """The indexed type ``KB_HNSW_TYPE`` asks for at ``dimension`` ("none": too many
    dimensions for any HNSW index); a choice pgvector cannot index is a :class:`ConfigError`."""
    kind = settings.hnsw_type
    if kind == "vector" and dimension > HNSW_MAX_VECTOR:
        raise ConfigError(f"KB_HNSW_TYPE=vector indexes up to {HNSW_MAX_VECTOR} dimensions; this "
                          f"model makes {dimension}: use halfvec or auto")
    if kind == "auto":
        kind = "vector" if dimension <= HNSW_MAX_VECTOR else "halfvec"
    if dimension > HNSW_MAX_HALFVEC:
        return "none"
    return kind


def _space(row: Sequence[Any]) -> Space:
    return Space(int(row[0]), str(row[1]), int(row[2]), str(row[3]),
                 None if row[4] is None else str(row[4]),
                 None if row[5] is None else int(row[5]),
                 None if row[6] is None else int(row[6]))


def find(conn: psycopg.Connection[Any], model_id: str, dimension: int) -> Space | None:
    row = conn.execute(f"SELECT {_COLUMNS} FROM kb_models WHERE model_id = %s AND dimension = %s",
                       [model_id, dimension]).fetchone()
    return None if row is None else _space(row)


def by_id(conn: psycopg.Connection[Any], space_id: int) -> Space | None:
    row = conn.execute(f"SELECT {_COLUMNS} FROM kb_models WHERE id = %s", [space_id]).fetchone()
    return None if row is None else _space(row)


def matching(conn: psycopg.Connection[Any], model_id: str | None, dimension: int) -> Space:
    """The space of ``model_id`` at ``dimension``, or, without a model id, the only space of
    that dimension; a :class:`SchemaError` when there is none, an :class:`InputError` when
    several would fit."""
    if model_id is not None:
        found = find(conn, model_id, dimension)
        if found is None:
            raise SchemaError(f"this database has no {dimension}-d model {model_id!r}: open a "
                              "KnowledgeBase with that embedder once first")
        return found
    rows = conn.execute(f"SELECT {_COLUMNS} FROM kb_models WHERE dimension = %s ORDER BY id",
                        [dimension]).fetchall()
    if not rows:
        raise SchemaError(f"this database has no model of {dimension}-d embeddings: open a "
                          "KnowledgeBase with that embedder once first")
    if len(rows) > 1:
        names = ", ".join(repr(str(r[1])) for r in rows)
        raise InputError(f"several {dimension}-d models ({names}): say which with model_id=")
    return _space(rows[0])


def index_ddl(space: Space, name: str, *, concurrently: bool = False) -> sql.Composed:
    """``CREATE INDEX`` of the space's partial HNSW index, named ``name``."""
    return sql.SQL(
        "CREATE INDEX {conc}{name} ON kb_chunks USING hnsw ({expr} {ops}) "
        "WITH (m = {m}, ef_construction = {efc}) WHERE model = {id}"
    ).format(conc=sql.SQL("CONCURRENTLY " if concurrently else ""), name=sql.Identifier(name),
             expr=space.indexed("embedding"), ops=sql.SQL(f"{space.index_type}_cosine_ops"),
             m=sql.Literal(space.m), efc=sql.Literal(space.ef_construction),
             id=space.literal)


def ensure(conn: psycopg.Connection[Any], model_id: str, dimension: int,
           settings: Settings, *, build: bool = True) -> Space:
    """The space of (``model_id``, ``dimension``), created with its index on first use (call
    inside the migrators' transaction and lock; ``build=False``: the index is left to
    :func:`build_missing_index`, after the transaction)."""
    found = find(conn, model_id, dimension)
    if found is not None:
        return found
    kind = index_type_for(dimension, settings)
    row = conn.execute("SELECT coalesce(max(id), 0) + 1 FROM kb_models").fetchone()
    new_id = int(row[0]) if row else 1
    space = Space(new_id, model_id, dimension, kind,
                  None if kind == "none" else f"kb_chunks_hnsw_{new_id}",
                  None if kind == "none" else settings.hnsw_m,
                  None if kind == "none" else settings.hnsw_ef_construction)
    conn.execute("INSERT INTO kb_models (id, model_id, dimension, index_type, index_name, "
                 "hnsw_m, hnsw_ef_construction) VALUES (%s, %s, %s, %s, %s, %s, %s)",
                 [space.id, model_id, dimension, kind, space.index_name, space.m,
                  space.ef_construction])
    if space.index_name is None:
        logger.warning("%d-d vectors exceed HNSW's limit (%d with halfvec): searches of %r scan "
                       "exactly", dimension, HNSW_MAX_HALFVEC, model_id)
    elif build:
        conn.execute(index_ddl(space, space.index_name))
    return space


def build_missing_index(conn: psycopg.Connection[Any], space: Space,
                        settings: Settings) -> Space:
    """Build the space's index when it is missing or invalid (``conn`` in autocommit): a new
    model's, registered on a table that holds other models' chunks. Built in the
    registration's transaction, a plain ``CREATE INDEX`` scanned the whole table under a lock
    that held every write back (tens of seconds at a million chunks); built here, concurrently,
    writes go on. One process builds it (the rebuilds' lock); the others find it built. The
    space as it is now."""
    if space.index_name is None or _valid(conn, space.index_name):
        return space
    with _rebuild_lock(conn, space.id):
        current = by_id(conn, space.id) or space
        if current.index_name is None or _valid(conn, current.index_name):
            return current
        return _rebuild(conn, current, settings)


def _valid(conn: psycopg.Connection[Any], name: str) -> bool:
    return conn.execute("SELECT coalesce((SELECT indisvalid FROM pg_index WHERE indexrelid = "
                        "to_regclass(%s)), false)", [name]).fetchone() == (True,)


# --- projects ------------------------------------------------------------------------------
_BOUND = "SELECT model FROM kb_projects WHERE tenant_id = %s AND project_key = %s"
_HAS_CHUNKS = "SELECT EXISTS (SELECT 1 FROM kb_chunks WHERE tenant_id = %s AND project_key = %s)"


def project_space(conn: psycopg.Connection[Any], tenant: str, project: str) -> Space | None:
    """The space the project is bound to (None: it holds nothing yet)."""
    row = conn.execute(_BOUND, [tenant, project]).fetchone()
    return None if row is None else by_id(conn, int(row[0]))


def _foreign(conn: psycopg.Connection[Any], project: str, bound: int, space: Space
             ) -> SchemaError:
    other = by_id(conn, bound)
    name = f"{other.model_id!r} ({other.dimension}-d)" if other else f"model {bound}"
    return SchemaError(
        f"project {project!r} is embedded with {name}; this knowledge base embeds with "
        f"{space.model_id!r} ({space.dimension}-d). Open it with that embedder, or move the "
        "project to this one with KnowledgeBase.reembed()")


def check(conn: psycopg.Connection[Any], tenant: str, project: str, space: Space) -> None:
    """Raise before a write when the project holds chunks of another model (:func:`bind`
    decides inside the write's transaction; this only reports early)."""
    row = conn.execute(_BOUND, [tenant, project]).fetchone()
    if row is not None and int(row[0]) != space.id:
        has = conn.execute(_HAS_CHUNKS, [tenant, project]).fetchone()
        if has and has[0]:
            raise _foreign(conn, project, int(row[0]), space)


def bind(conn: psycopg.Connection[Any], tenant: str, project: str, space: Space) -> None:
    """Bind the project to ``space`` inside the caller's write transaction, or raise a
    :class:`SchemaError` when it holds chunks of another model.

    Writers share the project row (``FOR KEY SHARE``, as a foreign key check would), so they
    never wait for each other; :func:`move_project` takes it ``FOR UPDATE`` and so waits for
    them, and they for it. A project left without chunks takes the writer's model. A writer of
    another model than a project's with chunks is refused under the shared lock: taking the
    row ``FOR UPDATE`` there would deadlock every such writer with the others that share it
    (after a move, all the old model's writers at once).
    """
    shared = _BOUND + " FOR KEY SHARE"
    row = conn.execute(shared, [tenant, project]).fetchone()
    if row is None:
        conn.execute("INSERT INTO kb_projects (tenant_id, project_key, model) VALUES (%s, %s, %s) "
                     "ON CONFLICT DO NOTHING", [tenant, project, space.id])
        row = conn.execute(shared, [tenant, project]).fetchone()
    if row is not None and int(row[0]) == space.id:
        return
    has = conn.execute(_HAS_CHUNKS, [tenant, project]).fetchone()
    if row is not None and has and has[0]:
        raise _foreign(conn, project, int(row[0]), space)
    row = conn.execute(_BOUND + " FOR UPDATE", [tenant, project]).fetchone()
    bound = int(row[0]) if row else space.id
    if bound == space.id:
        return
    has = conn.execute(_HAS_CHUNKS, [tenant, project]).fetchone()
    if has and has[0]:
        raise _foreign(conn, project, bound, space)
    conn.execute("UPDATE kb_projects SET model = %s WHERE tenant_id = %s AND project_key = %s",
                 [space.id, tenant, project])


# --- maintenance ---------------------------------------------------------------------------
# Each space's chunks and dimension; before migration 0008 (a migration's own rebuild) the one
# model's, with no kb_models yet.
_SPACE_SIZES = (
    "SELECT c.n, m.dimension FROM kb_models m JOIN (SELECT model, count(*) AS n FROM kb_chunks "
    "WHERE %(model)s::int IS NULL OR model = %(model)s GROUP BY model) c ON c.model = m.id")
_ONE_MODEL_SIZE = "SELECT count(*), coalesce(max(vector_dims(embedding)), 0) FROM kb_chunks"


def graph_memory_mb(rows: int, dimension: int) -> int:
    """The ``maintenance_work_mem`` (MB) in which the HNSW graph of ``rows`` vectors of
    ``dimension`` is built: about twice their bytes, 64 MB to 4 GB.

    >>> graph_memory_mb(1_000_000, 384), graph_memory_mb(100, 384), graph_memory_mb(10**8, 768)
    (3417, 64, 4096)
    """
    return max(64, min(rows * (dimension * 4 + 256) * 2 // (1024 * 1024), 4096))


def index_memory(conn: psycopg.Connection[Any], model: int | None = None) -> int:
    """Set ``maintenance_work_mem`` so that the HNSW graph of space ``model`` (None: of the
    largest space) is built in memory (:func:`graph_memory_mb`). A graph that does not fit is
    built on disk, many times slower (reference/postgres-performance.md §3.2; decision 0022's
    rebuild). For the transaction when ``conn`` is in one, else for the session; the megabytes
    set."""
    spaces_made = conn.execute("SELECT to_regclass('kb_models')").fetchone() != (None,)
    sizes = conn.execute(_SPACE_SIZES, {"model": model}) if spaces_made else conn.execute(
        _ONE_MODEL_SIZE)
    # no chunks yet: the floor, as graph_memory_mb gives it
    mb = max((graph_memory_mb(int(n), int(dim)) for n, dim in sizes), default=graph_memory_mb(0, 0))
    local = conn.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
    conn.execute("SELECT set_config('maintenance_work_mem', %s, %s)", [f"{mb}MB", local])
    return mb


_REBUILD_LOCK = "SELECT pg_try_advisory_lock(hashtextextended('kb-reindex:' || %s, 0))"
_REBUILD_POLL_S = 0.25
_REBUILD_UNLOCK = "SELECT pg_advisory_unlock(hashtextextended('kb-reindex:' || %s, 0))"
# Whether the index a rebuild builds (%(new)s) is the space's only one: a rebuild stopped
# between the old index's drop and the rename.
_ONLY_NEW = ("SELECT to_regclass(%(name)s) IS NULL AND coalesce((SELECT indisvalid FROM pg_index "
             "WHERE indexrelid = to_regclass(%(new)s)), false)")


def rebuild_index(conn: psycopg.Connection[Any], space: Space, settings: Settings) -> Space:
    """Build the space's index again with the settings' ``m``, ``ef_construction`` and type
    (``conn`` in autocommit): the new index is built concurrently beside the old one, which
    serves searches meanwhile and is dropped after; writes are never blocked. Returns the space
    as it is now.

    Two rebuilds of one space run one after the other (a session lock; the second rebuilds
    what the first left). It is tried, not waited for: a statement waiting on a lock holds
    a snapshot, and the first rebuild's ``CREATE INDEX CONCURRENTLY`` waits for every
    snapshot (a deadlock). A rebuild that stopped after the old index's drop left the new one
    under its building name: it is renamed first, so searches keep an index throughout."""
    with _rebuild_lock(conn, space.id):
        return _rebuild(conn, by_id(conn, space.id) or space, settings)


@contextlib.contextmanager
def _rebuild_lock(conn: psycopg.Connection[Any], space_id: int) -> Iterator[None]:
    """The session lock that keeps two builds of one space's index apart, tried in a loop
    (see :func:`rebuild_index`)."""
    while conn.execute(_REBUILD_LOCK, [str(space_id)]).fetchone() != (True,):
        time.sleep(_REBUILD_POLL_S)
    try:
        yield
    finally:
        if not conn.broken:
            conn.execute(_REBUILD_UNLOCK, [str(space_id)])


def _rebuild(conn: psycopg.Connection[Any], space: Space, settings: Settings) -> Space:
    kind = index_type_for(space.dimension, settings)
    new = Space(space.id, space.model_id, space.dimension, kind,
                None if kind == "none" else f"kb_chunks_hnsw_{space.id}",
                None if kind == "none" else settings.hnsw_m,
                None if kind == "none" else settings.hnsw_ef_construction)
    building = f"kb_chunks_hnsw_{space.id}_new"
    if space.index_name is not None and conn.execute(
            _ONLY_NEW, {"name": space.index_name, "new": building}).fetchone() == (True,):
        conn.execute(sql.SQL("ALTER INDEX {} RENAME TO {}").format(
            sql.Identifier(building), sql.Identifier(space.index_name)))
    conn.execute(sql.SQL("DROP INDEX CONCURRENTLY IF EXISTS {}").format(
        sql.Identifier(building)))  # a build that failed before leaves an invalid index
    if new.index_name is not None:
        index_memory(conn, space.id)
        conn.execute(index_ddl(new, building, concurrently=True))
    if space.index_name is not None:
        conn.execute(sql.SQL("DROP INDEX CONCURRENTLY IF EXISTS {}").format(
            sql.Identifier(space.index_name)))
    if new.index_name is not None:
        conn.execute(sql.SQL("ALTER INDEX {} RENAME TO {}").format(
            sql.Identifier(building), sql.Identifier(new.index_name)))
    conn.execute("UPDATE kb_models SET index_type = %s, index_name = %s, hnsw_m = %s, "
                 "hnsw_ef_construction = %s WHERE id = %s",
                 [new.index_type, new.index_name, new.m, new.ef_construction, new.id])
    return new


_PROJECT_CHUNKS = ("SELECT id, text_hash, text FROM kb_chunks WHERE tenant_id = %s "
                   "AND project_key = %s AND id > %s ORDER BY id LIMIT %s")
_SET_VECTOR = ("UPDATE kb_chunks SET embedding = %s, model = %s "
               "WHERE tenant_id = %s AND id = %s")


def project_chunks(conn: psycopg.Connection[Any], tenant: str, project: str,
                   batch: int = 1000) -> list[tuple[int, str, str]]:
    """(id, text hash, text) of every chunk of the project, read by keyset in batches."""
    out: list[tuple[int, str, str]] = []
    last = 0
    while True:
        rows = conn.execute(_PROJECT_CHUNKS, [tenant, project, last, batch]).fetchall()
        out += [(int(i), str(h), str(t)) for i, h, t in rows]
        if len(rows) < batch:
            return out
        last = int(rows[-1][0])


def move_project(conn: psycopg.Connection[Any], tenant: str, project: str, space: Space,
                 vectors: dict[str, np.ndarray], embed: Any) -> int:
    """Move the project's chunks to ``space`` in one transaction: each chunk takes the vector
    of its text hash from ``vectors``; a chunk written since those were made is embedded by
    ``embed(texts)`` under the project's lock. Searches see the old model until the commit,
    the new one after; writers of the project wait for it. The chunks moved."""
    with conn.transaction():
        conn.execute("INSERT INTO kb_projects (tenant_id, project_key, model) VALUES (%s, %s, %s) "
                     "ON CONFLICT DO NOTHING", [tenant, project, space.id])
        conn.execute(_BOUND + " FOR UPDATE", [tenant, project])
        chunks = project_chunks(conn, tenant, project)
        late = sorted({h: t for _, h, t in chunks if h not in vectors}.items())
        if late:
            made = embed([t for _, t in late])
            vectors = {**vectors, **dict(zip((h for h, _ in late), made, strict=True))}
        with conn.cursor() as cur:
            cur.executemany(_SET_VECTOR, [(vectors[h], space.id, tenant, i)
                                          for i, h, _ in chunks])
        conn.execute("UPDATE kb_projects SET model = %s WHERE tenant_id = %s AND project_key = %s",
                     [space.id, tenant, project])
    return len(chunks)
