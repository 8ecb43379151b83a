"""A scope's full-text statistics, kept without triggers and without shared counters in a write.

BM25 needs, per (tenant, project), the number of chunks and how many of them hold each lexeme.
A write appends one row to ``kb_lexeme_log``: the lexemes its chunks added (or removed) and
the chunk count, computed by the same statement that wrote (or deleted) the chunks. Writers
never touch a shared row, so they neither queue nor deadlock on the statistics. After a write
commits, :func:`fold_log` folds the scope's log into ``kb_lexemes`` and ``kb_scope_stats`` in
one transaction, one folder per scope at a time (a try-lock: a busy scope is folded by the next
write). Readers sum the folded counts and the log (``store.catalog_sql.lexeme_stats_sql``), so the
statistics are exact at every moment (decision 0010).

Every statement here names one (tenant, project): on Citus each routes to one shard.
"""

from __future__ import annotations

import logging
from typing import Any

import psycopg
from psycopg import sql

from .fulltext import ENGINE

__all__ = ["aanalyze_if_stale", "afold_log", "analyze_if_stale", "asettle",
           "deleted_chunks_logged", "fold_log", "log_document_chunks", "lexeme_chunks",
           "recount", "recount_every_scope", "scope_lock_key", "settle"]

logger = logging.getLogger(__name__)

_ARRAYS = ("coalesce(array_agg(l.lexeme ORDER BY l.lexeme), ARRAY[]::text[]), "
           "coalesce(array_agg({sign}l.n ORDER BY l.lexeme), ARRAY[]::bigint[])")
_LOG_COLUMNS = "kb_lexeme_log (tenant_id, project_key, chunks, lexemes, deltas)"


def deleted_chunks_logged(where: sql.Composable) -> sql.Composed:
    """CTEs ``gone`` (the chunks ``where`` selects, as ``x``, deleted: their document ids) and
    ``logged`` (their lexemes logged as removed), to open a ``WITH`` statement that ends with its
    own ``SELECT``. Params: tenant, project (the scope of every deleted chunk)."""
    return sql.SQL(
        "gone AS (DELETE FROM kb_chunks x WHERE {where} RETURNING x.document_id, x.{carried}), "
        "logged AS (INSERT INTO " + _LOG_COLUMNS + " SELECT %(tenant)s, %(project)s, "
        "-(SELECT count(*) FROM gone), " + _ARRAYS.format(sign="-") + " FROM "
        "(SELECT u.lexeme, count(*) AS n FROM gone, {lexemes} AS u GROUP BY u.lexeme) l "
        "HAVING (SELECT count(*) FROM gone) > 0)"
    ).format(where=where, carried=ENGINE.carried, lexemes=ENGINE.lexemes("gone"))


#: The chunks of the documents ``%(docs)s`` (of ``%(uids)s`` only, unless NULL) just written,
#: logged as added.
LOG_DOCUMENT_CHUNKS = sql.SQL(
    "WITH mine AS (SELECT c.{carried} FROM kb_chunks c WHERE c.tenant_id = %(tenant)s "
    "AND c.document_id = ANY(%(docs)s) "
    "AND (%(uids)s::text[] IS NULL OR c.chunk_uid = ANY(%(uids)s::text[]))) "
    "INSERT INTO " + _LOG_COLUMNS + " SELECT %(tenant)s, %(project)s, "
    "(SELECT count(*) FROM mine), " + _ARRAYS.format(sign="") + " FROM "
    "(SELECT u.lexeme, count(*) AS n FROM mine, {lexemes} AS u GROUP BY u.lexeme) l "
    "HAVING (SELECT count(*) FROM mine) > 0").format(carried=ENGINE.carried,
                                                      lexemes=ENGINE.lexemes("mine"))


