"""``KBCompressor``: the core rerank + canonical trust gradient for documents of any retriever."""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime

from langchain_core.callbacks import Callbacks
from langchain_core.documents import BaseDocumentCompressor, Document
from langchain_core.embeddings import Embeddings
from pydantic import ConfigDict, Field

from kb_retriever import Hit, Settings, load_settings
from kb_retriever.ranking import diversify, rerank

from ._convert import _float, doc_numbers, document_to_candidate

__all__ = ["KBCompressor"]

# Where other retrievers put a similarity-like score, most specific first.
_SIMILARITY_KEYS = ("similarity", "relevance_score", "score")


class KBCompressor(BaseDocumentCompressor):
    """Rerank documents from any retriever with kb-retriever's weighted sum + canonical boost.

    Canonical fields are read from each document's metadata (``is_canonical``,
    ``canonical_type``, ``canonical_status``, ``retrieval_priority``, ``generation_source``,
    ``tags``, ``slug``, ``source``/``source_path``, ``heading_path``; a kb-retriever
    ``metadata["kb"]["document"]`` works too), so a superseded decision sinks below the
    accepted one. The vector signal is ``metadata["similarity"]``, else
    ``["relevance_score"]``, else ``["score"]``; a document with none of them gets the cosine
    similarity from ``embeddings`` when given, else 0. At most ``max_per_doc`` chunks per
    source come first (the rest fill in behind), ``top_n`` are returned, and documents below
    ``score_threshold`` are dropped.

    Input documents are never mutated: each output is a copy whose metadata keeps every input
    key and gains ``relevance_score`` (the final score) and ``kb`` (score breakdown, rank).

    Example::

        from langchain_classic.retrievers import ContextualCompressionRetriever
        from langchain_kb_retriever import KBCompressor

        retriever = ContextualCompressionRetriever(
            base_compressor=KBCompressor(top_n=4), base_retriever=any_retriever)
        docs = retriever.invoke("how do we rotate the oauth signing key?")
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    settings: Settings = Field(default_factory=load_settings)
    top_n: int | None = Field(default=4, ge=1)
    max_per_doc: int | None = None  # None: settings.max_chunks_per_doc
    score_threshold: float | None = None
    embeddings: Embeddings | None = None
    now: datetime | None = None  # fixes "now" for recency (reproducible tests)

    def compress_documents(self, documents: Sequence[Document], query: str,
                           callbacks: Callbacks | None = None) -> Sequence[Document]:
        missing = self._missing(documents)
        computed: dict[int, float] = {}
        if missing and self.embeddings is not None:
            qvec = self.embeddings.embed_query(query)
            vecs = self.embeddings.embed_documents([documents[i].page_content for i in missing])
            computed = {i: _cosine(qvec, v) for i, v in zip(missing, vecs, strict=True)}
        return self._rank(documents, query, computed)

    async def acompress_documents(self, documents: Sequence[Document], query: str,
                                  callbacks: Callbacks | None = None) -> Sequence[Document]:
        missing = self._missing(documents)
        computed: dict[int, float] = {}
        if missing and self.embeddings is not None:
            qvec = await self.embeddings.aembed_query(query)
            vecs = await self.embeddings.aembed_documents(
                [documents[i].page_content for i in missing])
            computed = {i: _cosine(qvec, v) for i, v in zip(missing, vecs, strict=True)}
        return self._rank(documents, query, computed)

    # --- shared pure part ----------------------------------------------------------------
    @staticmethod
    def _missing(documents: Sequence[Document]) -> list[int]:
        return [i for i, d in enumerate(documents) if _similarity(d) is None]

    def _rank(self, documents: Sequence[Document], query: str,
              computed: dict[int, float]) -> list[Document]:
        if not documents:
            return []
        numbers = doc_numbers(documents)
        candidates = [
            document_to_candidate(
                doc, i, numbers[i], rrf_k=self.settings.rrf_k,
                similarity=computed.get(i, _similarity(doc) or 0.0),
            )
            for i, doc in enumerate(documents)
        ]
        hits = rerank(query, candidates, self.settings, now=self.now)
        cap = self.settings.max_chunks_per_doc if self.max_per_doc is None else self.max_per_doc
        top, _ = diversify(hits, self.top_n or len(hits), cap)
        if self.score_threshold is not None:
            top = [h for h in top if h.score >= self.score_threshold]
        return [_annotate(documents[h.chunk_id], h, rank) for rank, h in enumerate(top, 1)]


def _similarity(doc: Document) -> float | None:
    meta = doc.metadata or {}
    kb = meta.get("kb")
    if isinstance(kb, dict) and "similarity" not in meta:
        # A kb-retriever document: its "score" is a final score, its cosine is kb.similarity.
        value = _float(kb.get("similarity"), None)
        if value is not None:
            return value
    for key in _SIMILARITY_KEYS:
        value = _float(meta.get(key), None)
        if value is not None:
            return value
    return None


def _annotate(doc: Document, hit: Hit, rank: int) -> Document:
    previous = doc.metadata.get("kb")
    kb = dict(previous) if isinstance(previous, dict) else {}
    kb.update(scores=hit.scores.to_dict(), rerank_rank=rank)
    metadata = {**doc.metadata, "relevance_score": hit.score, "kb": kb}
    return doc.model_copy(update={"metadata": metadata})


def _cosine(a: Sequence[float], b: Sequence[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=False))
    norm = math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b))
    return dot / norm if norm else 0.0
