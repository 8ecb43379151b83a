"""KBCompressor: the core rerank over documents of any retriever (pure: no database)."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

import pytest
from langchain_classic.retrievers import ContextualCompressionRetriever
from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.embeddings import DeterministicFakeEmbedding
from langchain_core.retrievers import BaseRetriever
from langchain_kb_retriever import KBCompressor

from kb_retriever import Settings

NOW = datetime(2026, 6, 1, tzinfo=UTC)
QUERY = "which session store do we use?"


def _docs() -> list[Document]:
    def doc(i: str, text: str, score: float, **meta: Any) -> Document:
        return Document(id=i, page_content=text, metadata={"score": score, **meta})

    canonical = {"is_canonical": True, "canonical_type": "decision", "retrieval_priority": 80}
    return [
        # The superseded decision is the most similar one: the trust gradient must sink it.
        doc("old", "Sessions live in the Postgres user_sessions table.", 0.90,
            source="dec-sessions-v1.md", canonical_status="superseded", **canonical),
        doc("new", "Sessions live in the Redis session store.", 0.85,
            source="dec-sessions-v2.md", canonical_status="accepted", **canonical,
            tags=["sessions", "redis"]),
        doc("note", "Random notes about lunch.", 0.10, source="notes.md"),
    ]


def _compressor(**kw: Any) -> KBCompressor:
    return KBCompressor(settings=Settings(), now=NOW, **kw)


def test_superseded_sinks_below_accepted_and_inputs_stay_intact() -> None:
    docs = _docs()
    before = copy.deepcopy(docs)
    out = _compressor(top_n=3).compress_documents(docs, QUERY)
    assert [d.id for d in out][:2] == ["new", "old"]
    assert docs == before  # never mutated
    new = out[0]
    assert new.metadata["score"] == 0.85  # input keys intact...
    assert new.metadata["relevance_score"] > out[1].metadata["relevance_score"]  # ...scores added
    kb = new.metadata["kb"]
    assert kb["rerank_rank"] == 1
    assert kb["scores"]["total"] == pytest.approx(new.metadata["relevance_score"], abs=1e-5)
    assert out[1].metadata["kb"]["scores"]["canonical_penalty"] > 0


def test_top_n_and_threshold() -> None:
    assert [d.id for d in _compressor(top_n=1).compress_documents(_docs(), QUERY)] == ["new"]
    all_docs = _compressor(top_n=None).compress_documents(_docs(), QUERY)
    assert len(all_docs) == 3
    cut = min(d.metadata["relevance_score"] for d in all_docs)
    kept = _compressor(top_n=None, score_threshold=cut + 1e-9).compress_documents(_docs(), QUERY)
    assert len(kept) == 2
    assert _compressor().compress_documents([], QUERY) == []


async def test_async_twin_matches_sync() -> None:
    compressor = _compressor(top_n=3)
    sync = compressor.compress_documents(_docs(), QUERY)
    asyn = await compressor.acompress_documents(_docs(), QUERY)
    assert [(d.id, d.metadata) for d in asyn] == [(d.id, d.metadata) for d in sync]


def test_embeddings_fill_missing_similarity() -> None:
    docs = [Document(page_content=t, metadata={"source": f"{i}.md"})
            for i, t in enumerate(["redis session store", "lunch menu", "kafka topics"])]
    plain = _compressor(top_n=3).compress_documents(docs, QUERY)
    assert all(d.metadata["kb"]["scores"]["raw_similarity"] == 0.0 for d in plain)
    emb = DeterministicFakeEmbedding(size=32)
    out = _compressor(top_n=3, embeddings=emb).compress_documents(docs, QUERY)
    assert any(d.metadata["kb"]["scores"]["raw_similarity"] != 0.0 for d in out)
    assert all("relevance_score" not in d.metadata for d in docs)


def test_per_source_cap_defers_extra_chunks() -> None:
    same = [Document(id=f"a{i}", page_content=f"session store chunk {i}",
                     metadata={"source": "a.md", "score": 0.9 - i / 100}) for i in range(3)]
    other = Document(id="b", page_content="session store elsewhere",
                     metadata={"source": "b.md", "score": 0.5})
    out = _compressor(top_n=2, max_per_doc=1).compress_documents([*same, other], QUERY)
    assert {d.id for d in out} == {"a0", "b"}


class _ListRetriever(BaseRetriever):
    docs: list[Document]

    def _get_relevant_documents(self, query: str, *,
                                run_manager: CallbackManagerForRetrieverRun) -> list[Document]:
        return list(self.docs)


async def test_inside_contextual_compression_retriever() -> None:
    retriever = ContextualCompressionRetriever(
        base_compressor=_compressor(top_n=2), base_retriever=_ListRetriever(docs=_docs()))
    assert [d.id for d in retriever.invoke(QUERY)] == ["new", "old"]
    assert [d.id for d in await retriever.ainvoke(QUERY)] == ["new", "old"]


def test_type_and_status_keys_and_a_frontmatter_block_are_read() -> None:
    """The vector stores' own keys (``type``, ``status``) and a frontmatter block a loader left
    in the text were not read: the superseded decision, the closer match, stayed first."""
    def doc(i: str, text: str, **meta: Any) -> Document:
        return Document(id=i, page_content=text, metadata={"score": 0.9 if i == "old" else 0.85,
                                                           **meta})

    keys = [doc("old", "Sessions live in Postgres.", type="decision", status="superseded"),
            doc("new", "Sessions live in Redis.", type="Decision", status="accepted")]
    block = [doc("old", "---\ntype: decision\nstatus: superseded\n---\nSessions in Postgres."),
             doc("new", "---\ntype: decision\nstatus: accepted\n---\nSessions in Redis.")]
    for docs in (keys, block):
        out = _compressor(top_n=2).compress_documents(docs, QUERY)
        assert [d.id for d in out] == ["new", "old"]
        assert out[1].metadata["kb"]["scores"]["canonical_penalty"] > 0
        assert out[0].page_content == docs[1].page_content  # the text as given
    other = [doc("old", "x", type="pdf", status="superseded"), doc("new", "y", type="pdf")]
    assert _compressor(top_n=2).compress_documents(other, QUERY)[1].metadata["kb"]["scores"][
        "canonical_penalty"] > 0  # a status alone counts; type "pdf" names no canonical type
