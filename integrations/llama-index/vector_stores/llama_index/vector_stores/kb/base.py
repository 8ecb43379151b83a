"""``KBVectorStore``: a LlamaIndex vector store whose queries run the kb-retriever pipeline."""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import Hashable, Mapping, Sequence
from typing import Any

from llama_index.core.bridge.pydantic import PrivateAttr
from llama_index.core.schema import BaseNode, MetadataMode, NodeRelationship, RelatedNodeInfo, TextNode
from llama_index.core.vector_stores.types import (
    BasePydanticVectorStore,
    MetadataFilters,
    VectorStoreQuery,
    VectorStoreQueryResult,
)
from llama_index.core.vector_stores.utils import metadata_dict_to_node, node_to_metadata_dict
from llama_index.retrievers.kb.convert import HIDDEN_METADATA_KEYS

from kb_retriever import (
    ChunkRecord,
    ConfigError,
    Hit,
    InputError,
    KnowledgeBase,
    SearchResult,
    StoredChunk,
)
from kb_retriever.interop import hit_metadata
from kb_retriever.interop.vectors import hit_vectors
from kb_retriever.ranking.diversify import diversify
from kb_retriever.ranking.mmr import mmr_order
from kb_retriever.search.modes import Legs
from kb_retriever.write.calls import awrite_groups, write_groups
from kb_retriever.write.from_memory import by_document, chunks_of, shared_fields, with_frontmatter

from .filters import to_kb_filters
from .modes import Mode, resolve_mode

__all__ = ["KBVectorStore"]

# Chunks asked for per node returned: the per-document cap keeps a few chunks of one document.
_CHUNKS_PER_NODE = 3


