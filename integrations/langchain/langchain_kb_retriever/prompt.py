"""``KBPromptComposer``: a runnable that renders kb-retriever's three prompt blocks."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from langchain_core.documents import Document
from langchain_core.runnables import RunnableConfig, RunnableSerializable
from pydantic import ConfigDict, Field

from kb_retriever import InputError, PromptTemplate, SearchResult, compose_prompt

from ._convert import documents_to_result
from .retrievers import KBRetriever

__all__ = ["KBPromptComposer"]

ComposerInput = str | SearchResult | Sequence[Document]


def _with_context(options: dict[str, Any]) -> dict[str, Any]:
    """A question's retriever options: the composer renders the graph and rejected blocks, so
    it asks for them; ``include_context`` is not the caller's to turn off here."""
    if "include_context" in options:
        raise InputError("KBPromptComposer always shows the related and rejected blocks; "
                         "include_context is not an option of it")
    return {**options, "include_context": True}


class KBPromptComposer(RunnableSerializable[ComposerInput, str]):
    """Render the ``⚠ REJECTED APPROACHES``, ``📎 RELATED CONTEXT`` and ``## Context`` blocks.

    Input is one of:

    * a question (``str``): the ``retriever`` is invoked with ``include_context=True`` (as a
      child run, so it shows up in traces) and its hits are rendered;
    * a list of ``Document`` (e.g. a ``KBRetriever``'s output): ``metadata["kb"]["origin"]``
      puts each in its block; documents of other retrievers land in ``## Context``;
    * a :class:`kb_retriever.SearchResult` (from ``KBRetriever.search`` or
      ``KnowledgeBase.search``), rendered as is.

    Output is the string of :func:`kb_retriever.compose_prompt` (the preamble with the rules,
    then the blocks), ready to be the system message. Extra keywords of ``invoke`` (``k``,
    ``filters``, ``project``, ``tenant``) are passed to the retriever for a question input.

    Example (an LCEL RAG chain)::

        from langchain_core.output_parsers import StrOutputParser
        from langchain_core.prompts import ChatPromptTemplate
        from langchain_core.runnables import RunnablePassthrough

        composer = KBPromptComposer(retriever=retriever)
        prompt = ChatPromptTemplate.from_messages(
            [("system", "{context}"), ("human", "{question}")])
        chain = ({"context": composer, "question": RunnablePassthrough()}
                 | prompt | model | StrOutputParser())
        answer = chain.invoke("which cache do we use?")
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    retriever: KBRetriever | None = None
    project: str | None = None  # the "Project:" line; default: the retriever's project
    timezone: str | None = None  # default: the knowledge base's KB_PROMPT_TIMEZONE, else UTC
    max_chars: int | None = Field(default=None, ge=1)
    template: PromptTemplate | None = None
    now: datetime | None = None  # fixes the date line (reproducible output)
    include_preamble: bool = True  # False: the blocks only, without the rules and date line

    def invoke(self, input: ComposerInput, config: RunnableConfig | None = None,
               **kwargs: Any) -> str:
        # LangChain passes `config` by keyword to a function that declares it; its type hints
        # only know the positional forms.
        return self._call_with_config(self._compose, input, config, **kwargs)  # type: ignore[arg-type]

    async def ainvoke(self, input: ComposerInput, config: RunnableConfig | None = None,
                      **kwargs: Any) -> str:
        return await self._acall_with_config(
            self._acompose, input, config, **kwargs)  # type: ignore[arg-type]

    def render(self, result: SearchResult) -> str:
        """Render a :class:`SearchResult` with this composer's options (no run, no I/O)."""
        return compose_prompt(result, project=self._project(), now=self.now,
                              timezone=self._timezone(), max_chars=self.max_chars,
                              template=self.template, include_preamble=self.include_preamble)

    # --- internals -----------------------------------------------------------------------
    def _compose(self, value: ComposerInput, config: RunnableConfig, **kwargs: Any) -> str:
        if isinstance(value, str):
            docs = self._need_retriever().invoke(value, config, **_with_context(kwargs))
            return self.render(documents_to_result(docs, value))
        return self.render(self._result(value, kwargs))

    async def _acompose(self, value: ComposerInput, config: RunnableConfig,
                        **kwargs: Any) -> str:
        if isinstance(value, str):
            retriever = self._need_retriever()
            docs = await retriever.ainvoke(value, config, **_with_context(kwargs))
            return self.render(documents_to_result(docs, value))
        return self.render(self._result(value, kwargs))

    def _result(self, value: Any, kwargs: dict[str, Any]) -> SearchResult:
        if kwargs:
            raise InputError(f"options {sorted(kwargs)} only apply to a question input")
        if isinstance(value, SearchResult):
            return value
        if isinstance(value, Sequence) and all(isinstance(d, Document) for d in value):
            return documents_to_result(value)
        raise InputError(
            "KBPromptComposer takes a question (str), a list of Document or a SearchResult, "
            f"got {type(value).__name__}"
        )

    def _need_retriever(self) -> KBRetriever:
        if self.retriever is None:
            raise InputError("a question input needs KBPromptComposer(retriever=...)")
        return self.retriever

    def _project(self) -> str | None:
        if self.project is not None:
            return self.project
        if self.retriever is None:
            return None
        chosen = self.retriever.project
        if isinstance(chosen, list):
            return ", ".join(chosen)
        return chosen or self.retriever.kb.project

    def _timezone(self) -> str:
        if self.timezone is not None:
            return self.timezone
        return self.retriever.kb.settings.prompt_timezone if self.retriever else "UTC"
