"""``llama_index.vector_stores.kb.KBVectorStore``: VectorStoreIndex in, pipeline ranking out."""

from __future__ import annotations

import pytest
from llama_index.core import Document, StorageContext, VectorStoreIndex
from llama_index.core import Settings as LlamaSettings
from llama_index.core.llms import MockLLM
from llama_index.core.schema import NodeRelationship, RelatedNodeInfo, TextNode
from llama_index.core.vector_stores.types import (
    FilterCondition,
    FilterOperator,
    MetadataFilter,
    MetadataFilters,
    VectorStoreQuery,
)
from llama_index.embeddings.kb import KBCoreEmbedding
from llama_index.vector_stores.kb import KBVectorStore

from kb_retriever import ConfigError, FilterError, HashingEmbedder, InputError

pytestmark = pytest.mark.db

DOCS = [
    Document(doc_id="dec-v1", text="Memcached is the shared cache layer for sessions.",
             metadata={"slug": "dec-cache-v1", "type": "decision", "status": "superseded",
                       "team": "platform", "level": 1}),
    Document(doc_id="dec-v2", text="Redis cluster is the shared cache layer for sessions.",
             metadata={"slug": "dec-cache-v2", "type": "decision", "status": "accepted",
                       "team": "platform", "level": 2}),
    Document(doc_id="lunch", text="The shared snack cache is upstairs, next to the sessions room.",
             metadata={"team": "office", "level": 3}),
]


@pytest.fixture
def index(make_kb):
    kb = make_kb(embedder=HashingEmbedder(256))
    store = KBVectorStore(kb)
    idx = VectorStoreIndex.from_documents(
        DOCS, storage_context=StorageContext.from_defaults(vector_store=store),
        embed_model=KBCoreEmbedding(kb.embedder))
    return idx


def test_the_pipeline_ranks_the_nodes(index):
    nodes = index.as_retriever(similarity_top_k=2).retrieve("which shared cache layer?")
    assert [n.node.ref_doc_id for n in nodes] == ["dec-v2", "dec-v1"]  # the trust gradient
    assert nodes[0].score > nodes[1].score
    kb = nodes[0].metadata["kb"]
    assert nodes[0].node.metadata["status"] == "accepted" and kb["scores"]["total"] > 0
    assert kb["document"]["canonical_status"] == "accepted"
    assert "kb:" not in nodes[0].node.get_content(metadata_mode="llm")


def test_the_postprocessor_keeps_the_trust_gradient_of_the_stores_nodes(index):
    """The store's nodes carry the canonical fields in their ``kb`` record, not as top-level
    ``canonical_*`` keys: the postprocessor must read them there (it used to see plain notes:
    no penalty for the superseded decision, no boost for the accepted one; issue 24)."""
    from llama_index.postprocessor.kb import KBNodePostprocessor

    nodes = index.as_retriever(similarity_top_k=3).retrieve("which shared cache layer?")
    out = KBNodePostprocessor(top_n=3).postprocess_nodes(
        list(reversed(nodes)), query_str="which shared cache layer?")
    by_doc = {n.node.ref_doc_id: n.metadata["kb"] for n in out}
    assert by_doc["dec-v1"]["scores"]["canonical_penalty"] == pytest.approx(0.4)
    assert by_doc["dec-v2"]["scores"]["canonical_boost"] > 0
    assert by_doc["lunch"]["scores"]["canonical"] == 0.0
    assert out[0].node.ref_doc_id == "dec-v2"
    # the vector signal is the node's cosine, not the store's final score
    cosines = {n.node.ref_doc_id: n.metadata["kb"]["similarity"] for n in nodes}
    assert {d: kb["scores"]["raw_similarity"] for d, kb in by_doc.items()} == pytest.approx(
        cosines, abs=1e-6)


def test_nodes_come_back_as_added(index):
    store: KBVectorStore = index.vector_store
    nodes = index.as_retriever(similarity_top_k=3).retrieve("snack cache upstairs")
    top = nodes[0].node
    (got,) = store.get_nodes([top.node_id])
    assert isinstance(got, TextNode) and got.node_id == top.node_id
    assert got.text == DOCS[2].text and got.ref_doc_id == "lunch"
    assert got.metadata == DOCS[2].metadata
    # with the vector it was added with, as LlamaIndex's PGVectorStore returns it
    expected = store.client.embedder.embed_documents([top.get_content(metadata_mode="embed")])
    assert got.embedding == pytest.approx(expected[0], abs=1e-6)


