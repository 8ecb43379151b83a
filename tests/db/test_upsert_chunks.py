"""KnowledgeBase.upsert_chunks: chunks added and replaced by id, versions replaced whole."""

from __future__ import annotations

import pytest

from kb_retriever import InputError

pytestmark = pytest.mark.db

META = {"slug": "dec-q", "type": "decision", "status": "accepted", "title": "Queues"}


def test_chunks_are_added_replaced_and_kept(make_kb):
    kb = make_kb()
    ids = kb.upsert_chunks("dec-q", [{"text": "We use Kafka.", "id": "a"},
                                     {"text": "Topics per domain.", "id": "b"}], metadata=META)
    assert ids == ["a", "b"]
    kb.upsert_chunks("dec-q", [{"text": "Retention is 7 days.", "id": "c"},
                               {"text": "Topics per team.", "id": "b"}], metadata=META)
    (doc,) = kb.get_by_ids(["dec-q"])
    assert [(c.id, c.text) for c in doc.chunks] == [
        ("a", "We use Kafka."), ("b", "Topics per team."), ("c", "Retention is 7 days.")]
    assert doc.text == "We use Kafka.\n\nTopics per team.\n\nRetention is 7 days."
    assert doc.source_type == "chunks" and doc.canonical_status == "accepted"
    hit = kb.search("kafka retention", limit=3).primary[0]
    assert hit.document.slug == "dec-q" and hit.chunk_uid in {"a", "c"}


def test_a_new_version_replaces_every_chunk_and_a_same_text_replaces_its_twin(make_kb):
    kb = make_kb()
    kb.upsert_chunks("doc", [{"text": "one", "id": "n1"}, {"text": "two", "id": "n2"}],
                     version="h1")
    kb.upsert_chunks("doc", [{"text": "two", "id": "n3"}, {"text": "three", "id": "n4"}],
                     version="h1")
    assert [(c.id, c.text) for c in kb.get_by_ids(["doc"])[0].chunks] == [
        ("n1", "one"), ("n3", "two"), ("n4", "three")]
    kb.upsert_chunks("doc", [{"text": "fresh", "id": "n5"}], version="h2")
    assert [c.id for c in kb.get_by_ids(["doc"])[0].chunks] == ["n5"]


def test_bad_calls_write_nothing(make_kb):
    kb = make_kb()
    with pytest.raises(InputError):
        kb.upsert_chunks("doc", [])
    with pytest.raises(InputError, match="differ"):
        kb.upsert_chunks("doc", [{"text": "a", "id": "x"}, {"text": "b", "id": "x"}])
    with pytest.raises(InputError):
        kb.upsert_chunks("doc", "not chunks")
    assert kb.get_by_ids(["doc"]) == []


def test_two_stored_chunks_of_one_text_stand_for_two_new_ones(make_kb):
    """A version added again under new ids (LlamaIndex gives every node a new id) whose two
    chunks share a text: only one stored chunk stood for that text, so the second was added
    anew and every insert of the same document grew it by a chunk."""
    kb = make_kb()
    texts = ["Boilerplate.", "Chapter one.", "Boilerplate.", "Chapter two."]
    for round_ in range(3):
        kb.upsert_chunks("book", [{"text": t, "id": f"r{round_}-{i}"} for i, t in enumerate(texts)],
                         version="v1")
        (doc,) = kb.get_by_ids(["book"])
        assert [c.text for c in doc.chunks] == texts
    # a chunk the call names keeps its place, and does not stand in for another of its text
    kb.upsert_chunks("book", [{"text": "Boilerplate.", "id": "r2-0"},
                              {"text": "Boilerplate.", "id": "new"}], version="v1")
    (doc,) = kb.get_by_ids(["book"])
    assert [c.id for c in doc.chunks] == ["r2-0", "r2-1", "new", "r2-3"]


def test_an_id_names_a_document_or_a_part_whichever_was_written_last(make_kb):
    """add_documents and upsert_chunks under one id: the later write removes the other kind
    in its own transaction (the LangChain store's ids rest on it)."""
    kb = make_kb()
    kb.add_documents([{"text": "A document of its own.", "id": "x"}])
    kb.upsert_chunks("dec-q", [{"text": "A part.", "id": "x"}, {"text": "Another.", "id": "y"}],
                     metadata=META)
    assert kb.get_by_ids(["x"]) == []
    assert [c.text for c in kb.get_chunks(["x"])] == ["A part."]
    kb.add_documents([{"text": "Its own again.", "id": "x"}])
    assert kb.get_chunks(["x"]) == []
    assert [d.text for d in kb.get_by_ids(["x"])] == ["Its own again."]
    assert [c.id for c in kb.get_by_ids(["dec-q"])[0].chunks] == ["y"]  # the other part stays
    # a part whose id is its document's own slug removes nothing of that document
    kb.upsert_chunks("dec-q", [{"text": "The slug's part.", "id": "dec-q"}], metadata=META)
    assert [c.id for c in kb.get_by_ids(["dec-q"])[0].chunks] == ["y", "dec-q"]


@pytest.mark.parametrize("run", ["sync", "async"])
def test_delete_named_deletes_what_each_id_names_in_one_call(make_kb, run: str) -> None:
    """A document of its own by its id, a part by its id, and never a document that holds
    parts by its own id (a part may have that id: then that part alone goes). The LangChain
    store deleted in three calls: a read of the documents, their delete, the parts' delete."""
    import asyncio

    kb = make_kb()
    kb.add_documents([{"text": "A document of its own.", "id": "own"},
                      {"text": "Another of its own.", "id": "kept"}])
    kb.upsert_chunks("dec-q", [{"text": "A part.", "id": "p1"}, {"text": "Its slug.", "id": "dec-q"},
                               {"text": "The last.", "id": "p3"}], metadata=META)
    ids = ["own", "p1", "dec-q", "nothing"]
    gone = kb.delete_named(ids) if run == "sync" else asyncio.run(kb.adelete_named(ids))
    assert gone == 3  # one document, two parts
    assert [d.id for d in kb.get_by_ids(["own", "kept", "dec-q"])] == ["kept", "dec-q"]
    assert [c.id for c in kb.get_by_ids(["dec-q"])[0].chunks] == ["p3"]
    assert kb.delete_named(["p3"]) == 1 and kb.get_by_ids(["dec-q"]) == []  # its last part
    with pytest.raises(InputError):
        kb.delete_named([None])


def test_chunks_of_one_text_and_other_metadata_are_other_pieces(make_kb):
    """Within one version a later chunk of a stored chunk's text replaced it whatever its
    metadata: a footer on page 2, written in a later call, took page 1's away."""
    kb = make_kb()
    kb.upsert_chunks("report", [{"text": "Findings.", "id": "a", "metadata": {"page": 1}},
                                {"text": "Confidential.", "id": "b", "metadata": {"page": 1}}],
                     version="v1")
    kb.upsert_chunks("report", [{"text": "Confidential.", "id": "c", "metadata": {"page": 2}}],
                     version="v1")
    (doc,) = kb.get_by_ids(["report"])
    assert [(c.id, c.metadata["page"]) for c in doc.chunks] == [("a", 1), ("b", 1), ("c", 2)]
    # the caller says what tells pieces apart: here only the page
    kb.upsert_chunks("report", [{"text": "Confidential.", "id": "d",
                                 "metadata": {"page": 2, "seen": "again"}}],
                     version="v1", piece_key=lambda m: m.get("page"))
    (doc,) = kb.get_by_ids(["report"])
    assert [c.id for c in doc.chunks] == ["a", "b", "d"]
