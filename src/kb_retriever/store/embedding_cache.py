"""The embedding cache: a text's vector by the model, kept per tenant, so that a text embedded
once (a chunk unchanged in a changed file, a re-ingest, a re-embed) is not embedded again."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg

from .rows import vector_array

__all__ = ["cached_embeddings", "store_embeddings"]


def cached_embeddings(conn: psycopg.Connection, tenant: str, model_id: str, dimension: int,
                      hashes: Sequence[str]) -> dict[str, Any]:
    """The cached vectors of the texts ``hashes`` by the model, of its ``dimension``: one
    model may give several sizes under one name (``text-embedding-3-small`` at 1536 and at
    512), and the cache is keyed by the name."""
    with conn.cursor(binary=True) as cur:  # vectors: binary costs both ends far less
        rows = cur.execute(
            "SELECT text_hash, embedding FROM kb_embedding_cache WHERE tenant_id = %s "
            "AND model_id = %s AND text_hash = ANY(%s) AND vector_dims(embedding) = %s",
            [tenant, model_id, list(hashes), dimension],
        ).fetchall()
    return {h: vector_array(e) for h, e in rows}


def store_embeddings(conn: psycopg.Connection, tenant: str, model_id: str,
                     items: Sequence[tuple[str, Any]]) -> None:
    """Cache the vectors; one of another size cached under the model's name is replaced."""
    if not items:
        return
    with conn.cursor() as cur:
        # In key order: two writers caching the same texts lock them in the same order, so
        # neither waits for the other while holding what the other waits for.
        cur.executemany(
            "INSERT INTO kb_embedding_cache AS c (tenant_id, model_id, text_hash, embedding) "
            "VALUES (%s, %s, %s, %s) ON CONFLICT (tenant_id, model_id, text_hash) DO UPDATE "
            "SET embedding = excluded.embedding "
            "WHERE vector_dims(c.embedding) <> vector_dims(excluded.embedding)",
            [(tenant, model_id, h, e) for h, e in sorted(items, key=lambda item: item[0])],
        )