def test_query_engine_and_delete_ref_doc(index):
    engine = index.as_query_engine(llm=MockLLM(), similarity_top_k=3)
    response = engine.query("which shared cache layer?")
    assert {n.node.ref_doc_id for n in response.source_nodes} == {"dec-v1", "dec-v2", "lunch"}
    index.delete_ref_doc("dec-v2")
    nodes = index.as_retriever(similarity_top_k=3).retrieve("which shared cache layer?")
    assert "dec-v2" not in {n.node.ref_doc_id for n in nodes}


def test_metadata_filters_nested_and_or(index):
    store: KBVectorStore = index.vector_store
    embed = KBCoreEmbedding(store.client.embedder)

    def ids(filters, **kw):
        q = VectorStoreQuery(query_str="shared cache", similarity_top_k=5, filters=filters,
                             query_embedding=embed.get_query_embedding("shared cache"), **kw)
        return {n.ref_doc_id for n in store.query(q).nodes}

    assert ids(MetadataFilters(filters=[MetadataFilter(key="team", value="office")])) == {"lunch"}
    nested = MetadataFilters(condition=FilterCondition.OR, filters=[
        MetadataFilter(key="team", value="office"),
        MetadataFilters(filters=[
            MetadataFilter(key="team", value="platform"),
            MetadataFilter(key="level", value=2, operator=FilterOperator.GTE),
        ]),
    ])
    assert ids(nested) == {"lunch", "dec-v2"}
    assert ids(MetadataFilters(condition=FilterCondition.NOT, filters=[
        MetadataFilter(key="team", value="platform")])) == {"lunch"}
    assert ids(None, doc_ids=["dec-v1", "lunch"]) == {"dec-v1", "lunch"}
    # the retriever's converter: text_match works on metadata; any/all/contains test a list
    # member by member, which node metadata (compared whole) cannot, so they raise
    assert ids(MetadataFilters(filters=[MetadataFilter(
        key="team", value="ffic", operator=FilterOperator.TEXT_MATCH)])) == {"lunch"}
    with pytest.raises(FilterError, match="'any' is not supported"):
        ids(MetadataFilters(filters=[MetadataFilter(key="team", value=["o"],
                                                    operator=FilterOperator.ANY)]))
    with pytest.raises(InputError, match="query_str or query_embedding"):
        store.query(VectorStoreQuery(similarity_top_k=2))


def test_get_and_delete_nodes_by_filters(index):
    store: KBVectorStore = index.vector_store
    office = MetadataFilters(filters=[MetadataFilter(key="team", value="office")])
    nodes = store.get_nodes(filters=office)
    assert {n.ref_doc_id for n in nodes} == {"lunch"} and nodes[0].text == DOCS[2].text
    assert store.get_nodes() == []
    store.delete_nodes(filters=MetadataFilters(filters=[
        MetadataFilter(key="level", value=2, operator=FilterOperator.LTE)]))
    assert {n.ref_doc_id for n in store.get_nodes(filters=MetadataFilters(filters=[
        MetadataFilter(key="level", value=0, operator=FilterOperator.GT)]))} == {"lunch"}


def test_inserting_nodes_adds_to_their_document(index):
    store: KBVectorStore = index.vector_store
    before = [c.id for c in store.client.get_by_ids(["lunch"])[0].chunks]
    extra = TextNode(id_="extra-node", text="Coffee is in the kitchen.",
                     metadata={"team": "office"},
                     relationships={NodeRelationship.SOURCE: DOCS[2].as_related_node_info()})
    index.insert_nodes([extra])
    after = [c.id for c in store.client.get_by_ids(["lunch"])[0].chunks]
    assert after == [*before, "extra-node"]  # the earlier node (and its vector) stayed
    store.delete_nodes(["extra-node"])
    assert [c.id for c in store.client.get_by_ids(["lunch"])[0].chunks] == before
    store.clear()
    assert store.client.get_by_ids(["lunch", "dec-v1"]) == []


