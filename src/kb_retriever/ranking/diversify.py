"""Per-document cap on the top-k, deferring rather than dropping (fix of reference §24.15)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, TypeVar

from kb_retriever.models import DocumentRef

__all__ = ["diversify"]


class Ranked(Protocol):
    """What the cap reads of a ranked item: a :class:`~kb_retriever.models.Hit`, or a
    :class:`~kb_retriever.ranking.rerank.Scored` whose hit is not built yet."""

    @property
    def document(self) -> DocumentRef: ...

    @property
    def uid(self) -> str: ...


R = TypeVar("R", bound=Ranked)


def diversify(hits: Sequence[R], limit: int, max_per_doc: int) -> tuple[list[R], list[R]]:
    """Split ranked ``hits`` into ``(top, rest)``.

    ``hits`` must be best first (as :func:`~kb_retriever.ranking.rerank` returns them); both
    outputs keep that order. Scanning in order, a hit is taken while its document
    (``document.id``) has fewer than ``max_per_doc`` hits taken; over-cap hits are deferred, and
    if the scan ends with fewer than ``limit`` taken, the best deferred hits fill the gap. So
    ``top`` always has ``min(limit, len(hits))`` hits. ``max_per_doc <= 0`` disables the cap.
    ``rest`` is every other hit (the runner-up pool). A hit whose :attr:`Hit.uid` was already seen
    is ignored, so neither list holds duplicates.

    Example: ``primary, runner_up_pool = diversify(hits, limit=8, max_per_doc=3)``.
    """
    unique = _dedupe(hits)
    if limit <= 0:
        return [], unique
    per_doc: dict[int, int] = {}
    taken: set[int] = set()  # positions in `unique`
    deferred: list[int] = []
    for pos, hit in enumerate(unique):
        if len(taken) >= limit:
            break
        doc = hit.document.id
        if max_per_doc > 0 and per_doc.get(doc, 0) >= max_per_doc:
            deferred.append(pos)
            continue
        per_doc[doc] = per_doc.get(doc, 0) + 1
        taken.add(pos)
    # Deferred positions are already in rank order; fill only up to the limit.
    taken.update(deferred[: max(0, limit - len(taken))])
    top = [h for pos, h in enumerate(unique) if pos in taken]
    rest = [h for pos, h in enumerate(unique) if pos not in taken]
    return top, rest


def _dedupe(hits: Sequence[R]) -> list[R]:
    seen: set[str] = set()
    out: list[R] = []
    for hit in hits:
        if hit.uid not in seen:
            seen.add(hit.uid)
            out.append(hit)
    return out