class KBVectorStore(BasePydanticVectorStore):
    """LlamaIndex nodes in a kb-retriever knowledge base; queries ranked by its pipeline.

    The nodes of one ``ref_doc_id`` are one knowledge-base document (its id is the
    ``ref_doc_id``), its chunks the nodes, kept as given: their ids, text, metadata and
    embeddings. The document's fields are the metadata all its nodes share (a key only some
    nodes have stays theirs, and filters read it so), canonical fields (``type``, ``status``,
    ``slug``, ``retrieval_priority``, ``tags`` …) among them, so the trust gradient applies to
    every query: hybrid candidates (the query text's full-text leg plus the query embedding's
    vector leg), rerank with the canonical adjustment, the per-document cap. ``MetadataFilters`` (nested AND
    / OR / NOT; ``== != > >= < <= in nin``, ``any all contains`` on ``tags``), ``doc_ids`` and
    ``node_ids`` are applied in SQL, before the ranking, read as ``KBRetriever`` reads them: a
    key that names a document field (``canonical_type``, ``canonical_status``, ``slug``,
    ``tags``, ``retrieval_priority`` …) filters that field, any other key the node's metadata;
    ``doc_ids`` and the key ``ref_doc_id`` select by the ``ref_doc_id`` the nodes report (an
    ingested file's chunks: their document's id).
    Each node a query returns carries the hit's ``metadata["kb"]`` record (``kb.scores``, the
    breakdown; ``kb.document``, the canonical fields; ``kb.similarity``), hidden from the LLM
    and the embedder, so ``KBNodePostprocessor`` keeps its trust gradient.

    Query modes (``vector_store_query_mode``): DEFAULT (the pipeline as configured), HYBRID
    (``alpha`` is the vector leg's fusion weight, ``1 - alpha`` the full-text leg's),
    TEXT_SEARCH (the full-text leg's matches), MMR (``mmr_threshold`` is lambda); any other
    mode raises :class:`kb_retriever.InputError`. A query with ``query_embedding`` and no
    ``query_str`` runs the vector leg alone.

    A query returns ``similarity_top_k`` nodes whenever that many exist (after filters),
    however dissimilar, as vector stores do: no similarity floor unless ``min_similarity``, and
    the search's runner-ups fill up, then its ⚠ block's rejected approaches. One search
    returns at most ``KB_MAX_LIMIT`` hits: a larger ``similarity_top_k`` raises
    :class:`kb_retriever.InputError`. Where it differs
    from LlamaIndex's ``PGVectorStore``, on purpose: ``similarities`` are the pipeline's final
    scores (the rerank with the trust gradient), not cosines (each node's cosine is
    ``metadata["kb"]["similarity"]``); a node's document is capped to a few chunks while other
    documents are left.

    The knowledge base must be open; the store never closes it.

    Example::

        from kb_retriever import KnowledgeBase
        from llama_index.core import Document, StorageContext, VectorStoreIndex
        from llama_index.embeddings.kb import KBCoreEmbedding
        from llama_index.vector_stores.kb import KBVectorStore

        with KnowledgeBase() as kb:
            index = VectorStoreIndex.from_documents(
                [Document(text="We use Redis.", metadata={"type": "decision",
                          "status": "accepted", "slug": "dec-cache"})],
                storage_context=StorageContext.from_defaults(vector_store=KBVectorStore(kb)),
                embed_model=KBCoreEmbedding(kb.embedder))
            print(index.as_retriever(similarity_top_k=1).retrieve("which cache?")[0].score)
    """

    stores_text: bool = True
    is_embedding_query: bool = True
    flat_metadata: bool = False
    project: str | None = None
    tenant: str | None = None
    min_similarity: float | None = None

    _kb: KnowledgeBase = PrivateAttr()

    def __init__(self, kb: KnowledgeBase, *, project: str | None = None,
                 tenant: str | None = None, min_similarity: float | None = None) -> None:
        if not isinstance(kb, KnowledgeBase):
            raise ConfigError(f"KBVectorStore takes an open kb_retriever.KnowledgeBase, not "
                              f"{type(kb).__name__}: KBVectorStore(KnowledgeBase().open())")
        Legs(min_similarity=min_similarity)  # checked here, not at the first query
        super().__init__(project=project, tenant=tenant, min_similarity=min_similarity)
        self._kb = kb

    @classmethod
    def class_name(cls) -> str:
        return "KBVectorStore"

    @property
    def client(self) -> KnowledgeBase:
        return self._kb

    def _scope(self) -> dict[str, Any]:
        return {"project": self.project, "tenant": self.tenant}

    # --- add ------------------------------------------------------------------------------
    @staticmethod
    def _documents(nodes: Sequence[BaseNode],
                   stored: Sequence[StoredChunk] = ()) -> list[dict[str, Any]]:
        """The ``upsert_chunks`` arguments of each ``ref_doc_id`` among ``nodes``, given the
        chunks ``stored`` of those documents (:meth:`_stored`).

        The nodes of one ``ref_doc_id`` are the chunks of one document, kept as given. The hash
        of their source document is its version: nodes of a new version replace all of the
        document's (re-inserting a changed file), nodes of the same version are added to it
        (``insert_nodes``, or the batches of a large document) and replace a stored node that is
        the same piece (the same document inserted again: LlamaIndex gives each node a new id;
        :func:`_piece`).
        The document's fields are what all its nodes, stored and new, share
        (:func:`_document_fields`).
        """
        groups: dict[str, list[BaseNode]] = {}
        for node in nodes:
            groups.setdefault(node.ref_doc_id or node.node_id, []).append(node)
        kept = by_document(stored)
        out = []
        for doc_id, group in groups.items():
            chunks = [ChunkRecord(
                text=n.get_content(metadata_mode=MetadataMode.NONE), id=n.node_id,
                metadata=node_to_metadata_dict(n, remove_text=True, flat_metadata=False),
                embedding=n.embedding) for n in group]
            source = group[-1].source_node
            version = source.hash if source is not None and source.hash else None
            out.append({"document_id": doc_id, "chunks": chunks, "version": version,
                        "piece_key": _piece,
                        "metadata": _document_fields(group, chunks, kept.get(doc_id, []),
                                                     version)})
        return out

    def _stored(self, nodes: Sequence[BaseNode]) -> list[StoredChunk]:
        """The stored chunks of the nodes' documents (read before a write: see
        :func:`_document_fields`)."""
        return [c for f in _of_documents(nodes) for c in self._kb.get_chunks(
            filters=f, consistent=True, **self._scope())]

    async def _astored(self, nodes: Sequence[BaseNode]) -> list[StoredChunk]:
        return [c for f in _of_documents(nodes) for c in await self._kb.aget_chunks(
            filters=f, consistent=True, **self._scope())]

    def add(self, nodes: Sequence[BaseNode], **kwargs: Any) -> list[str]:
        """Write the nodes of each ``ref_doc_id`` in a transaction of its own; when one fails
        after another was saved, ``WriteError`` lists both (``kb_retriever.write.calls``)."""
        write_groups([([c.id for c in doc["chunks"]],
                       functools.partial(self._kb.upsert_chunks, **doc, **self._scope()))
                      for doc in self._documents(nodes, self._stored(nodes))])
        return [n.node_id for n in nodes]

    async def async_add(self, nodes: Sequence[BaseNode], **kwargs: Any) -> list[str]:
        stored = await self._astored(nodes)
        await awrite_groups([([c.id for c in doc["chunks"]],
                              functools.partial(self._kb.aupsert_chunks, **doc, **self._scope()))
                             for doc in self._documents(nodes, stored)])
        return [n.node_id for n in nodes]

    # --- delete ---------------------------------------------------------------------------
    def delete(self, ref_doc_id: str, **delete_kwargs: Any) -> None:
        self._kb.delete([ref_doc_id], **self._scope())

    async def adelete(self, ref_doc_id: str, **delete_kwargs: Any) -> None:
        await self._kb.adelete([ref_doc_id], **self._scope())

    @staticmethod
    def _selection(node_ids: list[str] | None, filters: MetadataFilters | None
                   ) -> dict[str, Any] | None:
        """``get_chunks`` / ``delete_chunks`` arguments, or None when nothing is selected."""
        if isinstance(node_ids, str | bytes):  # list("n-1") is three ids of one character
            raise InputError(f"node_ids must be a list of ids, got a {type(node_ids).__name__} "
                             f"({node_ids!r:.40}): write [{node_ids!r:.40}]")
        kb_filters = to_kb_filters(filters)
        if node_ids is None and kb_filters is None:
            return None
        return {"ids": None if node_ids is None else list(node_ids), "filters": kb_filters}

    def delete_nodes(self, node_ids: list[str] | None = None,
                     filters: MetadataFilters | None = None, **delete_kwargs: Any) -> None:
        selection = self._selection(node_ids, filters)
        if selection is not None:
            self._kb.delete_chunks(**selection, **self._scope())

    async def adelete_nodes(self, node_ids: list[str] | None = None,
                            filters: MetadataFilters | None = None,
                            **delete_kwargs: Any) -> None:
        selection = self._selection(node_ids, filters)
        if selection is not None:
            await self._kb.adelete_chunks(**selection, **self._scope())

    def clear(self) -> None:
        self._kb.clear(**self._scope())

    async def aclear(self) -> None:
        await self._kb.aclear(**self._scope())

    # --- read -----------------------------------------------------------------------------
    def get_nodes(self, node_ids: list[str] | None = None,
                  filters: MetadataFilters | None = None) -> list[BaseNode]:
        selection = self._selection(node_ids, filters)
        if selection is None:
            return []
        return [_node(c.id, c.document_id, c.text, c.metadata, c.embedding)
                for c in self._kb.get_chunks(**selection, with_embeddings=True, **self._scope())]

    async def aget_nodes(self, node_ids: list[str] | None = None,
                         filters: MetadataFilters | None = None) -> list[BaseNode]:
        selection = self._selection(node_ids, filters)
        if selection is None:
            return []
        return [_node(c.id, c.document_id, c.text, c.metadata, c.embedding)
                for c in await self._kb.aget_chunks(**selection, with_embeddings=True,
                                                    **self._scope())]

    def _search(self, query: VectorStoreQuery, kwargs: dict[str, Any]
                ) -> tuple[Mode, dict[str, Any]]:
        """The query's mode and the arguments of its search."""
        floor = -1.0 if self.min_similarity is None else self.min_similarity
        mode = resolve_mode(query, self._kb.settings, floor=floor, kwargs=kwargs)
        filters = to_kb_filters(query.filters, doc_ids=query.doc_ids, node_ids=query.node_ids)
        # chunks per document are capped: ask for enough to fill top_k (or fetch_k) documents
        limit = min(mode.fetch_k * _CHUNKS_PER_NODE, self._kb.settings.max_limit)
        return mode, {"limit": limit, "filters": filters, "legs": mode.legs,
                      "query_embedding": query.query_embedding, **self._scope()}

    def _result(self, result: SearchResult, query: VectorStoreQuery,
                mode: Mode) -> VectorStoreQueryResult:
        # The primary hits, then the runner-ups, then the ⚠ block's rejected records: top_k
        # when top_k exist (a search keeps its weakest hits as runner-ups).
        seen: set[str] = set()
        hits = []
        for hit in (*result.primary, *result.runner_up, *result.rejected):
            node_id = hit.chunk_uid or hit.uid
            if node_id not in seen:
                seen.add(node_id)
                hits.append(hit)
        if mode.mmr_lambda is not None:
            hits = hits[:mode.fetch_k]
            hits = [hits[i] for i in mmr_order([h.score for h in hits],
                                                hit_vectors(self._kb, hits),
                                                query.similarity_top_k, mode.mmr_lambda)]
        else:
            # The search asked for a few chunks per node, so its list may hold more of one
            # document than the cap lets into top_k; the cap again, deferring as the search does.
            hits = diversify(hits, query.similarity_top_k,
                             self._kb.settings.max_chunks_per_doc)[0]
        nodes = [_hit_node(h) for h in hits]
        return VectorStoreQueryResult(nodes=nodes, similarities=[h.score for h in hits],
                                      ids=[n.node_id for n in nodes])

    def query(self, query: VectorStoreQuery, **kwargs: Any) -> VectorStoreQueryResult:
        """Run the pipeline for ``query`` (module ``modes``: DEFAULT, HYBRID with ``alpha``,
        TEXT_SEARCH, MMR with ``mmr_threshold``; other modes raise ``InputError``). A query
        with ``query_embedding`` and no ``query_str`` runs the vector leg alone."""
        mode, args = self._search(query, kwargs)
        return self._result(self._kb.search(mode.text, **args), query, mode)

    async def aquery(self, query: VectorStoreQuery, **kwargs: Any) -> VectorStoreQueryResult:
        mode, args = self._search(query, kwargs)
        result = await self._kb.asearch(mode.text, **args)
        if mode.mmr_lambda is None:
            return self._result(result, query, mode)
        # MMR reads the candidates' stored vectors with a sync read: keep the loop free
        return await asyncio.to_thread(self._result, result, query, mode)


