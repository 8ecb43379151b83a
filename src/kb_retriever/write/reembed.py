"""Moving a project to another embedding model: every chunk embedded again with the knowledge
base's embedder, and the project bound to its model, in one transaction (decision 0013).

Searches see the old model until the commit, the new one after: a knowledge base opened with
the old embedder then gets a :class:`~kb_retriever.errors.SchemaError` naming the new model
(never a silent empty vector leg). Writers of the project wait for the commit; one that
still embeds with the old model is refused after it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..embedding import Embedder
from ..store.session import Session
from .from_files import embed_in_batches
from .recalibrate import after_write

__all__ = ["ReembedReport", "reembed_project"]


@dataclass(frozen=True)
class ReembedReport:
    """What :func:`reembed_project` did: the project's model before and after (``model_id``
    and dimension), the chunks moved, and how many texts the embedder saw (the others came
    from the embedding cache)."""

    project: str
    before: tuple[str, int] | None  # None: the project held no chunks
    after: tuple[str, int]
    chunks: int
    embedded: int

    def summary(self) -> str:
        if self.before is None:
            return f"{self.project}: no chunks; new writes use {self.after[0]}"
        if self.before == self.after:
            return f"{self.project}: already embedded with {self.after[0]}"
        return (f"{self.project}: {self.chunks} chunks moved from {self.before[0]} "
                f"({self.before[1]}-d) to {self.after[0]} ({self.after[1]}-d), "
                f"{self.embedded} embedded")


def reembed_project(session: Session, embedder: Embedder, *, tenant: str,
                    project: str) -> ReembedReport:
    """Embed the project's chunks with ``embedder`` (the session's model) and move the project
    to it; then calibrate the project for the new model (decision 0009)."""
    after = (session.space.model_id, session.space.dimension)
    before_space = session.project_space(tenant, project)
    before = None if before_space is None else (before_space.model_id, before_space.dimension)
    if before_space is not None and before_space.id == session.space.id:
        return ReembedReport(project, before, after, 0, 0)
    chunks = session.project_chunks(tenant, project)
    if before_space is None and not chunks:
        return ReembedReport(project, None, after, 0, 0)
    texts = list({h: t for _, h, t in chunks}.items())
    made, embedded = embed_in_batches(session, embedder, tenant, [t for _, t in texts])
    vectors = dict(zip((h for h, _ in texts), made, strict=True))
    late = [0]

    def embed(more: Sequence[str]) -> list[np.ndarray]:
        out, n = embed_in_batches(session, embedder, tenant, more)
        late[0] += n
        return out

    moved = session.move_project(tenant, project, vectors, embed)
    after_write(session, embedder, tenant, project, moved, recalibrate=True)  # never raises
    return ReembedReport(project, before, after, moved, embedded + late[0])
