"""The vectors of hits, for the adapters' maximal marginal relevance."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Protocol

import numpy as np

from ..models import Hit, StoredChunk

__all__ = ["hit_vectors"]


class Chunks(Protocol):
    """What :func:`hit_vectors` reads: a :class:`~kb_retriever.KnowledgeBase`."""

    @property
    def embedder(self) -> Any: ...

    def get_chunks(self, ids: Iterable[str] | None = None, *, project: str | None = None,
                   tenant: str | None = None, with_embeddings: bool = False
                   ) -> list[StoredChunk]: ...


def hit_vectors(kb: Chunks, hits: Sequence[Hit]) -> np.ndarray:
    """Each hit's chunk's stored vector (one read per project the hits come from), as
    LangChain's and LlamaIndex's stores read theirs for MMR; the embedder runs only for a
    hit without one (a chunk deleted meanwhile). Re-embedding every candidate was a call to
    the embedder, a paid one for a remote model, at every MMR query."""
    if not hits:
        return np.zeros((0, kb.embedder.dimension), dtype=np.float32)
    scopes: dict[tuple[str, str], list[str]] = {}
    for h in hits:
        if h.chunk_uid:
            scopes.setdefault((h.document.tenant_id, h.document.project_key), []).append(
                h.chunk_uid)
    stored: dict[tuple[str, str, str], tuple[float, ...]] = {}
    for (tenant, project), uids in scopes.items():
        for chunk in kb.get_chunks(uids, project=project, tenant=tenant, with_embeddings=True):
            if chunk.embedding is not None:
                stored[(tenant, project, chunk.id)] = chunk.embedding
    keys = [(h.document.tenant_id, h.document.project_key, h.chunk_uid or "") for h in hits]
    missing = [i for i, key in enumerate(keys) if key not in stored]
    made = kb.embedder.embed_documents([hits[i].text for i in missing]) if missing else []
    vectors = [stored.get(key) for key in keys]
    for i, vec in zip(missing, made, strict=True):
        vectors[i] = tuple(vec)
    return np.asarray(vectors, dtype=np.float32)
