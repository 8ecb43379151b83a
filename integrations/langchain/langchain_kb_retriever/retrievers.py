"""``KBRetriever``: a LangChain ``BaseRetriever`` over a kb-retriever ``KnowledgeBase``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from langchain_core.callbacks import (
    AsyncCallbackManagerForRetrieverRun,
    CallbackManagerForRetrieverRun,
)
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever, LangSmithRetrieverParams
from pydantic import ConfigDict, Field

from kb_retriever import InputError, KnowledgeBase, SearchResult, Settings

from ._convert import result_to_documents

__all__ = ["KBRetriever"]

#: Keyword arguments ``invoke``/``ainvoke`` accept per call. ``verbose`` is read by
#: ``BaseRetriever.invoke`` itself and forwarded to the hook, so it must be tolerated.
CALL_OPTIONS = ("k", "filters", "project", "tenant", "include_context", "include_expanded",
                "include_rejected")
_IGNORED = frozenset({"verbose"})


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


class KBRetriever(BaseRetriever):
    """Retrieve from a kb-retriever knowledge base: hybrid search, canonical rerank, graph.

    By default ``invoke`` returns exactly ``k`` primary chunks (fewer only when the knowledge
    base holds fewer matches), best first, as LangChain's standard retriever contract expects.
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

    model_config = ConfigDict(arbitrary_types_allowed=True)

    kb: KnowledgeBase
    k: int = Field(default=8, ge=1)
    project: str | list[str] | None = None
    tenant: str | None = None
    filters: dict[str, Any] | None = None
    include_context: bool = False
    include_expanded: bool = True
    include_rejected: bool = True

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
        unknown = sorted(set(kwargs) - set(CALL_OPTIONS) - _IGNORED)
        if unknown:
            raise InputError(
                f"KBRetriever got unexpected keyword argument(s) {unknown}; "
                f"valid: {', '.join(CALL_OPTIONS)}"
            )
        k = kwargs.get("k", self.k)
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise InputError(f"k must be a positive integer, got {k!r}")
        filters = self.filters
        if kwargs.get("filters") is not None:
            extra = kwargs["filters"]
            if not isinstance(extra, Mapping):
                raise InputError(f"filters must be a mapping, got {type(extra).__name__}")
            filters = {**(self.filters or {}), **extra}
        return _Call(
            k=k,
            filters=filters,
            project=kwargs.get("project", self.project),
            tenant=kwargs.get("tenant", self.tenant),
            include_context=bool(kwargs.get("include_context", self.include_context)),
            include_expanded=bool(kwargs.get("include_expanded", self.include_expanded)),
            include_rejected=bool(kwargs.get("include_rejected", self.include_rejected)),
        )

    def search(self, query: str, **kwargs: Any) -> SearchResult:
        """The core :class:`SearchResult` for ``query`` with this retriever's options.

        Takes the same per-call keywords as ``invoke``; used by the prompt composer and the
        agent tool so that all three see the same hits.
        """
        call = self._call(kwargs)
        return self.kb.search(query, limit=call.k, project=call.project, tenant=call.tenant,
                              filters=call.filters)

    async def asearch(self, query: str, **kwargs: Any) -> SearchResult:
        """The async twin of :meth:`search` (``KnowledgeBase.asearch``, real async I/O)."""
        call = self._call(kwargs)
        return await self.kb.asearch(query, limit=call.k, project=call.project,
                                     tenant=call.tenant, filters=call.filters)

    def to_documents(self, result: SearchResult, **kwargs: Any) -> list[Document]:
        """Convert a :class:`SearchResult` the way ``invoke`` does (same per-call keywords)."""
        call = self._call(kwargs)
        return result_to_documents(result, k=call.k, include_context=call.include_context,
                                   include_expanded=call.include_expanded,
                                   include_rejected=call.include_rejected)

    # --- BaseRetriever hooks --------------------------------------------------------------
    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun,
                                **kwargs: Any) -> list[Document]:
        return self.to_documents(self.search(query, **kwargs), **kwargs)

    async def _aget_relevant_documents(self, query: str, *,
                                       run_manager: AsyncCallbackManagerForRetrieverRun,
                                       **kwargs: Any) -> list[Document]:
        return self.to_documents(await self.asearch(query, **kwargs), **kwargs)

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
