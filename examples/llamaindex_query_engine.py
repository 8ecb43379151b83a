"""LlamaIndex query engines over examples/kb/: the KB retriever, and the KB postprocessor on a
plain in-memory ``VectorStoreIndex``. ``MockLLM`` echoes its prompt, so no API key is needed
and the output shows exactly what a real LLM would be sent.

Run: ``python examples/llamaindex_query_engine.py`` inside the project's venv, with
the LlamaIndex adapters installed (see the README's install line). It uses the
embedded PostgreSQL under KB_HOME unless KB_DATABASE_URL is set.
"""

from __future__ import annotations

import sys
from pathlib import Path

from llama_index.core import VectorStoreIndex
from llama_index.core.base.response.schema import Response
from llama_index.core.llms import MockLLM
from llama_index.core.query_engine import RetrieverQueryEngine
from llama_index.core.schema import NodeRelationship, RelatedNodeInfo, TextNode
from llama_index.embeddings.kb import KBCoreEmbedding
from llama_index.postprocessor.kb import KBNodePostprocessor
from llama_index.retrievers.kb import VISIBLE_METADATA_KEYS, KBRetriever, KBSynthesizer

from kb_retriever import Embedder, KnowledgeBase, MiniLMEmbedder, Settings
from kb_retriever.ingest import parse_document

KB_DIR = Path(__file__).resolve().parent / "kb"
QUESTION = "what cache layer did we standardise on?"


def load_nodes(directory: Path) -> list[TextNode]:
    """examples/kb/ as plain LlamaIndex nodes, canonical frontmatter copied into metadata.

    Any loader works with the postprocessor as long as it puts these keys in the metadata.
    """
    nodes = []
    for path in sorted(directory.glob("*.md")):
        draft = parse_document(path, root=directory, settings=Settings())
        for chunk in draft.chunks:
            metadata = {
                "title": draft.title, "source_path": draft.source_path,
                "heading_path": chunk.heading_path, "slug": draft.slug,
                "is_canonical": draft.is_canonical, "canonical_type": draft.canonical_type,
                "canonical_status": draft.canonical_status,
                "retrieval_priority": draft.retrieval_priority, "tags": list(draft.tags),
            }
            metadata = {k: v for k, v in metadata.items() if v is not None}
            nodes.append(TextNode(
                text=chunk.text, metadata=metadata,
                # The LLM sees what a reader cites by; the rest is for the postprocessor.
                excluded_llm_metadata_keys=[k for k in metadata
                                            if k not in VISIBLE_METADATA_KEYS],
                # Embed the bare chunk text, as the knowledge base does: both retrievers then
                # rank by the same vectors.
                excluded_embed_metadata_keys=list(metadata),
                relationships={NodeRelationship.SOURCE: RelatedNodeInfo(node_id=draft.source_path)},
            ))
    return nodes


def show(title: str, response: Response) -> None:
    print(f"\n=== {title} ===")
    for n in response.source_nodes:
        meta = n.node.metadata
        kb = meta.get("kb", {})
        origin = kb.get("origin", "-")
        before = kb.get("retrieval_score")
        was = f"  (retrieval score {before:.3f})" if isinstance(before, float) else ""
        print(f"{n.score:7.3f}  {origin:<15} {meta.get('slug') or meta.get('source_path')}"
              f"  [{meta.get('canonical_status', '-')}]{was}")


def main(database_url: str | None = None, *, embedder: Embedder | None = None) -> int:
    """Run both engines; 0 when both answer from dec-cache-v2 (the accepted decision)."""
    embedder = embedder or MiniLMEmbedder()
    llm = MockLLM()  # echoes the prompt it is given
    with KnowledgeBase(embedder=embedder, database_url=database_url,
                       project="llamaindex-example") as kb:
        kb.ingest([KB_DIR])

        # 1. kb-retriever end to end: KB retriever + the composed three-block prompt.
        kb_engine = RetrieverQueryEngine(
            retriever=KBRetriever(kb, k=5, include_context=True),
            response_synthesizer=KBSynthesizer(llm=llm, project="llamaindex-example"),
        )
        kb_response = kb_engine.query(QUESTION)
        show("KBRetriever + KBSynthesizer", kb_response)
        print("\n--- what the LLM was sent (MockLLM echoes it) ---")
        print(kb_response.response)

        # 2. Any retriever: a plain in-memory vector index, reranked by the KB postprocessor.
        index = VectorStoreIndex(load_nodes(KB_DIR), embed_model=KBCoreEmbedding(embedder))
        vector_engine = RetrieverQueryEngine.from_args(
            index.as_retriever(similarity_top_k=10), llm=llm,
            node_postprocessors=[KBNodePostprocessor(top_n=5)],
        )
        vector_response = vector_engine.query(QUESTION)
        show("VectorStoreIndex retriever + KBNodePostprocessor", vector_response)

    tops = [r.source_nodes[0].node.metadata.get("slug") if r.source_nodes else None
            for r in (kb_response, vector_response)]
    print(f"\nanswer sources: {tops}")
    return 0 if tops == ["dec-cache-v2", "dec-cache-v2"] else 1


if __name__ == "__main__":
    sys.exit(main())