async def test_async_twins(make_kb):
    kb = make_kb(embedder=HashingEmbedder(256))
    store = KBVectorStore(kb)
    embed = KBCoreEmbedding(kb.embedder)
    nodes = [TextNode(id_=f"n{i}", text=t, embedding=embed.get_text_embedding(t))
             for i, t in enumerate(["async alpha cache", "async beta queue"])]
    assert await store.async_add(nodes) == ["n0", "n1"]
    q = VectorStoreQuery(query_str="beta queue", similarity_top_k=1,
                         query_embedding=embed.get_query_embedding("beta queue"))
    assert (await store.aquery(q)).ids == ["n1"]
    assert [n.node_id for n in await store.aget_nodes(["n0"])] == ["n0"]
    await store.adelete_nodes(["n0"])
    await store.adelete("n1")
    assert await store.aget_nodes(["n0", "n1"]) == []
    await kb.aclose()
    kb.open()


def test_settings_embed_model_is_not_needed_for_ingesting_with_kb_embedder(make_kb):
    # Building the index with the knowledge base's embedder as LlamaIndex's global default.
    kb = make_kb(embedder=HashingEmbedder(256))
    old = LlamaSettings._embed_model
    LlamaSettings.embed_model = KBCoreEmbedding(kb.embedder)
    try:
        idx = VectorStoreIndex.from_documents(
            DOCS[:1], storage_context=StorageContext.from_defaults(vector_store=KBVectorStore(kb)))
        assert idx.as_retriever().retrieve("memcached")[0].node.ref_doc_id == "dec-v1"
    finally:
        LlamaSettings._embed_model = old


def test_wrong_arguments_are_typed_errors(index):
    from kb_retriever import ConfigError

    from ...reliability._util import snapshot

    with pytest.raises(ConfigError, match="KnowledgeBase"):
        KBVectorStore("x")  # a TypeError before; ConfigError is a ValueError
    assert issubclass(ConfigError, ValueError)
    store: KBVectorStore = index.vector_store
    before = snapshot(store.client.url)
    for call in (lambda: store.delete(None), lambda: store.get_nodes([None]),
                 lambda: store.delete_nodes([None])):
        with pytest.raises(InputError):
            call()
    with pytest.raises(InputError, match="whitespace"):
        KBVectorStore(store.client, project=" docs ").add(
            [TextNode(text="redis", id_="n1")])
    assert snapshot(store.client.url) == before


def test_canonical_fields_filter_alike_on_the_store_and_the_retriever(index):
    """The README's MetadataFilter(key="canonical_type", value="decision") returned [] on the
    store, silently: it read every key as node metadata."""
    from llama_index.retrievers.kb import KBRetriever

    store: KBVectorStore = index.vector_store
    embed = KBCoreEmbedding(store.client.embedder)
    cases = [
        (MetadataFilters(filters=[MetadataFilter(key="canonical_type", value="decision")]),
         {"dec-v1", "dec-v2"}),
        (MetadataFilters(filters=[MetadataFilter(key="canonical_status", value="accepted")]),
         {"dec-v2"}),
        (MetadataFilters(filters=[MetadataFilter(key="canonical_status", value="superseded",
                                                 operator=FilterOperator.NE)]),
         {"dec-v2", "lunch"}),
        (MetadataFilters(filters=[MetadataFilter(key="slug", value="dec-cache-v1")]),
         {"dec-v1"}),
        (MetadataFilters(filters=[  # a document field and a metadata key together
            MetadataFilter(key="canonical_type", value="decision"),
            MetadataFilter(key="level", value=2, operator=FilterOperator.GTE)]), {"dec-v2"}),
    ]
    retriever = KBRetriever(store.client, similarity_top_k=5)
    for filters, expected in cases:
        q = VectorStoreQuery(query_str="shared cache", similarity_top_k=5, filters=filters,
                             query_embedding=embed.get_query_embedding("shared cache"))
        assert {n.ref_doc_id for n in store.query(q).nodes} == expected, filters
        got = retriever.with_filters(filters).retrieve("shared cache")
        assert {n.node.metadata["kb"]["document"]["source_path"] for n in got} == expected
        assert {n.node.ref_doc_id for n in index.as_retriever(
            similarity_top_k=5, filters=filters).retrieve("shared cache")} == expected
    # get_nodes / delete_nodes read them the same way
    assert {n.ref_doc_id for n in store.get_nodes(filters=cases[1][0])} == {"dec-v2"}


def _query(store, text, **kw):
    embed = KBCoreEmbedding(store.client.embedder)
    return VectorStoreQuery(query_str=text, query_embedding=embed.get_query_embedding(text),
                            **kw)


