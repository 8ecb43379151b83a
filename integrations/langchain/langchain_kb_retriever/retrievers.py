"""``KBRetriever``: a LangChain ``BaseRetriever`` over a kb-retriever ``KnowledgeBase``."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal

from langchain_core.callbacks import (
    AsyncCallbackManagerForRetrieverRun,
    CallbackManagerForRetrieverRun,
)
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever, LangSmithRetrieverParams
from pydantic import ConfigDict, Field

from kb_retriever import InputError, KnowledgeBase, SearchResult, Settings
from kb_retriever.interop.vectors import hit_vectors
from kb_retriever.models.results import CONTEXT_CUTOFF
from kb_retriever.ranking.mmr import mmr_order

from . import _ranked, _units
from ._convert import hit_to_document, result_hits, with_added_metadata

__all__ = ["KBRetriever"]

#: Keyword arguments ``invoke``/``ainvoke`` accept per call (and ``search_kwargs`` holds).
#: ``filter`` is LangChain's filter expression (``$and``/``$or``/``$not`` over any field, as in
#: langchain-postgres); ``filters`` the core's mapping (``tags``, ``canonical_types`` …); both
#: apply. ``verbose`` is read by ``BaseRetriever.invoke`` itself and forwarded to the hook.
CALL_OPTIONS = ("k", "filters", "filter", "project", "tenant", "include_context",
                "include_expanded", "include_rejected", "fetch_k", "lambda_mult",
                "score_threshold")
_IGNORED = frozenset({"verbose"})
SEARCH_TYPES = ("similarity", "mmr", "similarity_score_threshold")


@dataclass(frozen=True)
class _Call:
    """The options of one call: constructor values overridden by per-call kwargs."""

    k: int
    filters: dict[str, Any] | None
    project: str | list[str] | None
    tenant: str | None
    include_context: bool
    include_expanded: bool
    include_rejected: bool
    fetch_k: int = 20
    lambda_mult: float = 0.5
    score_threshold: float | None = None

    mmr: bool = False

    @property
    def limit(self) -> int:
        """How many primary hits to ask the core for (MMR picks ``k`` of ``fetch_k``)."""
        return max(self.k, self.fetch_k) if self.mmr else self.k


def _check_options(where: str, options: Mapping[str, Any]) -> None:
    unknown = sorted(set(options) - set(CALL_OPTIONS) - _IGNORED)
    if unknown:
        raise InputError(f"{where} got unexpected keyword argument(s) {unknown}; "
                         f"valid: {', '.join(CALL_OPTIONS)}")


def _merge_filters(filters: Mapping[str, Any] | None, expression: Any) -> dict[str, Any] | None:
    """The core's filter mapping with a LangChain ``filter=`` expression AND-ed in."""
    if expression is None or expression == {}:
        return dict(filters) if filters is not None else None
    if not isinstance(expression, Mapping):
        raise InputError(f"filter must be a mapping, got {type(expression).__name__}")
    out = dict(filters or {})
    out["$and"] = [*out.get("$and", []), dict(expression)]
    return out


