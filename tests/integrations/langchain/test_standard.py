"""LangChain's own conformance suite, run against a real knowledge base (examples/kb)."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_kb_retriever import KBRetriever
from langchain_tests.integration_tests import RetrieversIntegrationTests

from kb_retriever import KnowledgeBase

pytestmark = pytest.mark.db


class TestKBRetrieverStandard(RetrieversIntegrationTests):
    # The suite reads its parameters from properties, so the knowledge base is bound to the
    # test instance by an autouse fixture before any property is read. It is the async-safe
    # handle (see conftest): the suite's ainvoke test runs in a loop of its own.
    @pytest.fixture(autouse=True)
    def _bind_kb(self, async_example_kb: KnowledgeBase) -> None:
        self._kb = async_example_kb

    @property
    def retriever_constructor(self) -> type[KBRetriever]:
        return KBRetriever

    @property
    def retriever_constructor_params(self) -> dict[str, Any]:
        return {"kb": self._kb, "k": 2}

    @property
    def retriever_query_example(self) -> str:
        return "which cache layer do we use?"