def test_query_modes_are_honoured(index):
    from kb_retriever import ConfigError

    store: KBVectorStore = index.vector_store

    def ids(text, **kw):
        return [n.ref_doc_id for n in store.query(_query(store, text, **kw)).nodes]

    # "snack upstairs" is in one text only: the full-text leg finds it alone
    assert ids("snack upstairs", similarity_top_k=3, mode="text_search") == ["lunch"]
    assert ids("snack upstairs", similarity_top_k=3, mode="hybrid", alpha=0.0) == ["lunch"]
    # the vector leg returns every node however far (no floor): top_k when top_k exist
    assert len(ids("snack upstairs", similarity_top_k=3)) == 3
    assert len(ids("snack upstairs", similarity_top_k=3, mode="hybrid", alpha=1.0)) == 3
    assert len(ids("snack upstairs", similarity_top_k=3, mode="hybrid")) == 3
    assert ids("which shared cache layer?", similarity_top_k=2, mode="mmr",
               mmr_threshold=1.0) == ids("which shared cache layer?", similarity_top_k=2)
    for mode in ("svm", "logistic_regression", "linear_regression", "sparse",
                 "semantic_hybrid"):
        with pytest.raises(InputError, match=f"'{mode}' is not supported.*hybrid"):
            ids("cache", mode=mode)
    with pytest.raises(ConfigError, match="alpha"):
        ids("cache", mode="hybrid", alpha=1.5)
    with pytest.raises(ConfigError, match="mmr_threshold"):
        ids("cache", mode="mmr", mmr_threshold=-0.1)
    with pytest.raises(InputError, match="needs query_str"):
        store.query(VectorStoreQuery(query_embedding=[0.1] * 256, mode="text_search"))


def test_mmr_mode_trades_relevance_for_diversity(make_kb):
    kb = make_kb(embedder=HashingEmbedder(256))
    store = KBVectorStore(kb)
    VectorStoreIndex.from_documents([
        Document(doc_id="a", text="Redis cluster is the shared cache layer for the API."),
        Document(doc_id="a-copy", text="Redis cluster is the shared cache layer for the API "
                                       "gateway."),
        Document(doc_id="other", text="Lunch is at noon near the shared kitchen."),
    ], storage_context=StorageContext.from_defaults(vector_store=store),
        embed_model=KBCoreEmbedding(kb.embedder))
    text = "shared cache layer redis cluster"
    plain = [n.ref_doc_id for n in store.query(_query(store, text, similarity_top_k=3)).nodes]
    diverse = store.query(_query(store, text, similarity_top_k=2, mode="mmr",
                                 mmr_threshold=0.1), mmr_prefetch_k=3)
    assert [n.ref_doc_id for n in diverse.nodes] == [plain[0], "other"]


class _Counting(HashingEmbedder):
    def __init__(self, dimension: int) -> None:
        super().__init__(dimension)
        self.documents = 0

    def embed_documents(self, texts):  # type: ignore[no-untyped-def]
        self.documents += len(texts)
        return super().embed_documents(texts)


def test_mmr_reads_the_stored_vectors_and_embeds_no_candidate(make_kb):
    """Every MMR query embedded its candidates again: a call to a remote model (a paid one)
    at each query. The adapters now read the stored vectors, as the stores they stand for
    do; the LangChain store and retriever as well."""
    from langchain_core.documents import Document as LcDocument
    from langchain_kb_retriever import KBVectorStore as LcStore

    embedder = _Counting(256)
    kb = make_kb(embedder=embedder)
    store = KBVectorStore(kb)
    VectorStoreIndex.from_documents([
        Document(doc_id="a", text="Redis cluster is the shared cache layer for the API."),
        Document(doc_id="other", text="Lunch is at noon near the shared kitchen."),
    ], storage_context=StorageContext.from_defaults(vector_store=store),
        embed_model=KBCoreEmbedding(kb.embedder))
    lc = LcStore(kb=kb, project="lc")
    lc.add_documents([LcDocument("Kafka is the event queue."), LcDocument("Deploys on Friday.")])
    embedder.documents = 0
    found = store.query(_query(store, "shared cache layer", similarity_top_k=2, mode="mmr",
                               mmr_threshold=0.5))
    assert len(found.nodes) == 2
    assert len(lc.max_marginal_relevance_search("event queue", k=2, fetch_k=2)) == 2
    retriever = lc.as_retriever(search_type="mmr", search_kwargs={"k": 2, "fetch_k": 2})
    assert retriever.invoke("event queue")
    assert embedder.documents == 0


