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
from kb_retriever.interop import DEFAULT_TOP_N, ForeignDocument, rerank_documents, reranked_metadata

from ._convert import foreign

__all__ = ["KBCompressor"]


class KBCompressor(BaseDocumentCompressor):
    """Rerank documents from any retriever with kb-retriever's weighted sum + canonical boost.

    The conversion is the core's (:mod:`kb_retriever.interop`, shared with the LlamaIndex
    postprocessor). Canonical fields are read from each document's metadata
    (``is_canonical``, ``canonical_type``, ``canonical_status``, ``retrieval_priority``,
    ``generation_source``, ``tags``, ``slug``, ``source``/``source_path``, ``heading_path``;
    a kb-retriever ``metadata["kb"]["document"]`` works too; a type or status without
    ``is_canonical`` counts as canonical), so a superseded decision sinks below the accepted
    one. The vector signal is ``metadata["similarity"]``, else a kb-retriever document's
    cosine (``metadata["kb"]["similarity"]``), else ``["relevance_score"]``, else
    ``["score"]``; a document with none of them gets the cosine similarity from ``embeddings``
    when given, else 0. At most ``max_per_doc`` chunks per source come first (the rest fill
    in behind), ``top_n`` are returned (default 8, as many as a search; None: all), and
    documents below ``score_threshold`` are dropped.

    Input documents are never mutated: each output is a copy whose metadata keeps every input
    key and gains ``relevance_score`` (the final score) and, under ``kb``, the score breakdown
    (``scores``), the ``rerank_rank`` and the ``retrieval_score`` it came with.

    Example::

        from langchain_classic.retrievers import ContextualCompressionRetriever
        from langchain_kb_retriever import KBCompressor

        retriever = ContextualCompressionRetriever(
            base_compressor=KBCompressor(top_n=4), base_retriever=any_retriever)
        docs = retriever.invoke("how do we rotate the oauth signing key?")
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    settings: Settings = Field(default_factory=load_settings)
    top_n: int | None = Field(default=DEFAULT_TOP_N, ge=1)
    max_per_doc: int | None = None  # None: settings.max_chunks_per_doc
    score_threshold: float | None = None
    embeddings: Embeddings | None = None
    now: datetime | None = None  # fixes "now" for recency (reproducible tests)

    def compress_documents(self, documents: Sequence[Document], query: str,
                           callbacks: Callbacks | None = None) -> Sequence[Document]:
        items = [foreign(d) for d in documents]
        missing = _missing(items)
        computed: dict[int, float] = {}
        if missing and self.embeddings is not None:
            qvec = self.embeddings.embed_query(query)
            vecs = self.embeddings.embed_documents([items[i].text for i in missing])
            computed = {i: _cosine(qvec, v) for i, v in zip(missing, vecs, strict=True)}
        return self._rank(documents, items, query, computed)

    async def acompress_documents(self, documents: Sequence[Document], query: str,
                                  callbacks: Callbacks | None = None) -> Sequence[Document]:
        items = [foreign(d) for d in documents]
        missing = _missing(items)
        computed: dict[int, float] = {}
        if missing and self.embeddings is not None:
            qvec = await self.embeddings.aembed_query(query)
            vecs = await self.embeddings.aembed_documents([items[i].text for i in missing])
            computed = {i: _cosine(qvec, v) for i, v in zip(missing, vecs, strict=True)}
        return self._rank(documents, items, query, computed)

    # --- shared pure part ----------------------------------------------------------------
    def _rank(self, documents: Sequence[Document], items: list[ForeignDocument], query: str,
              computed: dict[int, float]) -> list[Document]:
        top = rerank_documents(query, items, self.settings, top_n=self.top_n,
                               max_per_doc=self.max_per_doc, similarities=computed,
                               now=self.now)
        if self.score_threshold is not None:
            top = [h for h in top if h.score >= self.score_threshold]
        return [_annotate(documents[h.chunk_id], items[h.chunk_id], h, rank)
                for rank, h in enumerate(top, 1)]


def _missing(items: Sequence[ForeignDocument]) -> list[int]:
    return [i for i, item in enumerate(items) if item.similarity is None]


def _annotate(doc: Document, item: ForeignDocument, hit: Hit, rank: int) -> Document:
    metadata = reranked_metadata(doc.metadata, hit, rank=rank,
                                 retrieval_score=item.retrieval_score)
    metadata["relevance_score"] = hit.score
    return doc.model_copy(update={"metadata": metadata})


def _cosine(a: Sequence[float], b: Sequence[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=False))
    norm = math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b))
    return dot / norm if norm else 0.0
