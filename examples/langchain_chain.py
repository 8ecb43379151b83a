"""An LCEL RAG chain over examples/kb/ with kb-retriever's LangChain adapter, fully offline.

    python examples/langchain_chain.py

Uses KB_DATABASE_URL when set, else the embedded PostgreSQL under KB_HOME. The chat model is a
fake one that replays a canned answer, so the example runs without network or API keys: swap
in any chat model (``ChatOpenAI``, ``ChatAnthropic``, ...) for real answers.
"""

from __future__ import annotations

import sys
from operator import itemgetter
from pathlib import Path
from typing import Any

from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import RunnableParallel, RunnablePassthrough
from langchain_kb_retriever import KBPromptComposer, KBRetriever

from kb_retriever import KnowledgeBase

KB_DIR = Path(__file__).resolve().parent / "kb"
QUESTION = "Can we use Memcached as the shared cache layer?"
CANNED = "No. Memcached was rejected in 2023; the shared cache layer is Redis cluster (DEC-0007)."


def build_chain(retriever: KBRetriever, model: Any) -> Any:
    """question -> {docs, question, context, answer}: the answer plus what it was grounded on."""
    composer = KBPromptComposer(retriever=retriever)
    prompt = ChatPromptTemplate.from_messages([("system", "{context}"), ("human", "{question}")])
    return (
        RunnableParallel(docs=retriever, question=RunnablePassthrough())
        .assign(context=itemgetter("docs") | composer)
        .assign(answer=prompt | model | StrOutputParser())
    )


def main(database_url: str | None = None, question: str = QUESTION) -> dict[str, Any]:
    with KnowledgeBase(database_url=database_url) as kb:
        kb.ingest([KB_DIR])  # a no-op when nothing changed
        retriever = KBRetriever(kb=kb, k=4, include_context=True)
        chain = build_chain(retriever, FakeListChatModel(responses=[CANNED]))
        out = chain.invoke(question)
    print(out["context"])
    print("=" * 80)
    print(f"Q: {question}\nA: {out['answer']}\n\nsources:")
    for doc in out["docs"]:
        kb_meta = doc.metadata["kb"]
        print(f"  [{kb_meta['origin']:<15}] {doc.metadata['score']:.3f}  "
              f"{doc.metadata['source']}  ({doc.metadata['slug'] or 'not canonical'})")
    return out


if __name__ == "__main__":
    main()
    sys.exit(0)