@pytest.mark.parametrize("factor", [float("inf"), float("nan"), 0.5, "2"])
def test_an_mmr_prefetch_factor_that_is_no_finite_number_is_a_config_error(make_kb, factor):
    """inf and nan passed the check and raised a raw OverflowError / ValueError in int()."""
    store = KBVectorStore(make_kb(embedder=HashingEmbedder(64)))
    with pytest.raises(ConfigError, match="mmr_prefetch_factor"):
        store.query(_query(store, "cache", similarity_top_k=2, mode="mmr"),
                    mmr_prefetch_factor=factor)


async def test_queries_by_embedding_alone(make_kb):
    """A query with an embedding and no query_str raised InputError; it runs the vector leg
    alone, sync and async, and returns similarity_top_k when they exist."""
    kb = make_kb(embedder=HashingEmbedder(256))
    store = KBVectorStore(kb)
    embed = KBCoreEmbedding(kb.embedder)
    topics = ["cache", "queue", "deploy", "lunch", "backup", "billing", "search", "login"]
    nodes = [TextNode(id_=f"n{i:02d}", text=f"Note {i} about the {topics[i % 8]} service.",
                      embedding=embed.get_text_embedding(f"Note {i} about the "
                                                         f"{topics[i % 8]} service."))
             for i in range(24)]
    store.add(nodes)
    vec = embed.get_query_embedding("cache layer")
    q = VectorStoreQuery(query_embedding=vec, similarity_top_k=20)
    result = store.query(q)
    assert len(result.ids) == len(set(result.ids)) == 20
    assert result.nodes[0].text.endswith("cache service.")
    assert (await store.aquery(q)).ids == result.ids
    assert len(store.query(_query(store, "cache layer", similarity_top_k=20)).ids) == 20
    floored = KBVectorStore(kb, min_similarity=0.3)
    assert len(floored.query(q).ids) < 20  # the floor, when asked for
    await kb.aclose()
    kb.open()


def test_the_postprocessor_does_not_lift_a_superseded_adr_over_its_successor(make_kb):
    """On the store's own nodes (canonical fields under metadata["kb"]["document"], the
    top-level keys are the user's ``type`` / ``status``), the postprocessor ranks the accepted
    ADR above the superseded one it replaced, in whatever order the nodes come; it used to read
    the top level only and rank the superseded ADR first (issue 28)."""
    from llama_index.core.schema import NodeWithScore
    from llama_index.postprocessor.kb import KBNodePostprocessor

    kb = make_kb(embedder=HashingEmbedder(256))
    store = KBVectorStore(kb)
    index = VectorStoreIndex.from_documents([
        Document(doc_id="adr-1", text="The session cache layer is Memcached on every host.",
                 metadata={"slug": "adr-0001-session-cache", "type": "decision",
                           "status": "superseded",
                           "superseded_by": ["[[adr-0002-session-cache]]"]}),
        Document(doc_id="adr-2", text="The session cache layer is a Redis cluster.",
                 metadata={"slug": "adr-0002-session-cache", "type": "decision",
                           "status": "accepted", "supersedes": ["[[adr-0001-session-cache]]"]}),
    ], storage_context=StorageContext.from_defaults(vector_store=store),
        embed_model=KBCoreEmbedding(kb.embedder))
    question = "which session cache layer on every host?"
    nodes = index.as_retriever(similarity_top_k=2).retrieve(question)
    assert {n.node.ref_doc_id for n in nodes} == {"adr-1", "adr-2"}
    assert "canonical_type" not in nodes[0].node.metadata  # under metadata["kb"] only
    for order in (nodes, list(reversed(nodes))):
        out = KBNodePostprocessor(top_n=2).postprocess_nodes(order, query_str=question)
        assert [n.node.ref_doc_id for n in out] == ["adr-2", "adr-1"]
        assert out[1].metadata["kb"]["scores"]["canonical_penalty"] > 0
    def without(*keys: str) -> list[NodeWithScore]:
        return [NodeWithScore(node=n.node.model_copy(update={"metadata": {
            k: v for k, v in n.node.metadata.items() if k not in keys}}), score=n.score)
            for n in nodes]

    # without their kb record, the user's own type / status keys still carry the gradient ...
    out = KBNodePostprocessor(top_n=2).postprocess_nodes(without("kb"), query_str=question)
    assert [n.node.ref_doc_id for n in out] == ["adr-2", "adr-1"]
    # ... and without those either, there is none: the better match wins
    bare = without("kb", "type", "status")
    out = KBNodePostprocessor(top_n=2).postprocess_nodes(bare, query_str=question)
    assert [n.node.ref_doc_id for n in out][0] == "adr-1"


