"""Deleting whole documents: their chunks (logged for the statistics), edges and rows.

A builder returns a :class:`Batch`: statements that run in one transaction, and the one whose
count the call returns.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from psycopg import sql

from .stats import deleted_chunks_logged

__all__ = ["SCOPE", "Batch", "clear_sql", "delete_documents_sql"]

Statement = tuple[sql.Composed, dict[str, Any]]
SCOPE = sql.SQL("d.tenant_id = %(tenant)s AND d.project_key = %(project)s")


@dataclass(frozen=True)
class Batch:
    """Statements to run in one transaction, and the one whose count the call returns."""

    statements: list[Statement]
    counted: int

# Lock the documents first: a writer replacing one of them finishes (or waits) before their
# chunks are deleted, so the statement that deletes them sees their last chunks and logs them.
_LOCK_DOCUMENTS = sql.SQL("SELECT d.id FROM kb_documents d WHERE {scope}{which} "
                          "ORDER BY d.id FOR UPDATE")
# Chunks first (their lexemes logged as removed), then the documents, in one snapshot.
_DELETE_DOCUMENTS = sql.SQL(
    "WITH docs AS (SELECT d.id FROM kb_documents d WHERE {scope}{which}), {gone}, "
    "d AS (DELETE FROM kb_documents x USING docs WHERE x.tenant_id = %(tenant)s "
    "AND x.id = docs.id RETURNING 1) SELECT count(*) FROM d")
_BY_ID = sql.SQL(" AND d.source_path = ANY(%(ids)s)")


def _documents_deleted(which: sql.Composable, params: dict[str, Any]) -> Batch:
    gone = deleted_chunks_logged(sql.SQL(
        "x.tenant_id = %(tenant)s AND x.document_id IN (SELECT id FROM docs)"))
    return Batch([(_LOCK_DOCUMENTS.format(scope=SCOPE, which=which), params),
                  (_DELETE_DOCUMENTS.format(scope=SCOPE, which=which, gone=gone), params)],
                 counted=1)


def delete_documents_sql(tenant: str, project: str, ids: Sequence[str]) -> Batch:
    """Delete whole documents, their chunks (logged for the statistics) and edges (by
    cascade), counting the documents."""
    return _documents_deleted(_BY_ID, {"tenant": tenant, "project": project, "ids": list(ids)})


def clear_sql(tenant: str, project: str) -> Batch:
    """Delete every document of one project, counting them."""
    return _documents_deleted(sql.SQL(""), {"tenant": tenant, "project": project})
