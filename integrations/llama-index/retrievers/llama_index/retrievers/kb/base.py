"""The LlamaIndex retriever over a :class:`kb_retriever.KnowledgeBase`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.callbacks import CallbackManager
from llama_index.core.schema import NodeWithScore, QueryBundle
from llama_index.core.vector_stores.types import MetadataFilters

from kb_retriever import InputError, KnowledgeBase, SearchFilters
from kb_retriever.filters.dimensions import parse_filters

from .convert import result_to_nodes
from .filters import to_search_filters

__all__ = ["KBQueryBundle", "KBRetriever"]

#: The core's filter mapping (``{"tags": [...], "$or": [...]}``), parsed ``SearchFilters``,
#: or LlamaIndex ``MetadataFilters`` (nested AND/OR/NOT).
FiltersArg = SearchFilters | MetadataFilters | Mapping[str, Any] | None


def as_filters(filters: FiltersArg) -> SearchFilters:
    if isinstance(filters, MetadataFilters):
        return to_search_filters(filters)
    return parse_filters(filters)


@dataclass
class KBQueryBundle(QueryBundle):
    """A :class:`QueryBundle` with per-call overrides (LlamaIndex's has no filters field).

    Fields left ``None`` keep the retriever's setting.

    Example::

        nodes = retriever.retrieve(KBQueryBundle("how do we deploy?", k=3,
                                                 filters={"canonical_types": ["runbook"]}))
    """

    filters: FiltersArg = None
    project: str | Sequence[str] | None = None
    tenant: str | None = None
    k: int | None = None


class KBRetriever(BaseRetriever):
    """Retrieve from a kb-retriever knowledge base as LlamaIndex nodes.

    Returns the search's primary hits: at most ``k`` (``similarity_top_k``), best first, and
    fewer when fewer pass the knowledge base's similarity floor (``KB_MIN_SIMILARITY``), none
    when its refusal gate finds nothing relevant enough, and fewer when its adaptive context
    cutoff (``KB_CONTEXT_CUTOFF``, decisions 0014 and 0016) moves hits whose evidence is weak
    next to the best one's to ``runner_up``: what a prompt should hold, not ``k`` hits
    whatever they hold. LangChain's ``KBRetriever`` and the vector stores do return ``k``.
    This retriever has no switch for the cutoff: open the knowledge base with
    ``KB_CONTEXT_CUTOFF=0`` (``Settings(context_cutoff=0)``) to turn it off, or take
    ``kb.search(...).top_k(k)`` (the hits it moved out are among them). With
    ``include_context=True`` the graph-expanded and rejected-approach hits follow.
    Each is a ``NodeWithScore(TextNode)`` with id :attr:`Hit.uid`, the final score on
    ``.score`` and the breakdown in ``metadata["kb"]["scores"]`` (the ``"kb"`` record is hidden
    from LLM and embedding text; see :mod:`llama_index.retrievers.kb.convert`). A pre-computed
    ``query_bundle.embedding`` is used instead of embedding the query again; set
    ``use_query_embedding=False`` when a pipeline shares the bundle with a retriever that
    embeds with another model. Per-call overrides: :meth:`with_filters` or
    :class:`KBQueryBundle`. The knowledge base must be open; the retriever never closes it.

    Example::

        from kb_retriever import KnowledgeBase
        from llama_index.retrievers.kb import KBRetriever

        with KnowledgeBase(project="docs") as kb:
            retriever = KBRetriever(kb, k=5)
            for n in retriever.retrieve("what cache layer did we standardise on?"):
                print(n.score, n.metadata["kb"]["origin"], n.metadata["source_path"])
    """

    def __init__(
        self,
        kb: KnowledgeBase,
        *,
        k: int | None = None,
        similarity_top_k: int | None = None,
        project: str | Sequence[str] | None = None,
        tenant: str | None = None,
        filters: FiltersArg = None,
        include_context: bool = False,
        use_query_embedding: bool = True,
        callback_manager: CallbackManager | None = None,
        verbose: bool = False,
        **unknown: Any,
    ) -> None:
        if unknown:
            raise InputError(f"KBRetriever got unexpected argument(s) {sorted(unknown)}; valid: "
                             "k, similarity_top_k, project, tenant, filters, include_context, "
                             "use_query_embedding, callback_manager, verbose")
        if not isinstance(kb, KnowledgeBase):
            raise TypeError(f"kb must be a kb_retriever.KnowledgeBase, not {type(kb).__name__}")
        if k is not None and similarity_top_k is not None and k != similarity_top_k:
            raise InputError(f"k ({k}) and similarity_top_k ({similarity_top_k}) disagree")
        self._kb = kb
        self._k = _check_k(k if k is not None else 8 if similarity_top_k is None
                           else similarity_top_k)
        self._project = project
        self._tenant = tenant
        # Parsed once, here, so a bad filter fails at construction, not at the first query.
        self._filters = as_filters(filters)
        self._include_context = include_context
        self._use_query_embedding = use_query_embedding
        super().__init__(callback_manager=callback_manager, verbose=verbose)

    @property
    def kb(self) -> KnowledgeBase:
        return self._kb

    @property
    def k(self) -> int:
        return self._k

    @property
    def similarity_top_k(self) -> int:
        """LlamaIndex's name for :attr:`k`."""
        return self._k

    @property
    def filters(self) -> SearchFilters:
        return self._filters

    def with_filters(self, filters: FiltersArg, *, k: int | None = None,
                     project: str | Sequence[str] | None = None,
                     tenant: str | None = None) -> KBRetriever:
        """A copy with other filters (and optionally ``k``, project, tenant); self is unchanged.

        Example: ``retriever.with_filters({"canonical_types": ["runbook"]}, k=3)``.
        """
        return KBRetriever(
            self._kb, k=self._k if k is None else k,
            project=self._project if project is None else project,
            tenant=self._tenant if tenant is None else tenant, filters=filters,
            include_context=self._include_context, use_query_embedding=self._use_query_embedding,
            callback_manager=self.callback_manager, verbose=self._verbose,
        )

    def _search_args(self, query_bundle: QueryBundle) -> dict[str, Any]:
        args: dict[str, Any] = {
            "limit": self._k, "project": self._project, "tenant": self._tenant,
            "filters": self._filters,
        }
        if isinstance(query_bundle, KBQueryBundle):
            if query_bundle.k is not None:
                args["limit"] = _check_k(query_bundle.k)
            if query_bundle.filters is not None:
                args["filters"] = as_filters(query_bundle.filters)
            if query_bundle.project is not None:
                args["project"] = query_bundle.project
            if query_bundle.tenant is not None:
                args["tenant"] = query_bundle.tenant
        if self._use_query_embedding and query_bundle.embedding is not None:
            args["query_embedding"] = query_bundle.embedding
        return args

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        result = self._kb.search(query_bundle.query_str, **self._search_args(query_bundle))
        return result_to_nodes(result, include_context=self._include_context)

    # LlamaIndex calls this with the keyword `query_bundle=`: the name is part of the contract.
    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        result = await self._kb.asearch(query_bundle.query_str, **self._search_args(query_bundle))
        return result_to_nodes(result, include_context=self._include_context)


def _check_k(k: Any) -> int:
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise InputError(f"k must be a positive integer, got {k!r}")
    return k