def _node(node_id: str, doc_id: str, text: str, metadata: Any,
          embedding: Sequence[float] | None = None) -> BaseNode:
    """A stored chunk as the node that was added (``_node_content``), else a ``TextNode``
    (chunks of ingested files) whose SOURCE is its document's id; with its ``embedding`` when
    it was read (``get_nodes``)."""
    meta = dict(metadata)
    if "_node_content" in meta:
        node = metadata_dict_to_node(meta, text=text)
    else:
        node = TextNode(id_=node_id, text=text, metadata=meta, relationships={
            NodeRelationship.SOURCE: RelatedNodeInfo(node_id=doc_id)})
    if embedding is not None:
        node.embedding = list(embedding)
    return node


def _hit_node(hit: Hit) -> BaseNode:
    node = _node(hit.chunk_uid or hit.uid, hit.document.source_path, hit.text, hit.metadata)
    # The hit's "kb" record (the breakdown, the document's canonical fields, the cosine) rides
    # along for code, as on the retriever's nodes, hidden from the LLM and the embedder; the
    # postprocessor reads the trust gradient from it.
    node.metadata["kb"] = hit_metadata(hit)["kb"]
    for key in HIDDEN_METADATA_KEYS:
        if key not in node.excluded_llm_metadata_keys:
            node.excluded_llm_metadata_keys.append(key)
        if key not in node.excluded_embed_metadata_keys:
            node.excluded_embed_metadata_keys.append(key)
    return node