def lexeme_chunks(tenant: sql.Composable, projects: sql.Composable,
                  lexemes: sql.Composable) -> sql.Composed:
    """A relation of ``lexeme`` and ``chunks``: how many chunks of the scope (``tenant``, the
    array ``projects``) hold each lexeme of the array ``lexemes``, exact in the reading
    statement's snapshot: the folded counts plus the log (a write's chunks and its log row
    commit together). An index lookup per lexeme and project, for a search statement."""
    return sql.SQL(
        "(SELECT k.lexeme, sum(k.n) AS chunks FROM (SELECT b.lexeme, b.chunks AS n "
        "FROM kb_lexemes b WHERE b.tenant_id = {tenant} AND b.project_key = ANY({projects}::text[]) "
        "AND b.lexeme = ANY({lexemes}) UNION ALL SELECT u.lexeme, u.n "
        "FROM kb_lexeme_log g, unnest(g.lexemes, g.deltas) AS u(lexeme, n) "
        "WHERE g.tenant_id = {tenant} AND g.project_key = ANY({projects}::text[]) "
        "AND u.lexeme = ANY({lexemes})) k GROUP BY k.lexeme)"
    ).format(tenant=tenant, projects=projects, lexemes=lexemes)


def log_document_chunks(conn: psycopg.Connection[Any], tenant: str, project: str,
                        doc_pks: int | list[int], *, uids: list[str] | None = None) -> None:
    """Log the chunks of ``doc_pks`` (those of ``uids`` only, when given), written in this
    transaction, as added."""
    docs = [doc_pks] if isinstance(doc_pks, int) else doc_pks
    conn.execute(LOG_DOCUMENT_CHUNKS, {"tenant": tenant, "project": project, "docs": docs,
                                       "uids": uids})


# The fold takes the scope's log rows (the DELETE's snapshot decides which: a row committed
# after it stays for the next fold), sums them here and adds the sums to the folded counts, in
# one transaction. Three statements, each on the tenant's shard under Citus: one statement
# whose modifying CTEs fed each other was planned with the deleted rows as an intermediate
# result sent to every worker, so one worker down failed every tenant's folds.
_TAKE = sql.SQL("DELETE FROM kb_lexeme_log WHERE tenant_id = %(tenant)s "
                "AND project_key = %(project)s RETURNING chunks, lexemes, deltas")
_ADD_LEXEMES = sql.SQL(
    "INSERT INTO kb_lexemes AS b (tenant_id, project_key, lexeme, chunks) "
    "SELECT %(tenant)s, %(project)s, u.lexeme, u.n "
    "FROM unnest(%(lexemes)s::text[], %(ns)s::bigint[]) AS u(lexeme, n) ORDER BY u.lexeme "
    "ON CONFLICT (tenant_id, project_key, lexeme) DO UPDATE SET chunks = b.chunks + EXCLUDED.chunks")
_ADD_CHUNKS = sql.SQL(
    "INSERT INTO kb_scope_stats AS s (tenant_id, project_key, chunks) "
    "VALUES (%(tenant)s, %(project)s, %(chunks)s) "
    "ON CONFLICT (tenant_id, project_key) DO UPDATE SET chunks = s.chunks + EXCLUDED.chunks")
_PRUNE = sql.SQL("DELETE FROM kb_lexemes WHERE tenant_id = %(tenant)s "
                 "AND project_key = %(project)s AND chunks <= 0")


def _sums(rows: list[tuple[Any, ...]]) -> dict[str, Any]:
    """The log rows taken, summed: each lexeme's change (those that cancel out left out), the
    chunks'.

    >>> _sums([(2, ["cach", "redi"], [2, 1]), (-1, ["cach"], [-1]), (1, ["redi"], [-1])])
    {'lexemes': ['cach'], 'ns': [1], 'chunks': 2}
    """
    totals: dict[str, int] = {}
    for _, lexemes, deltas in rows:
        for lexeme, delta in zip(lexemes, deltas, strict=True):
            totals[lexeme] = totals.get(lexeme, 0) + int(delta)
    changed = sorted((lexeme, n) for lexeme, n in totals.items() if n)
    return {"lexemes": [lexeme for lexeme, _ in changed], "ns": [n for _, n in changed],
            "chunks": sum(int(row[0]) for row in rows)}


