"""The core's rerank and trust gradient over documents of any retriever (the LangChain
compressor's and the LlamaIndex postprocessor's one path)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime

from ..models import Hit
from ..ranking import diversify, rerank
from ..settings import Settings
from .documents import ForeignDocument, to_candidates

__all__ = ["DEFAULT_TOP_N", "rerank_documents"]

#: How many documents a rerank of foreign documents returns by default: as many as a search
#: (``KB_DEFAULT_LIMIT``'s default).
DEFAULT_TOP_N = 8


def rerank_documents(query: str, items: Sequence[ForeignDocument], settings: Settings, *,
                     top_n: int | None = DEFAULT_TOP_N, max_per_doc: int | None = None,
                     similarities: Mapping[int, float] | None = None,
                     now: datetime | None = None) -> list[Hit]:
    """``items`` reranked by the core's weighted sum and canonical adjustment, best first: at
    most ``top_n`` (None: all), at most ``max_per_doc`` chunks per document while others are
    left (None: ``settings.max_chunks_per_doc``; 0: no cap). Each hit's ``chunk_id`` is its
    item's position in ``items``. ``similarities``: cosines computed by the caller for items
    that carry none (position -> cosine).

    Example::

        items = [ForeignDocument(d.page_content, d.metadata, id=d.id) for d in docs]
        for hit in rerank_documents("which cache do we use?", items, Settings(), top_n=3):
            print(docs[hit.chunk_id].id, hit.score, hit.scores.canonical)
    """
    if not items:
        return []
    candidates = to_candidates(items, rrf_k=settings.rrf_k, similarities=similarities)
    hits = rerank(query, candidates, settings, now=now)
    cap = settings.max_chunks_per_doc if max_per_doc is None else max_per_doc
    return diversify(hits, top_n or len(hits), cap)[0]