def test_node_ids_restrict_the_query_before_it_ranks(make_kb):
    """A query's ``node_ids`` (VectorIndexRetriever(node_ids=...)) were applied to the
    search's first few chunks, so a node ranked below them came back as no node at all."""
    kb = make_kb(embedder=HashingEmbedder(256))
    store = KBVectorStore(kb)
    embed = KBCoreEmbedding(kb.embedder)
    texts = [f"redis cache note number {i}" for i in range(14)] + ["kafka queue for events"]
    store.add([TextNode(id_=f"n{i}", text=t, embedding=embed.get_text_embedding(t))
               for i, t in enumerate(texts)])
    q = "redis cache"
    result = store.query(VectorStoreQuery(query_str=q, similarity_top_k=1, node_ids=["n14"],
                                          query_embedding=embed.get_query_embedding(q)))
    assert result.ids == ["n14"]
    both = store.query(VectorStoreQuery(query_str=q, similarity_top_k=5, node_ids=["n14", "n3"],
                                        query_embedding=embed.get_query_embedding(q)))
    assert sorted(both.ids) == ["n14", "n3"]


def test_a_nodes_own_key_named_like_a_document_field_is_filtered_on(make_kb, tmp_path):
    """A code loader's ``language="python"`` filtered the document's language column (NULL:
    "python" is no ISO code) and returned nothing; an ingested file, which has no node
    metadata, is still filtered on its document's field."""
    kb = make_kb(embedder=HashingEmbedder(256))
    (tmp_path / "guide.md").write_text("---\nlanguage: en\n---\n# Guide\n\ncode sample guide\n")
    kb.ingest([tmp_path])
    store = KBVectorStore(kb)
    embed = KBCoreEmbedding(kb.embedder)
    nodes = [TextNode(text=text, metadata=meta, embedding=embed.get_text_embedding(text))
             for text, meta in [("def f(): pass  # python code sample",
                                 {"language": "python", "source_type": "code"}),
                                ("fn main() {}  // rust code sample",
                                 {"language": "rust", "source_type": "code"})]]
    store.add(nodes)

    def texts(key, value, op=FilterOperator.EQ):
        q = _query(store, "code sample", similarity_top_k=5, filters=MetadataFilters(
            filters=[MetadataFilter(key=key, value=value, operator=op)]))
        return sorted(n.get_content()[:8] for n in store.query(q).nodes)

    assert texts("language", "python") == ["def f():"]
    assert texts("language", "en") == ["code sam"]  # the ingested file's chunk: its field
    assert texts("language", "python", FilterOperator.NE) == ["code sam", "fn main("]
    assert texts("source_type", "code") == ["def f():", "fn main("]
    assert texts("source_type", "markdown") == ["code sam"]
    assert [n.get_content()[:8] for n in store.get_nodes(filters=MetadataFilters(filters=[
        MetadataFilter(key="language", value="rust")]))] == ["fn main("]


def test_a_long_document_is_capped_within_top_k(make_kb):
    """The search asks for a few chunks per node returned, and the store took the first top_k
    of them: a long document filled top_k that the per-document cap promises to share."""
    kb = make_kb(embedder=HashingEmbedder(256))
    store = KBVectorStore(kb)
    embed = KBCoreEmbedding(kb.embedder)
    big = Document(doc_id="big", text="x")
    nodes = [TextNode(id_=f"b{i}", text=f"redis cache tuning step {i}", relationships={
        NodeRelationship.SOURCE: big.as_related_node_info()}) for i in range(10)]
    nodes.append(TextNode(id_="other", text="redis cache decision record"))
    for n in nodes:
        n.embedding = embed.get_text_embedding(n.text)
    store.add(nodes)
    q = "redis cache tuning"
    result = store.query(VectorStoreQuery(query_str=q, similarity_top_k=4,
                                          query_embedding=embed.get_query_embedding(q)))
    cap = kb.settings.max_chunks_per_doc
    assert [n.ref_doc_id for n in result.nodes].count("big") == cap and "other" in result.ids