def _additions(taken: list[tuple[Any, ...]],
               params: dict[str, Any]) -> list[tuple[sql.SQL, dict[str, Any]]]:
    """The statements that add the log rows ``taken`` to the folded counts (none for none),
    for both twins."""
    if not taken:
        return []
    sums = {**params, **_sums(taken)}
    adds = [(_ADD_LEXEMES, sums)] if sums["lexemes"] else []
    return [*adds, (_ADD_CHUNKS, sums), (_PRUNE, params)]


_TRY_LOCK = "SELECT pg_try_advisory_xact_lock(hashtextextended(%s, 0))"
_LOCK = "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))"


def scope_lock_key(tenant: str, project: str) -> str:
    return "\x1f".join(("kb-stats", tenant, project))


def fold_log(conn: psycopg.Connection[Any], tenant: str, project: str) -> int | None:
    """Fold the scope's log into its counts; the log rows folded, or None when another
    connection is folding this scope (its rows wait for the next fold, and readers count them
    meanwhile). Run after a write commits, never inside one."""
    params = {"tenant": tenant, "project": project}
    with conn.transaction():
        row = conn.execute(_TRY_LOCK, [scope_lock_key(tenant, project)]).fetchone()
        if not row or not row[0]:
            return None
        taken = conn.execute(_TAKE, params).fetchall()
        for stmt, args in _additions(taken, params):
            conn.execute(stmt, args)
    return len(taken)


async def afold_log(conn: psycopg.AsyncConnection[Any], tenant: str, project: str) -> int | None:
    """The async twin of :func:`fold_log`."""
    params = {"tenant": tenant, "project": project}
    async with conn.transaction():
        row = await (await conn.execute(_TRY_LOCK, [scope_lock_key(tenant, project)])).fetchone()
        if not row or not row[0]:
            return None
        taken = await (await conn.execute(_TAKE, params)).fetchall()
        for stmt, args in _additions(taken, params):
            await conn.execute(stmt, args)
    return len(taken)


# The planner's statistics (pg_statistic) of the tables a write changes. A table is analysed
# again once the rows changed since its last ANALYZE reach a tenth of it (autovacuum's own
# rule, without its minute-long nap: a new table would be planned blind meanwhile, and a
# delete by chunk id then scanned 10k x 10k rows), or when it never was.
_PLANNED = ["kb_documents", "kb_chunks", "kb_edges", "kb_lexemes"]
_STALE = (
    "SELECT c.relname FROM pg_class c LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid "
    "WHERE c.oid = ANY(%(tables)s::regclass[]) AND (c.reltuples < 0 "
    "OR coalesce(s.n_mod_since_analyze, 0) > %(floor)s + %(share)s * c.reltuples) "
    "ORDER BY c.relname")
_STALE_FLOOR, _STALE_SHARE = 500, 0.1
_ANALYZE_KEY = "kb-analyze"


def analyze_if_stale(conn: psycopg.Connection[Any]) -> list[str]:
    """``ANALYZE (SKIP_LOCKED)`` the written tables whose statistics are stale, in one process
    at a time (a try-lock: never waiting for another analyser); the tables analysed."""
    with conn.transaction():
        row = conn.execute(_TRY_LOCK, [_ANALYZE_KEY]).fetchone()
        if not row or not row[0]:
            return []
        stale = [r[0] for r in conn.execute(_STALE, {"tables": _PLANNED, "floor": _STALE_FLOOR,
                                                      "share": _STALE_SHARE})]
        if stale:  # names from the catalog, filtered by our own list
            conn.execute(sql.SQL("ANALYZE (SKIP_LOCKED) {}").format(
                sql.SQL(", ").join(map(sql.Identifier, stale))))
    return stale


