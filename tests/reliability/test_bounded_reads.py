"""Reading a document back costs its size, not size x chunks; a document's size is bounded at
write (issue 23: a 2 MB document of 500 sections read back 3.5 GB)."""

from __future__ import annotations

import tracemalloc

import pytest

from kb_retriever import InputError, Settings
from kb_retriever.ingest.loaders import MAX_FILE_BYTES

pytestmark = pytest.mark.db


def _big(sections: int, words: int) -> str:
    return "# Big\n\n" + "\n\n".join(
        f"## Section {s}\n\n" + " ".join(f"word{s}x{w}" for w in range(words))
        for s in range(sections))


def test_a_2mb_document_of_500_sections_reads_back_in_memory_bounded_by_its_size(make_kb):
    kb = make_kb(settings=Settings(chunk_hard_cap_tokens=1200))
    text = _big(500, 360)
    assert 2_000_000 < len(text) < 3_000_000
    (doc_id,) = kb.add_documents([{"text": text, "id": "big"}])
    tracemalloc.start()
    try:
        (doc,) = kb.get_by_ids([doc_id])
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert doc.text == text and len(doc.chunks) >= 500
    # the text twice (the document's and its chunks') and the rows' overhead, not 500 copies
    assert peak < 8 * len(text), peak


def test_a_document_over_the_size_limit_is_refused_before_writing(make_kb):
    kb = make_kb()
    too_big = "x " * (MAX_FILE_BYTES // 2 + 10)
    with pytest.raises(InputError, match="MB"):
        kb.add_documents([{"text": too_big, "id": "huge"}])
    pieces = [{"text": "y " * (MAX_FILE_BYTES // 8), "id": f"c{i}"} for i in range(5)]
    with pytest.raises(InputError, match="MB of text"):
        kb.add_documents([{"text": "", "id": "huge", "chunks": pieces}])
    with pytest.raises(InputError, match="KB_INGEST_MAX_CHUNKS"):
        make_kb(settings=Settings(ingest_max_chunks=3)).add_documents(
            [{"text": "", "id": "many", "chunks": [{"text": f"c{i}"} for i in range(4)]}])
    assert kb.get_by_ids(["huge"]) == []
