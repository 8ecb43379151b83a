"""Peer retrievers for the BEIR benchmark, all fed the same MiniLM vectors.

Every peer gets our embedder wrapped in its framework's embeddings interface; the wrapper answers
from the benchmark's vector cache (corpus and query vectors computed once by
``_embed_cache``), so no peer re-embeds and none downloads a model. Each builder returns a
function ``search(query_text, query_vector, k) -> [doc_id, ...]`` (best first).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np

Search = Callable[[str, np.ndarray, int], list[str]]


class VectorLookup:
    """Text -> cached vector; a miss falls back to the real embedder (and is counted)."""

    def __init__(self, embedder, vectors: Mapping[str, np.ndarray]) -> None:
        self.embedder = embedder
        self.vectors = dict(vectors)
        self.misses = 0

    def documents(self, texts: Sequence[str]) -> list[list[float]]:
        missing = [t for t in texts if t not in self.vectors]
        if missing:
            self.misses += len(missing)
            for t, v in zip(missing, self.embedder.embed_documents(missing), strict=True):
                self.vectors[t] = np.asarray(v, dtype=np.float32)
        return [self.vectors[t].tolist() for t in texts]

    def query(self, text: str) -> list[float]:
        if text not in self.vectors:
            self.misses += 1
            self.vectors[text] = np.asarray(self.embedder.embed_query(text), dtype=np.float32)
        return self.vectors[text].tolist()


def langchain_embeddings(lookup: VectorLookup):
    from langchain_core.embeddings import Embeddings

    class MiniLMEmbeddings(Embeddings):
        def embed_documents(self, texts: list[str]) -> list[list[float]]:
            return lookup.documents(texts)

        def embed_query(self, text: str) -> list[float]:
            return lookup.query(text)

    return MiniLMEmbeddings()


def llamaindex_embedding(lookup: VectorLookup):
    from llama_index.core.base.embeddings.base import BaseEmbedding

    class MiniLMEmbedding(BaseEmbedding):
        def _get_query_embedding(self, query: str) -> list[float]:
            return lookup.query(query)

        async def _aget_query_embedding(self, query: str) -> list[float]:
            return lookup.query(query)

        def _get_text_embedding(self, text: str) -> list[float]:
            return lookup.documents([text])[0]

        def _get_text_embeddings(self, texts: list[str]) -> list[list[float]]:
            return lookup.documents(texts)

    return MiniLMEmbedding(model_name="all-MiniLM-L6-v2-int8")


# --- (d) LangChain EnsembleRetriever ------------------------------------------------------------

def langchain_ensemble(ids: Sequence[str], texts: Sequence[str], lookup: VectorLookup,
                       k: int) -> Search:
    """BM25Retriever (rank-bm25, its default whitespace tokenizer) + InMemoryVectorStore, RRF."""
    from langchain_classic.retrievers import EnsembleRetriever
    from langchain_core.documents import Document
    from langchain_core.vectorstores import InMemoryVectorStore

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from langchain_community.retrievers import BM25Retriever

    docs = [Document(page_content=t, metadata={"doc_id": i}, id=i)
            for i, t in zip(ids, texts, strict=True)]
    bm25 = BM25Retriever.from_documents(docs, k=k)
    store = InMemoryVectorStore(embedding=langchain_embeddings(lookup))
    store.add_documents(docs, ids=list(ids))
    vec = store.as_retriever(search_kwargs={"k": k})
    # Defaults: equal weights, c=60; identity = page_content (unique per abstract here).
    ensemble = EnsembleRetriever(retrievers=[bm25, vec])

    def search(query: str, _qvec: np.ndarray, limit: int) -> list[str]:
        return [d.metadata["doc_id"] for d in ensemble.invoke(query)[:limit]]

    return search


# --- (e) LlamaIndex QueryFusionRetriever ---------------------------------------------------------

def llamaindex_fusion(ids: Sequence[str], texts: Sequence[str], vectors: np.ndarray,
                      lookup: VectorLookup, k: int) -> Search:
    """VectorStoreIndex (SimpleVectorStore) + BM25Retriever (bm25s, English stemmer), RRF."""
    from llama_index.core import VectorStoreIndex
    from llama_index.core.llms import MockLLM
    from llama_index.core.retrievers import QueryFusionRetriever
    from llama_index.core.schema import TextNode
    from llama_index.retrievers.bm25 import BM25Retriever

    nodes = [TextNode(id_=i, text=t, embedding=v.tolist())
             for i, t, v in zip(ids, texts, vectors, strict=True)]
    index = VectorStoreIndex(nodes, embed_model=llamaindex_embedding(lookup))
    vec = index.as_retriever(similarity_top_k=k)
    bm25 = BM25Retriever.from_defaults(nodes=nodes, similarity_top_k=k)
    # num_queries=1: no LLM query generation (the MockLLM is never called); sync path.
    fusion = QueryFusionRetriever(
        [vec, bm25], llm=MockLLM(), mode="reciprocal_rerank", similarity_top_k=k,
        num_queries=1, use_async=False,
    )

    def search(query: str, _qvec: np.ndarray, limit: int) -> list[str]:
        return [n.node.node_id for n in fusion.retrieve(query)[:limit]]

    return search


# --- (f) langchain-postgres PGVectorStore + HybridSearchConfig -----------------------------------

def sqlalchemy_url(libpq_url: str, driver: str = "asyncpg") -> str:
    """A libpq connection string (the embedded server's names a socket directory and a
    passfile) as a SQLAlchemy URL, with the password read from the passfile."""
    from urllib.parse import quote

    from psycopg.conninfo import conninfo_to_dict

    params = conninfo_to_dict(libpq_url)
    password = params.get("password") or ""
    if not password and params.get("passfile"):
        password = Path(str(params["passfile"])).read_text().strip().rsplit(":", 1)[-1]
    user = params.get("user") or "postgres"
    auth = f"{quote(str(user))}:{quote(str(password))}" if password else quote(str(user))
    db = params.get("dbname") or "postgres"
    port = f"&port={params['port']}" if params.get("port") else ""
    return f"postgresql+{driver}://{auth}@/{db}?host={params.get('host') or ''}{port}"


def langchain_pgvectorstore(url: str, ids: Sequence[str], texts: Sequence[str],
                            vectors: np.ndarray, lookup: VectorLookup, k: int,
                            fusion: str = "weighted_sum") -> tuple[Search, Callable[[], None]]:
    """PGVectorStore (v2) with a tsvector column + GIN index; dense leg is an exact scan (no
    vector index is created by default). Returns (search, close)."""
    from langchain_postgres import PGEngine, PGVectorStore
    from langchain_postgres.v2.hybrid_search_config import (
        HybridSearchConfig,
        reciprocal_rank_fusion,
        weighted_sum_ranking,
    )

    fn = reciprocal_rank_fusion if fusion == "rrf" else weighted_sum_ranking
    table = f"scifact_lc_{fusion}"

    def config() -> HybridSearchConfig:
        # A fresh config per call: asimilarity_search() writes the first query into a shared
        # config's fts_query, which would then be reused for every later query.
        return HybridSearchConfig(
            tsv_column="content_tsv", tsv_lang="pg_catalog.english", fusion_function=fn,
            primary_top_k=k, secondary_top_k=k, index_name=f"{table}_tsv_index",
        )

    engine = PGEngine.from_connection_string(sqlalchemy_url(url))
    engine.init_vectorstore_table(table_name=table, vector_size=vectors.shape[1],
                                  id_column="langchain_id", overwrite_existing=True,
                                  hybrid_search_config=config())
    # init_vectorstore_table makes the id a UUID column; our ids are BEIR ids, so keep them in
    # metadata and let the store mint UUIDs.
    store = PGVectorStore.create_sync(engine, embedding_service=langchain_embeddings(lookup),
                                      table_name=table, hybrid_search_config=config())
    batch = 500
    for start in range(0, len(ids), batch):
        store.add_embeddings(
            list(texts[start:start + batch]),
            [v.tolist() for v in vectors[start:start + batch]],
            metadatas=[{"doc_id": i} for i in ids[start:start + batch]],
        )
    store.apply_hybrid_search_index()

    def search(query: str, _qvec: np.ndarray, limit: int) -> list[str]:
        docs = store.similarity_search(query, k=limit, hybrid_search_config=config())
        return [d.metadata["doc_id"] for d in docs]

    def close() -> None:
        # The engine runs its pool on a background loop; drop this table's connections there.
        engine._run_as_sync(engine._pool.dispose())

    return search, close