async def aanalyze_if_stale(conn: psycopg.AsyncConnection[Any]) -> list[str]:
    """The async twin of :func:`analyze_if_stale`."""
    async with conn.transaction():
        row = await (await conn.execute(_TRY_LOCK, [_ANALYZE_KEY])).fetchone()
        if not row or not row[0]:
            return []
        cur = await conn.execute(_STALE, {"tables": _PLANNED, "floor": _STALE_FLOOR,
                                          "share": _STALE_SHARE})
        stale = [r[0] for r in await cur.fetchall()]
        if stale:
            await conn.execute(sql.SQL("ANALYZE (SKIP_LOCKED) {}").format(
                sql.SQL(", ").join(map(sql.Identifier, stale))))
    return stale


def settle(conn: psycopg.Connection[Any], tenant: str, project: str, *,
           analyze: bool = True) -> None:
    """After a write committed: fold the scope's log, and analyse the tables whose planner
    statistics went stale. Never raises, because the write is saved whatever happens here: a
    fold that fails leaves the log to the next one (readers count it), an ANALYZE that fails is
    autovacuum's to do."""
    try:
        fold_log(conn, tenant, project)
        if analyze:
            analyze_if_stale(conn)
    except psycopg.Error as exc:
        logger.warning("statistics of %s/%s not settled: %s", tenant, project, exc)


async def asettle(conn: psycopg.AsyncConnection[Any], tenant: str, project: str, *,
                  analyze: bool = True) -> None:
    """The async twin of :func:`settle`."""
    try:
        await afold_log(conn, tenant, project)
        if analyze:
            await aanalyze_if_stale(conn)
    except psycopg.Error as exc:
        logger.warning("statistics of %s/%s not settled: %s", tenant, project, exc)


_RECOUNT = (
    sql.SQL("DELETE FROM kb_lexeme_log WHERE tenant_id = %(tenant)s AND project_key = %(project)s"),
    sql.SQL("DELETE FROM kb_lexemes WHERE tenant_id = %(tenant)s AND project_key = %(project)s"),
    sql.SQL("INSERT INTO kb_lexemes (tenant_id, project_key, lexeme, chunks) "
            "SELECT %(tenant)s, %(project)s, u.lexeme, count(*) FROM kb_chunks c, "
            "{lexemes} AS u WHERE c.tenant_id = %(tenant)s AND c.project_key = %(project)s "
            "GROUP BY u.lexeme").format(lexemes=ENGINE.lexemes("c")),
    sql.SQL("INSERT INTO kb_scope_stats AS s (tenant_id, project_key, chunks) "
            "SELECT %(tenant)s, %(project)s, count(*) FROM kb_chunks WHERE tenant_id = %(tenant)s "
            "AND project_key = %(project)s "
            "ON CONFLICT (tenant_id, project_key) DO UPDATE SET chunks = EXCLUDED.chunks"),
)


def recount(conn: psycopg.Connection[Any], tenant: str, project: str) -> None:
    """Count the scope's statistics again from its chunks (a repair; writes may go on): one
    snapshot for the whole recount, so a write that commits meanwhile is counted once, by its
    log row. A fold that commits meanwhile makes it fail as a serialization failure (run it
    under :func:`~kb_retriever.store.retry.retried`)."""
    with conn.transaction():
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        conn.execute(_LOCK, [scope_lock_key(tenant, project)])
        _recounted(conn, tenant, project)


def recount_every_scope(conn: psycopg.Connection[Any]) -> None:
    """Count every scope's statistics again, in the caller's transaction: for a migration that
    changed what they count (the tsv column rebuilt) and holds kb_chunks, so nothing writes."""
    scopes = conn.execute("SELECT tenant_id, project_key FROM kb_chunks UNION "
                          "SELECT tenant_id, project_key FROM kb_lexemes").fetchall()
    for tenant, project in scopes:
        _recounted(conn, tenant, project)


def _recounted(conn: psycopg.Connection[Any], tenant: str, project: str) -> None:
    """The scope's statistics counted again from its chunks (:data:`_RECOUNT`), in the
    caller's transaction."""
    for stmt in _RECOUNT:
        conn.execute(stmt, {"tenant": tenant, "project": project})
