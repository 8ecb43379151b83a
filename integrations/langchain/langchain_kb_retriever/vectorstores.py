"""``KBVectorStore``: a LangChain ``VectorStore`` whose searches run the whole kb-retriever
pipeline (hybrid candidates, rerank, canonical trust gradient)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.vectorstores import VectorStore

from kb_retriever import ConfigError, InputError, KnowledgeBase, Settings
from kb_retriever.search.modes import Legs
from kb_retriever.settings import load_settings

from . import _ranked, _units
from .embeddings import LangChainEmbedder
from .retrievers import KBRetriever

__all__ = ["KBVectorStore"]


def _listed(name: str, values: Any) -> list[Any]:
    """``values`` as a list: a list (or other iterable) of items, never one string or None."""
    if isinstance(values, str | bytes | Mapping) or not isinstance(values, Iterable):
        raise InputError(f"{name} must be a list, got {type(values).__name__}")
    return list(values)


def _documents(documents: Any) -> list[Document]:
    items = _listed("documents", documents)
    for i, doc in enumerate(items):
        if not isinstance(doc, Document):
            raise InputError(f"documents[{i}] must be a LangChain Document, got "
                             f"{type(doc).__name__}")
    return items


class KBVectorStore(VectorStore):
    """Documents in, documents out, with the trust gradient on every search.

    ``add_documents`` / ``add_texts`` store each LangChain ``Document`` as one knowledge-base
    document (chunked along its headings, embedded through the embedding cache, canonical
    fields read from its metadata or a frontmatter block). Its id is ``Document.id`` or the
    ``ids`` you pass, else one derived from its text and metadata (adding the same document
    twice is a no-op). ``similarity_search`` runs the full pipeline and returns the documents
    as they were added; ``similarity_search_with_score`` adds the final score, and
    ``as_retriever()`` returns a :class:`KBRetriever` (chunks, score breakdown, graph and
    rejected context).

    ``filter`` is a metadata filter as in langchain-postgres (``{"team": "sre"}``, ``{"level":
    {"$gte": 2}}``); ``filters`` takes the knowledge base's own filters (``canonical_types``,
    ``tags``, ``folder_globs`` …).

    Without ``kb``, the store opens a :class:`KnowledgeBase` (embedded PostgreSQL unless
    ``database_url``) on first use, with ``embedding`` as its embedder (else the default
    MiniLM); :meth:`close` closes it. A ``kb`` you pass is never closed.

    **k when k exist.** A search returns ``k`` documents whenever the scope holds ``k``
    (after filters), however dissimilar, as vector stores do: the store searches without the
    knowledge base's similarity floor (``KB_MIN_SIMILARITY``) and fills up from the search's
    runner-ups, then its ⚠ block (rejected approaches are documents of the store too).
    ``min_similarity=0.3`` applies a cosine floor again; the retriever of
    :meth:`as_retriever` keeps the knowledge base's floor and its refusal gate.

    Where it differs from langchain-postgres' ``PGVectorStore``, on purpose: a score is the
    pipeline's final relevance (higher is better, not a distance; the relevance scores are those
    scores clipped to [0, 1]: ``_ranked.relevance``); each stored document (or canonical part)
    comes back once, with its best chunk's score, not once per chunk; ``*_by_vector`` searches
    run the vector leg alone (there is no text for the full-text leg) and keep the rerank and
    trust gradient; MMR's relevance is the pipeline's score and its similarity the cosine
    between the documents' best chunks.

    Example::

        from langchain_core.documents import Document
        from langchain_kb_retriever import KBVectorStore

        store = KBVectorStore.from_documents(
            [Document("We standardise on Redis cluster.", metadata={"type": "decision",
             "status": "accepted", "slug": "dec-cache"})], embedding=None)
        print(store.similarity_search("which cache?", k=1)[0].metadata["slug"])
        store.close()
    """

    def __init__(self, embedding: Embeddings | None = None, *, kb: KnowledgeBase | None = None,
                 tenant: str | None = None, project: str | None = None,
                 database_url: str | None = None, settings: Settings | None = None,
                 min_similarity: float | None = None) -> None:
        if kb is not None and (embedding is not None or database_url is not None
                               or settings is not None):
            raise ConfigError("pass embedding, database_url and settings to the KnowledgeBase "
                              "(KnowledgeBase(embedder=LangChainEmbedder(embedding), ...)), not "
                              "next to kb=")
        # A vector store returns its k nearest however far (-1: no floor); a floor is opt-in.
        # k when k exist: no floor unless asked for, and no adaptive cutoff (decision 0014)
        self._legs = Legs(min_similarity=-1.0 if min_similarity is None else min_similarity,
                          context_cutoff=0.0)
        self._owned = kb is None
        if kb is None:
            kb = KnowledgeBase(settings or load_settings(),
                               embedder=LangChainEmbedder(embedding) if embedding else None,
                               database_url=database_url)
        self.kb = kb
        self.tenant, self.project = tenant, project
        self._embedding = embedding

    # --- lifecycle ------------------------------------------------------------------------
    def _open(self) -> KnowledgeBase:
        if self._owned and not self.kb.is_open:
            self.kb.open()  # threads racing here open it once (KnowledgeBase.open)
        return self.kb

    async def _aopen(self) -> KnowledgeBase:
        if self._owned and not self.kb.is_open:
            await asyncio.to_thread(self.kb.open)
        return self.kb

    def close(self) -> None:
        """Close the knowledge base this store opened (never one passed in)."""
        if self._owned:
            self.kb.close()

    async def aclose(self) -> None:
        if self._owned:
            await self.kb.aclose()

    @property
    def embeddings(self) -> Embeddings | None:
        if self._embedding is not None:
            return self._embedding
        return getattr(self.kb.embedder, "embeddings", None)  # a LangChainEmbedder' model

    def _scope(self) -> dict[str, Any]:
        return {"project": self.project, "tenant": self.tenant}

    # --- writing --------------------------------------------------------------------------
    @staticmethod
    def _records(texts: Iterable[str], metadatas: Sequence[Mapping[str, Any]] | None,
                 ids: Sequence[str | None] | None) -> list[dict[str, Any]]:
        items = _listed("texts", texts)
        metadatas = None if metadatas is None else _listed("metadatas", metadatas)
        ids = None if ids is None else _listed("ids", ids)
        if metadatas is not None and len(metadatas) != len(items):
            raise ConfigError(f"got {len(metadatas)} metadatas for {len(items)} texts")
        if ids is not None and len(ids) != len(items):
            raise ConfigError(f"got {len(ids)} ids for {len(items)} texts")
        # The metadata is copied (and checked: a mapping, JSON, storable) by the knowledge base.
        return [{"text": text, "metadata": metadatas[i] if metadatas else {},
                 "id": ids[i] if ids else None} for i, text in enumerate(items)]

    def add_texts(self, texts: Iterable[str], metadatas: list[dict[str, Any]] | None = None,
                  *, ids: list[str | None] | None = None, **kwargs: Any) -> list[str]:
        """Store each text as given and return its id (module ``_units``: texts whose metadata
        names a canonical slug are the chunks of that canonical document)."""
        kb = self._open()
        return _units.write(kb, self._records(texts, metadatas, ids), self._scope())

    async def aadd_texts(self, texts: Iterable[str], metadatas: list[dict[str, Any]] | None = None,
                         *, ids: list[str | None] | None = None, **kwargs: Any) -> list[str]:
        kb = await self._aopen()
        return await _units.awrite(kb, self._records(texts, metadatas, ids), self._scope())

    def add_documents(self, documents: list[Document], **kwargs: Any) -> list[str]:
        documents = _documents(documents)
        ids = kwargs.pop("ids", None) or [doc.id for doc in documents]
        return self.add_texts([d.page_content for d in documents],
                              [d.metadata for d in documents], ids=ids)

    async def aadd_documents(self, documents: list[Document], **kwargs: Any) -> list[str]:
        documents = _documents(documents)
        ids = kwargs.pop("ids", None) or [doc.id for doc in documents]
        return await self.aadd_texts([d.page_content for d in documents],
                                     [d.metadata for d in documents], ids=ids)

    def delete(self, ids: list[str] | None = None, **kwargs: Any) -> bool | None:
        """Delete documents (and the parts of canonical documents) by id; ``ids=None``
        deletes every document of the project. Other ids are ignored, among them a chunk id
        of a document of its own (what ``as_retriever()`` returns): delete its document by
        the id ``add_documents`` returned."""
        kb = self._open()
        if ids is None:
            kb.clear(**self._scope())
        else:  # canonical documents that lose parts take what the rest share
            slugs = _units.holders(kb, ids, self._scope())
            kb.delete_named(ids, **self._scope())
            _units.refresh(kb, slugs, self._scope())
        return True

    async def adelete(self, ids: list[str] | None = None, **kwargs: Any) -> bool | None:
        kb = await self._aopen()
        if ids is None:
            await kb.aclear(**self._scope())
        else:
            slugs = await _units.aholders(kb, ids, self._scope())
            await kb.adelete_named(ids, **self._scope())
            await _units.arefresh(kb, slugs, self._scope())
        return True

    # --- reading --------------------------------------------------------------------------
    def get_by_ids(self, ids: Sequence[str], /) -> list[Document]:
        return _units.fetch(self._open(), _listed("ids", ids), self._scope())

    async def aget_by_ids(self, ids: Sequence[str], /) -> list[Document]:
        ids = _listed("ids", ids)
        return await _units.afetch(await self._aopen(), ids, self._scope())

    def _search_args(self, k: int, filter: Mapping[str, Any] | None,
                     filters: Mapping[str, Any] | None) -> dict[str, Any]:
        return {**_ranked.search_args(self.kb, k, filter, filters, self._legs), **self._scope()}

    def _scored(self, query: str | None, embedding: Sequence[float] | None, k: int,
                filter: Mapping[str, Any] | None,
                filters: Mapping[str, Any] | None) -> list[tuple[Document, float]]:
        kb, args = self._open(), self._search_args(k, filter, filters)
        result = _ranked.k_units(kb, query, embedding, k, args)
        return _ranked.stored(result, k, lambda ids: _units.fetch(kb, ids, self._scope()))

    async def _ascored(self, query: str | None, embedding: Sequence[float] | None, k: int,
                       filter: Mapping[str, Any] | None,
                       filters: Mapping[str, Any] | None) -> list[tuple[Document, float]]:
        kb, args = await self._aopen(), self._search_args(k, filter, filters)
        result = await _ranked.ak_units(kb, query, embedding, k, args)
        return await _ranked.astored(result, k, lambda ids: _units.afetch(kb, ids, self._scope()))

    def similarity_search_with_score(self, query: str, k: int = 4,
                                     filter: dict[str, Any] | None = None, *,
                                     filters: dict[str, Any] | None = None,
                                     **kwargs: Any) -> list[tuple[Document, float]]:
        """The top ``k`` documents with their best chunk's final score (higher is better)."""
        return self._scored(query, None, k, filter, filters)

    async def asimilarity_search_with_score(self, query: str, k: int = 4,
                                            filter: dict[str, Any] | None = None, *,
                                            filters: dict[str, Any] | None = None,
                                            **kwargs: Any) -> list[tuple[Document, float]]:
        return await self._ascored(query, None, k, filter, filters)

    def similarity_search(self, query: str, k: int = 4, filter: dict[str, Any] | None = None,
                          **kwargs: Any) -> list[Document]:
        return [d for d, _ in self.similarity_search_with_score(query, k, filter, **kwargs)]

    async def asimilarity_search(self, query: str, k: int = 4,
                                 filter: dict[str, Any] | None = None,
                                 **kwargs: Any) -> list[Document]:
        pairs = await self.asimilarity_search_with_score(query, k, filter, **kwargs)
        return [d for d, _ in pairs]

    def similarity_search_with_score_by_vector(
            self, embedding: list[float], k: int = 4, filter: dict[str, Any] | None = None, *,
            filters: dict[str, Any] | None = None,
            **kwargs: Any) -> list[tuple[Document, float]]:
        """The top ``k`` documents for a query vector (of the knowledge base's embedding
        model): the vector leg alone, then the rerank and trust gradient; no text signals, as
        there is no query text. Scores as in :meth:`similarity_search_with_score`."""
        return self._scored(None, embedding, k, filter, filters)

    async def asimilarity_search_with_score_by_vector(
            self, embedding: list[float], k: int = 4, filter: dict[str, Any] | None = None, *,
            filters: dict[str, Any] | None = None,
            **kwargs: Any) -> list[tuple[Document, float]]:
        return await self._ascored(None, embedding, k, filter, filters)

    def similarity_search_by_vector(self, embedding: list[float], k: int = 4,
                                    filter: dict[str, Any] | None = None,
                                    **kwargs: Any) -> list[Document]:
        pairs = self.similarity_search_with_score_by_vector(embedding, k, filter, **kwargs)
        return [d for d, _ in pairs]

    async def asimilarity_search_by_vector(self, embedding: list[float], k: int = 4,
                                           filter: dict[str, Any] | None = None,
                                           **kwargs: Any) -> list[Document]:
        pairs = await self.asimilarity_search_with_score_by_vector(embedding, k, filter,
                                                                   **kwargs)
        return [d for d, _ in pairs]

    # --- maximal marginal relevance -------------------------------------------------------
    def _mmr_args(self, k: int, fetch_k: int, lambda_mult: float,
                  filter: Mapping[str, Any] | None,
                  filters: Mapping[str, Any] | None) -> dict[str, Any]:
        _ranked.check_mmr(fetch_k, lambda_mult)
        self._search_args(k, filter, filters)  # k checked as for a similarity search
        return self._search_args(max(k, fetch_k), filter, filters)

    def _mmr_search(self, query: str | None, embedding: Sequence[float] | None, k: int,
                    fetch_k: int, lambda_mult: float, filter: Mapping[str, Any] | None,
                    filters: Mapping[str, Any] | None) -> list[Document]:
        kb = self._open()
        args = self._mmr_args(k, fetch_k, lambda_mult, filter, filters)
        result = _ranked.k_units(kb, query, embedding, k, args)
        hits = _ranked.mmr_hits(kb, result, k, fetch_k, lambda_mult)
        stored = _units.fetch(kb, [_units.unit_id(h) for h in hits], self._scope())
        return [d for d, _ in _ranked.with_scores(hits, stored)]

    async def _ammr_search(self, query: str | None, embedding: Sequence[float] | None, k: int,
                           fetch_k: int, lambda_mult: float, filter: Mapping[str, Any] | None,
                           filters: Mapping[str, Any] | None) -> list[Document]:
        kb = await self._aopen()
        args = self._mmr_args(k, fetch_k, lambda_mult, filter, filters)
        result = await _ranked.ak_units(kb, query, embedding, k, args)
        # the embedder is synchronous: keep the loop free
        hits = await asyncio.to_thread(_ranked.mmr_hits, kb, result, k, fetch_k, lambda_mult)
        stored = await _units.afetch(kb, [_units.unit_id(h) for h in hits], self._scope())
        return [d for d, _ in _ranked.with_scores(hits, stored)]

    def max_marginal_relevance_search(self, query: str, k: int = 4, fetch_k: int = 20,
                                      lambda_mult: float = 0.5,
                                      filter: dict[str, Any] | None = None, *,
                                      filters: dict[str, Any] | None = None,
                                      **kwargs: Any) -> list[Document]:
        """``k`` documents chosen by maximal marginal relevance among the ``fetch_k`` best of
        the pipeline (``lambda_mult`` 1: relevance only, 0: diversity only)."""
        return self._mmr_search(query, None, k, fetch_k, lambda_mult, filter, filters)

    async def amax_marginal_relevance_search(self, query: str, k: int = 4, fetch_k: int = 20,
                                             lambda_mult: float = 0.5,
                                             filter: dict[str, Any] | None = None, *,
                                             filters: dict[str, Any] | None = None,
                                             **kwargs: Any) -> list[Document]:
        return await self._ammr_search(query, None, k, fetch_k, lambda_mult, filter, filters)

    def max_marginal_relevance_search_by_vector(self, embedding: list[float], k: int = 4,
                                                fetch_k: int = 20, lambda_mult: float = 0.5,
                                                filter: dict[str, Any] | None = None, *,
                                                filters: dict[str, Any] | None = None,
                                                **kwargs: Any) -> list[Document]:
        """:meth:`max_marginal_relevance_search` for a query vector (the vector leg alone)."""
        return self._mmr_search(None, embedding, k, fetch_k, lambda_mult, filter, filters)

    async def amax_marginal_relevance_search_by_vector(
            self, embedding: list[float], k: int = 4, fetch_k: int = 20,
            lambda_mult: float = 0.5, filter: dict[str, Any] | None = None, *,
            filters: dict[str, Any] | None = None, **kwargs: Any) -> list[Document]:
        return await self._ammr_search(None, embedding, k, fetch_k, lambda_mult, filter,
                                       filters)

    def _select_relevance_score_fn(self) -> Callable[[float], float]:
        return _ranked.relevance

    def as_retriever(self, **kwargs: Any) -> KBRetriever:  # type: ignore[override]
        """A :class:`KBRetriever` over the same knowledge base: chunks with their score
        breakdown. ``search_type`` (``similarity``, ``mmr``, ``similarity_score_threshold``)
        and ``search_kwargs`` as in ``VectorStore.as_retriever``; here ``filter`` is over the
        documents' metadata, as in :meth:`similarity_search`."""
        search = dict(kwargs.get("search_kwargs") or {})
        filters = _ranked.filter_arg("filters", search.pop("filters", None))
        _ranked.filter_arg("filter", search.get("filter"))  # (read as the store reads it)
        return KBRetriever(kb=self._open(), k=search.pop("k", 4), filter_on_metadata=True,
                           filters=dict(filters) if filters else None,
                           project=self.project, tenant=self.tenant,
                           search_type=kwargs.get("search_type", "similarity"),
                           search_kwargs=search,
                           tags=[*(kwargs.get("tags") or []), type(self).__name__])

    # --- constructors ---------------------------------------------------------------------
    @classmethod
    def from_documents(cls, documents: list[Document], embedding: Embeddings | None = None,
                       **kwargs: Any) -> KBVectorStore:
        """A store (``kwargs``: ``kb``, ``tenant``, ``project``, ``database_url``,
        ``settings``, ``ids``) with ``documents`` added; ``embedding`` may be omitted (the
        knowledge base's own embedder)."""
        store = cls(embedding, **{k: v for k, v in kwargs.items() if k != "ids"})
        store.add_documents(documents, **({"ids": kwargs["ids"]} if "ids" in kwargs else {}))
        return store

    @classmethod
    async def afrom_documents(cls, documents: list[Document], embedding: Embeddings | None = None,
                              **kwargs: Any) -> KBVectorStore:
        store = cls(embedding, **{k: v for k, v in kwargs.items() if k != "ids"})
        await store.aadd_documents(documents,
                                   **({"ids": kwargs["ids"]} if "ids" in kwargs else {}))
        return store

    @classmethod
    def from_texts(cls, texts: list[str], embedding: Embeddings | None = None,
                   metadatas: list[dict[str, Any]] | None = None, *,
                   ids: list[str | None] | None = None, **kwargs: Any) -> KBVectorStore:
        """A store (``kwargs``: ``kb``, ``tenant``, ``project``, ``database_url``,
        ``settings``) with ``texts`` added."""
        store = cls(embedding, **kwargs)
        store.add_texts(texts, metadatas, ids=ids)
        return store

    @classmethod
    async def afrom_texts(cls, texts: list[str], embedding: Embeddings | None = None,
                          metadatas: list[dict[str, Any]] | None = None, *,
                          ids: list[str | None] | None = None, **kwargs: Any) -> KBVectorStore:
        store = cls(embedding, **kwargs)
        await store.aadd_texts(texts, metadatas, ids=ids)
        return store