def _piece(metadata: Mapping[str, Any]) -> Hashable:
    """What tells a document's stored nodes of one text apart, of a node's stored metadata:
    all but its id, which LlamaIndex draws anew at each insert. That is its own metadata, its
    place in the source and its neighbours' hashes, so a footer repeated on every page, met
    again in a later batch of the same document, is another node, not the first one again."""
    content = metadata.get("_node_content")
    node = json.loads(content) if isinstance(content, str) else {}
    links = node.get("relationships") or {}
    around = [link.get("hash") if isinstance(link := links.get(r.value), dict) else None
              for r in (NodeRelationship.PREVIOUS, NodeRelationship.NEXT)]
    own = node.get("metadata", {k: v for k, v in metadata.items() if not k.startswith("_")})
    return json.dumps([own, node.get("start_char_idx"), node.get("end_char_idx"), around],
                      sort_keys=True, default=str)


def _of_documents(nodes: Sequence[BaseNode]) -> list[dict[str, Any]]:
    """``get_chunks`` filters for the stored chunks of the nodes' documents."""
    return chunks_of(list(dict.fromkeys(n.ref_doc_id or n.node_id for n in nodes)))


def _document_fields(group: Sequence[BaseNode], chunks: Sequence[ChunkRecord],
                     stored: Sequence[StoredChunk], version: str | None) -> dict[str, Any]:
    """The fields of the document whose nodes ``group`` (as ``chunks``) are written, given its
    ``stored`` chunks: the metadata that every node it will hold shares (the stored ones the
    write keeps, and these), over a frontmatter block that opens its first node (a reader that
    kept it in the text). A key only some nodes have is theirs: a filter reads a node's
    metadata, then its document's fields, so a document field stands for every node without
    the key (``kb_retriever.write.from_memory.shared_fields``).

    Nodes of a stored version (or of none) are added to the document, whose other nodes stay;
    those replaced by text are counted as kept (the shared fields can only be fewer). Nodes of
    another version replace them all, and their fields are the document's alone.
    """
    old = [_node(c.id, c.document_id, c.text, c.metadata) for c in stored]
    versions = {n.source_node.hash for n in old if n.source_node is not None}
    adds = bool(stored) and (version is None or version in versions)
    ids = {c.id for c in chunks}
    kept = [n for n in old if n.node_id not in ids] if adds else []
    fields = shared_fields([*(n.metadata for n in kept), *(n.metadata for n in group)])
    first = chunks[0].text
    if adds:  # the document's first chunk stays first
        head = min(stored, key=lambda c: c.order)
        first = next((c.text for c in chunks if c.id == head.id), head.text)
    return dict(with_frontmatter(first, fields))