class KBRetriever(BaseRetriever):
    """Retrieve from a kb-retriever knowledge base: hybrid search, canonical rerank, graph.

    By default ``invoke`` returns exactly ``k`` primary chunks (fewer only when fewer pass the
    knowledge base's similarity floor, ``KB_MIN_SIMILARITY``, and none when its refusal gate
    finds nothing relevant enough), best first, as LangChain's standard retriever contract expects:
    the chunks the adaptive cutoff trims from a prompt (decision 0016) are among them, marked
    ``metadata["kb"]["context_cutoff"]``; :class:`KBPromptComposer` (through :meth:`search`)
    leaves them out.
    With ``include_context=True`` (constructor or per call) the graph-expanded neighbours and
    the rejected approaches that correlate with the query are appended after the primary
    ones; ``metadata["kb"]["origin"]`` says which is which (``primary``, ``graph_expansion``,
    ``rejected``) and ``Document.id`` stays unique (non-primary ids carry an origin suffix).

    Each document carries ``metadata["score"]`` and ``metadata["relevance_score"]`` (the final
    score), ``source``, ``title`` and ``slug``, and ``metadata["kb"]`` with the origin, the
    per-signal score breakdown, the document's canonical fields, heading path, chunk id,
    cosine similarity and, for graph neighbours, ``edge_type``/``from_slug``/``hop``.

    Per-call options (``invoke(query, k=..., filters=..., project=..., tenant=...,
    include_context=...)``) override the constructor's; per-call ``filters`` are merged over
    the constructor's key by key. Any other keyword raises :class:`kb_retriever.InputError`.

    The knowledge base must be open; the retriever never closes it.

    Example::

        from kb_retriever import KnowledgeBase
        from langchain_kb_retriever import KBRetriever

        with KnowledgeBase() as kb:
            kb.ingest(["examples/kb"])
            retriever = KBRetriever(kb=kb, k=4)
            docs = retriever.invoke("which cache do we use?", filters={"tags": ["cache"]})
            print(docs[0].metadata["slug"], docs[0].metadata["score"])
    """

    # extra="forbid": a misspelt or unsupported argument raises instead of being ignored.
    model_config = ConfigDict(arbitrary_types_allowed=True, extra="forbid")

    kb: KnowledgeBase
    k: int = Field(default=8, ge=1)
    project: str | list[str] | None = None
    tenant: str | None = None
    filters: dict[str, Any] | None = None
    include_context: bool = False
    include_expanded: bool = True
    include_rejected: bool = True
    #: As in LangChain's ``VectorStoreRetriever``: ``similarity`` (the pipeline's ranking),
    #: ``mmr`` (maximal marginal relevance over the top ``fetch_k``, ``lambda_mult``; relevance
    #: is the pipeline's score, so the best hit stays first) or
    #: ``similarity_score_threshold`` (hits whose final score is at least ``score_threshold``).
    search_type: Literal["similarity", "mmr", "similarity_score_threshold"] = "similarity"
    #: Defaults for every call, with the names of :data:`CALL_OPTIONS`.
    search_kwargs: dict[str, Any] = Field(default_factory=dict)
    #: ``filter=`` reads the documents' metadata alone, as :class:`KBVectorStore`'s does (its
    #: ``as_retriever()`` sets it); else a key that names a document field reads that field.
    filter_on_metadata: bool = False

    def __init__(self, **data: Any) -> None:
        # Checked here, not in a pydantic validator: the caller gets InputError itself.
        unknown = sorted(set(data) - set(type(self).model_fields))
        if unknown:
            raise InputError(f"KBRetriever got unexpected argument(s) {unknown}; valid: "
                             f"{', '.join(sorted(type(self).model_fields))}")
        _check_options("search_kwargs", data.get("search_kwargs") or {})
        search_kwargs = data.get("search_kwargs") or {}
        if (data.get("search_type") == "similarity_score_threshold"
                and search_kwargs.get("score_threshold") is None):
            raise InputError("search_type='similarity_score_threshold' needs a score_threshold "
                             "in search_kwargs")
        if data.get("search_type") == "mmr" and search_kwargs.get("score_threshold") is not None:
            raise InputError("score_threshold goes with search_type='similarity_score_threshold'"
                             ", not 'mmr'")
        super().__init__(**data)

    @classmethod
    def from_url(cls, database_url: str | None = None, *, settings: Settings | None = None,
                 embedder: Any = None, tenant: str = "default", project: str = "default",
                 **fields: Any) -> KBRetriever:
        """Open a :class:`KnowledgeBase` (embedded server when no URL) and wrap it.

        The caller owns the opened knowledge base: close it with ``retriever.kb.close()``.
        """
        kb = KnowledgeBase(settings, embedder=embedder, database_url=database_url,
                           tenant=tenant, project=project).open()
        return cls(kb=kb, **fields)

    @classmethod
    def from_settings(cls, settings: Settings, **kwargs: Any) -> KBRetriever:
        """Like :meth:`from_url`, with the database URL taken from ``settings``."""
        return cls.from_url(None, settings=settings, **kwargs)

    # --- per-call options ---------------------------------------------------------------
    def _call(self, kwargs: Mapping[str, Any]) -> _Call:
        _check_options("KBRetriever", kwargs)
        opts = {**self.search_kwargs, **kwargs}
        k = opts.get("k", self.k)
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise InputError(f"k must be a positive integer, got {k!r}")
        filters = self.filters
        for layer in (self.search_kwargs, kwargs):
            extra = layer.get("filters")
            if extra is not None:
                if not isinstance(extra, Mapping):
                    raise InputError(f"filters must be a mapping, got {type(extra).__name__}")
                filters = {**(filters or {}), **extra}
        # As in VectorStoreRetriever, a per-call filter= replaces search_kwargs' one.
        expression = opts.get("filter")
        if self.filter_on_metadata and expression:
            if not isinstance(expression, Mapping):
                raise InputError(f"filter must be a mapping, got {type(expression).__name__}")
            filters = _ranked.and_metadata(filters, expression)
        else:
            filters = _merge_filters(filters, expression)
        fetch_k, lambda_mult = opts.get("fetch_k", 20), opts.get("lambda_mult", 0.5)
        if isinstance(fetch_k, bool) or not isinstance(fetch_k, int) or fetch_k < 1:
            raise InputError(f"fetch_k must be a positive integer, got {fetch_k!r}")
        if not isinstance(lambda_mult, int | float) or not 0 <= lambda_mult <= 1:
            raise InputError(f"lambda_mult must be a number in [0, 1], got {lambda_mult!r}")
        threshold = opts.get("score_threshold")
        if threshold is not None and (isinstance(threshold, bool)
                                      or not isinstance(threshold, int | float)):
            raise InputError(f"score_threshold must be a number, got {threshold!r}")
        if threshold is not None and self.search_type == "mmr":  # as the constructor says
            raise InputError("score_threshold goes with search_type="
                             "'similarity_score_threshold', not 'mmr'")
        flags = {name: opts.get(name, getattr(self, name))
                 for name in ("include_context", "include_expanded", "include_rejected")}
        for name, value in flags.items():
            if not isinstance(value, bool):  # bool("false") is True
                raise InputError(f"{name} must be True or False, got {value!r}")
        return _Call(
            k=k,
            filters=filters,
            project=opts.get("project", self.project),
            tenant=opts.get("tenant", self.tenant),
            include_context=flags["include_context"],
            include_expanded=flags["include_expanded"],
            include_rejected=flags["include_rejected"],
            fetch_k=fetch_k, lambda_mult=float(lambda_mult),
            score_threshold=None if threshold is None else float(threshold),
            mmr=self.search_type == "mmr",
        )

    def search(self, query: str, **kwargs: Any) -> SearchResult:
        """The core :class:`SearchResult` for ``query`` with this retriever's options.

        Takes the same per-call keywords as ``invoke``; used by the prompt composer and the
        agent tool so that all three see the same hits.
        """
        call = self._call(kwargs)
        return self.kb.search(query, limit=call.limit, project=call.project,
                              tenant=call.tenant, filters=call.filters)

    async def asearch(self, query: str, **kwargs: Any) -> SearchResult:
        """The async twin of :meth:`search` (``KnowledgeBase.asearch``, real async I/O)."""
        call = self._call(kwargs)
        return await self.kb.asearch(query, limit=call.limit, project=call.project,
                                     tenant=call.tenant, filters=call.filters)

    def to_documents(self, result: SearchResult, **kwargs: Any) -> list[Document]:
        """Convert a :class:`SearchResult` the way ``invoke`` does (same per-call keywords).

        With ``search_type="mmr"`` the primary hits are re-ordered (and cut to ``k``) by
        maximal marginal relevance first; the scores stay the pipeline's.
        """
        call = self._call(kwargs)
        k: int | None = call.k
        if self.search_type == "mmr":
            result, k = self._mmr(result, call), None  # MMR's order, cut to k already
        elif call.score_threshold is not None:
            threshold = call.score_threshold
            result = replace(
                result, primary=tuple(h for h in result.primary if h.score >= threshold),
                runner_up=tuple(h for h in result.runner_up if h.score >= threshold))
        hits = result_hits(result, k=k, include_context=call.include_context,
                           include_expanded=call.include_expanded,
                           include_rejected=call.include_rejected)
        docs = [hit_to_document(h) for h in hits]
        return self._as_added(hits, docs) if self.filter_on_metadata else docs

    def _as_added(self, hits: list[Any], docs: list[Document]) -> list[Document]:
        """``docs`` with the metadata their documents (or parts) were added with, as the
        store's own searches return them (a store's retriever: ``as_retriever()``): one read
        per project of the hits."""
        keys = [(h.document.tenant_id, h.document.project_key, _units.unit_id(h)) for h in hits]
        added: dict[tuple[str, str, str], dict[str, Any]] = {}
        for tenant, project in dict.fromkeys((t, p) for t, p, _ in keys):
            ids = [i for t, p, i in keys if (t, p) == (tenant, project)]
            for stored in _units.fetch(self.kb, ids, {"tenant": tenant, "project": project}):
                added[tenant, project, str(stored.id)] = stored.metadata
        return [with_added_metadata(doc, added.get(key, {}))
                for key, doc in zip(keys, docs, strict=True)]

    async def ato_documents(self, result: SearchResult, **kwargs: Any) -> list[Document]:
        """The async twin of :meth:`to_documents`: MMR reads the candidates' vectors (a sync
        read, and the embedder for any without one), and a store's retriever the metadata its
        documents were added with, in a worker thread, so the event loop stays free."""
        if self.search_type == "mmr" or self.filter_on_metadata:
            return await asyncio.to_thread(self.to_documents, result, **kwargs)
        return self.to_documents(result, **kwargs)

    def _mmr(self, result: SearchResult, call: _Call) -> SearchResult:
        """``result`` with MMR's ``k`` picks, in its order, as the primary hits. What the
        adaptive cutoff moved out is ranked too, and leaves ``runner_up`` (else ``top_k``
        would add it a second time)."""
        hits = result.top_k(call.limit)
        order: Any = range(len(hits))
        if len(hits) > 1:
            order = mmr_order([h.score for h in hits], hit_vectors(self.kb, hits), call.k,
                              call.lambda_mult)
        return replace(result, primary=tuple(hits[i] for i in order)[:call.k],
                       runner_up=tuple(h for h in result.runner_up
                                       if not h.metadata.get(CONTEXT_CUTOFF)))

    # --- BaseRetriever hooks --------------------------------------------------------------
    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun,
                                **kwargs: Any) -> list[Document]:
        return self.to_documents(self.search(query, **kwargs), **kwargs)

    async def _aget_relevant_documents(self, query: str, *,
                                       run_manager: AsyncCallbackManagerForRetrieverRun,
                                       **kwargs: Any) -> list[Document]:
        return await self.ato_documents(await self.asearch(query, **kwargs), **kwargs)

    def _get_ls_params(self, **kwargs: Any) -> LangSmithRetrieverParams:
        params = super()._get_ls_params(**kwargs)
        embedder = self.kb.embedder
        params["ls_retriever_name"] = "kb_retriever"
        params["ls_vector_store_provider"] = "PGVector"
        # A wrapped LangChain model reports its own class, not the adapter's.
        params["ls_embedding_provider"] = getattr(embedder, "provider_name",
                                                  type(embedder).__name__)
        params["ls_embedding_model"] = embedder.model_id
        return params