@pytest.mark.parametrize("use_async", [False, True])
def test_a_call_that_fails_after_a_document_was_saved_says_both(make_kb, use_async):
    """add() writes each ref_doc's nodes in a transaction of its own: when the second failed
    (one of its node ids was another document's node), the caller got an IngestError naming
    only it, while the first was committed. It is a WriteError with both lists now."""
    import asyncio

    from kb_retriever import WriteError

    kb = make_kb(embedder=HashingEmbedder(64))
    store = KBVectorStore(kb)

    def node(node_id: str, doc: str, text: str) -> TextNode:
        n = TextNode(id_=node_id, text=text, embedding=kb.embedder.embed_query(text))
        n.relationships[NodeRelationship.SOURCE] = RelatedNodeInfo(node_id=doc)
        return n

    store.add([node("shared", "docC", "C text")])
    nodes = [node("a1", "docA", "A text"), node("shared", "docB", "B text")]
    with pytest.raises(WriteError) as raised:
        if use_async:
            asyncio.run(store.async_add(nodes))
        else:
            store.add(nodes)
    assert raised.value.saved == ["a1"] and list(raised.value.failed) == ["shared"]
    assert {n.node_id: n.ref_doc_id for n in store.get_nodes(node_ids=["a1", "shared"])} == \
        {"a1": "docA", "shared": "docC"}
    kb.close()
    kb.open()


def test_is_empty_matches_a_missing_a_null_or_an_empty_value_and_ids_are_a_list(make_kb):
    """``IS_EMPTY`` ("not exist or empty (null or empty array)" in LlamaIndex's filter
    function) read a key's absence alone: a node whose ``author`` was None or [] did not match.
    And ``delete_nodes("node-1")`` took the string for six ids of one character each."""
    kb = make_kb(embedder=HashingEmbedder(256))
    store = KBVectorStore(kb)
    nodes = [TextNode(id_=f"n-{i}", text=f"cache note {i}", metadata=meta,
                      embedding=kb.embedder.embed_query(f"cache note {i}"))
             for i, meta in enumerate([{"author": None}, {"author": []}, {"other": 1},
                                       {"author": "ana"}, {"author": ["bo"]}])]
    store.add(nodes)
    empty = MetadataFilters(filters=[MetadataFilter(key="author", value=None,
                                                    operator=FilterOperator.IS_EMPTY)])
    assert sorted(n.node_id for n in store.get_nodes(filters=empty)) == ["n-0", "n-1", "n-2"]
    found = store.query(VectorStoreQuery(query_str="cache note", similarity_top_k=5,
                                         filters=empty))
    assert sorted(found.ids or []) == ["n-0", "n-1", "n-2"]
    for call in (store.delete_nodes, store.get_nodes):
        with pytest.raises(InputError, match=r"a list of ids, got a str \('n-1'\)"):
            call("n-1")  # type: ignore[arg-type]
    assert len(store.get_nodes(["n-0", "n-1", "n-2", "n-3", "n-4"])) == 5


def test_a_store_filtered_to_rejected_records_returns_top_k_of_them(make_kb):
    """As the LangChain store's: the rejected channel took rejected records out of the ranking
    (or into the ⚠ block), and ``similarity_top_k=3`` over three of them gave fewer."""
    kb = make_kb(embedder=HashingEmbedder(256))
    store = KBVectorStore(kb)
    names = ("memcached", "hazelcast", "ehcache")
    docs = [Document(doc_id=f"rej-{n}", text=f"We considered {n} for the shared cache and "
                     "rejected it.", metadata={"slug": f"rej-{n}", "type": "rejected-approach",
                                               "status": "accepted"}) for n in names]
    docs.append(Document(doc_id="dec-redis", text="Redis is the shared cache.",
                         metadata={"slug": "dec-redis", "type": "decision", "status": "accepted"}))
    VectorStoreIndex.from_documents(docs, storage_context=StorageContext.from_defaults(
        vector_store=store), embed_model=KBCoreEmbedding(kb.embedder))
    only = MetadataFilters(filters=[MetadataFilter(key="type", value="rejected-approach")])
    found = store.query(VectorStoreQuery(query_str="which shared cache", similarity_top_k=3,
                                         query_embedding=kb.embedder.embed_query(
                                             "which shared cache"), filters=only))
    assert sorted(n.ref_doc_id for n in found.nodes or []) == [f"rej-{n}" for n in sorted(names)]
