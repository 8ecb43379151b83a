"""What a concurrency test checks afterwards, on the database itself."""

from __future__ import annotations

from collections.abc import Sequence

import psycopg

from kb_retriever import Settings
from kb_retriever.models import DocumentRecord
from kb_retriever.write.from_memory import record_draft

from .storm_corpus import version_text


def _versions(doc_id: str) -> list[list[str]]:
    settings = Settings()
    return [[c.text for c in record_draft(DocumentRecord(text=version_text(doc_id, v), id=doc_id,
                                                         metadata={"storm": True}),
                                          settings).chunks] for v in range(4)]


def assert_whole_versions(url: str, project: str, ids: Sequence[str]) -> None:
    """Each id is absent, or one of its versions with a suffix of chunks deleted by id…: every
    stored chunk belongs to one single version, in that version's order."""
    with psycopg.connect(url) as conn:
        for doc_id in ids:
            rows = conn.execute(
                "SELECT c.text FROM kb_documents d JOIN kb_chunks c ON c.tenant_id = d.tenant_id "
                "AND c.document_id = d.id WHERE d.project_key = %s AND d.source_path = %s "
                "ORDER BY c.chunk_order", [project, doc_id]).fetchall()
            texts = [r[0] for r in rows]
            if not texts:
                continue
            matches = [v for v in _versions(doc_id) if all(t in v for t in texts)]
            assert matches, f"{doc_id}: its chunks mix versions"
            order = [matches[0].index(t) for t in texts]
            assert order == sorted(order), f"{doc_id}: chunks out of order"
            n_docs = conn.execute("SELECT count(*) FROM kb_documents WHERE project_key = %s "
                                  "AND source_path = %s", [project, doc_id]).fetchone()
            assert n_docs is not None and n_docs[0] == 1


def assert_statistics_exact(url: str) -> None:
    """The statistics as searches read them (the folded counts plus the log not yet folded)
    equal a recount of the chunks, per scope and lexeme."""
    with psycopg.connect(url) as conn:
        stored = conn.execute(
            "SELECT tenant_id, project_key, lexeme, sum(n) FROM ("
            "SELECT tenant_id, project_key, lexeme, chunks AS n FROM kb_lexemes UNION ALL "
            "SELECT l.tenant_id, l.project_key, u.lexeme, u.n FROM kb_lexeme_log l, "
            "unnest(l.lexemes, l.deltas) AS u(lexeme, n)) t GROUP BY 1, 2, 3 "
            "HAVING sum(n) <> 0 ORDER BY 1, 2, 3").fetchall()
        counted = conn.execute(
            "SELECT c.tenant_id, c.project_key, u.lexeme, count(*) FROM kb_chunks c, "
            "unnest(c.tsv) AS u GROUP BY 1, 2, 3 ORDER BY 1, 2, 3").fetchall()
        assert stored == counted
        totals = conn.execute(
            "SELECT tenant_id, project_key, sum(n) FROM (SELECT tenant_id, project_key, "
            "chunks AS n FROM kb_scope_stats UNION ALL SELECT tenant_id, project_key, chunks "
            "FROM kb_lexeme_log) t GROUP BY 1, 2 HAVING sum(n) <> 0 ORDER BY 1, 2").fetchall()
        actual = conn.execute("SELECT tenant_id, project_key, count(*) FROM kb_chunks "
                              "GROUP BY 1, 2 ORDER BY 1, 2").fetchall()
        assert totals == actual
        negative = conn.execute("SELECT count(*) FROM kb_lexemes WHERE chunks <= 0").fetchone()
        assert negative == (0,)
