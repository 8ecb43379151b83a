"""LangChain documents into kb-retriever: loader -> text splitter -> KBVectorStore -> LCEL chain.

    python examples/langchain_vectorstore.py

The documents come from a LangChain loader (a small ``BaseLoader`` over examples/kb/ here;
langchain-community's ``DirectoryLoader`` or any other loader works the same), are split by
``langchain_text_splitters`` and go into :class:`KBVectorStore` with ``from_documents``. The
loader copies each file's frontmatter into its metadata and the splitter copies that to every
split, so the splits of one canonical file share its slug: they become the chunks of that one
canonical document (each kept under its own id), whose validated canonical fields let the
trust gradient rank the answer's sources. Uses KB_DATABASE_URL when set, else the embedded
PostgreSQL under KB_HOME; the chat model is a fake one that replays a canned answer: swap in
any chat model.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml
from langchain_core.document_loaders import BaseLoader
from langchain_core.documents import Document
from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import RunnableParallel, RunnablePassthrough
from langchain_kb_retriever import KBVectorStore
from langchain_text_splitters import RecursiveCharacterTextSplitter

from kb_retriever import KnowledgeBase

KB_DIR = Path(__file__).resolve().parent / "kb"
QUESTION = "Which shared cache layer did we standardise on?"
CANNED = "Redis cluster is the shared cache layer (DEC-0007); Memcached was superseded."


class MarkdownLoader(BaseLoader):
    """Markdown files as Documents: the body as page_content, the frontmatter as metadata."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def lazy_load(self) -> Iterator[Document]:
        for path in sorted(self.directory.glob("*.md")):
            text = path.read_text(encoding="utf-8")
            meta: dict[str, Any] = {}
            if text.startswith("---\n") and "\n---\n" in text[4:]:
                head, text = text[4:].split("\n---\n", 1)
                meta = {k: v if isinstance(v, (str, int, float, bool, list)) else str(v)
                        for k, v in (yaml.safe_load(head) or {}).items()}
            yield Document(page_content=text, metadata={**meta, "source": path.name})


def format_docs(docs: list[Document]) -> str:
    return "\n\n".join(f"[{d.metadata['source']}] {d.page_content}" for d in docs)


def main(database_url: str | None = None, question: str = QUESTION) -> dict[str, Any]:
    splitter = RecursiveCharacterTextSplitter(chunk_size=1200, chunk_overlap=100)
    splits = splitter.split_documents(MarkdownLoader(KB_DIR).load())
    with KnowledgeBase(database_url=database_url, project="langchain-example") as kb:
        store = KBVectorStore.from_documents(splits, kb=kb, project="langchain-example")
        retriever = store.as_retriever(search_kwargs={"k": 3})
        prompt = ChatPromptTemplate.from_messages(
            [("system", "Answer from this context:\n{context}"), ("human", "{question}")])
        chain = (RunnableParallel(docs=retriever, question=RunnablePassthrough())
                 .assign(context=lambda x: format_docs(x["docs"]))
                 .assign(answer=prompt | FakeListChatModel(responses=[CANNED])
                         | StrOutputParser()))
        out = chain.invoke(question)
        out["top"] = store.similarity_search(question, k=2)
    print(f"{len(splits)} splits stored\nQ: {question}\nA: {out['answer']}\n\nsources:")
    for doc in out["docs"]:
        document = doc.metadata["kb"]["document"]
        print(f"  {doc.metadata['score']:.3f}  {document['source_path']}  "
              f"({document['canonical_status'] or 'not canonical'})")
    return out


if __name__ == "__main__":
    main()
    sys.exit(0)
