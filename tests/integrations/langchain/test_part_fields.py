"""The splits of one canonical document keep their own metadata: the document holds only the
fields that all of its parts share, so a filter on a key some parts lack never matches them
through their document (the filters read a part's metadata, then its document's fields)."""

from __future__ import annotations

import pytest
from langchain_core.documents import Document
from langchain_kb_retriever import KBVectorStore

from kb_retriever import HashingEmbedder, KnowledgeBase

pytestmark = pytest.mark.db

ADR = {"slug": "dec-billing", "type": "decision", "status": "accepted", "team": "billing"}


def _part(i: int, text: str, **extra: str) -> Document:
    return Document(id=f"part-{i}", page_content=text, metadata={**ADR, **extra})


def _found(store: KBVectorStore, flt: dict) -> list[str]:
    return sorted(d.id for d in store.similarity_search("billing service", k=10, filter=flt)
                  if d.id is not None)


@pytest.mark.parametrize("use_async", [False, True])
async def test_a_key_only_some_parts_have_filters_those_parts_alone(make_kb, use_async):
    kb: KnowledgeBase = make_kb(embedder=HashingEmbedder(128))
    store = KBVectorStore(kb=kb)
    first = [_part(0, "Intro to the billing service.", section="intro"),
             _part(1, "Retries in the billing service.")]
    later = [_part(2, "Logs of the billing service.", section="appendix")]
    for parts in (first, later):  # the second call adds parts to the stored document
        if use_async:
            await store.aadd_documents(parts)
        else:
            store.add_documents(parts)
    assert _found(store, {"section": "appendix"}) == ["part-2"]
    assert _found(store, {"section": "intro"}) == ["part-0"]
    assert _found(store, {"section": {"$exists": False}}) == ["part-1"]
    assert _found(store, {"team": "billing"}) == ["part-0", "part-1", "part-2"]
    (doc,) = kb.get_by_ids(["dec-billing"])
    assert dict(doc.metadata) == ADR
    assert (doc.canonical_status, doc.slug, len(doc.chunks)) == ("accepted", "dec-billing", 3)
    # a part given again with other metadata: its old fields no longer count
    store.add_documents([_part(1, "Retries in the billing service.", section="body")])
    (doc,) = kb.get_by_ids(["dec-billing"])
    assert dict(doc.metadata) == ADR
    store.add_documents([_part(i, d.page_content, section="all") for i, d in
                         enumerate([*first, *later])])
    (doc,) = kb.get_by_ids(["dec-billing"])
    assert dict(doc.metadata) == {**ADR, "section": "all"}
