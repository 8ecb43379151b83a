"""LlamaIndex documents into kb-retriever: SimpleDirectoryReader -> VectorStoreIndex -> query.

    python examples/llamaindex_vector_store.py

``SimpleDirectoryReader`` reads examples/kb/, ``VectorStoreIndex.from_documents`` splits the
documents into nodes, embeds them with the knowledge base's own model (``KBCoreEmbedding``)
and stores them in :class:`KBVectorStore`: each file's nodes are one knowledge-base document,
whose frontmatter (the reader keeps it at the top of the text) gives its canonical fields.
The query engine's retriever is then ranked by the pipeline, trust gradient included. Uses
KB_DATABASE_URL when set, else the embedded PostgreSQL under KB_HOME. ``MockLLM`` stands in for
a real LLM (it echoes), so the example runs offline.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from llama_index.core import SimpleDirectoryReader, StorageContext, VectorStoreIndex
from llama_index.core.llms import MockLLM
from llama_index.embeddings.kb import KBCoreEmbedding
from llama_index.vector_stores.kb import KBVectorStore

from kb_retriever import KnowledgeBase

KB_DIR = Path(__file__).resolve().parent / "kb"
QUESTION = "Which shared cache layer did we standardise on?"


def main(database_url: str | None = None, question: str = QUESTION, *,
         embedder: Any = None) -> Any:
    documents = SimpleDirectoryReader(str(KB_DIR), required_exts=[".md"],
                                      filename_as_id=True).load_data()
    with KnowledgeBase(database_url=database_url, embedder=embedder,
                       project="llamaindex-store-example") as kb:
        storage = StorageContext.from_defaults(
            vector_store=KBVectorStore(kb, project="llamaindex-store-example"))
        index = VectorStoreIndex.from_documents(documents, storage_context=storage,
                                                embed_model=KBCoreEmbedding(kb.embedder))
        engine = index.as_query_engine(llm=MockLLM(max_tokens=32), similarity_top_k=3)
        response = engine.query(question)
    print(f"{len(documents)} documents indexed\nQ: {question}\n\nsources:")
    for n in response.source_nodes:
        document = n.node.metadata["kb"]["document"]
        print(f"  {n.score:.3f}  {n.node.metadata['file_name']}  "
              f"({document['canonical_status'] or 'not canonical'})")
    return response


if __name__ == "__main__":
    main()
    sys.exit(0)
