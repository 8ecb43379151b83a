"""kb-retriever side of the BEIR benchmark: load the corpus through the store writer, search.

One document per abstract, shaped like the Markdown file ``# {title}\\n\\n{text}`` would be
(title and heading path = the title, chunk text = the abstract), doc_key = the BEIR ``_id``.
The vector of each chunk is the cached MiniLM vector of ``title + " " + text`` (BEIR's usual
document text), written with the chunk by :func:`kb_retriever.store.writer.write_document`.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Sequence

import numpy as np
import psycopg
from psycopg import sql
from psycopg.rows import dict_row

from kb_retriever import KnowledgeBase, Settings
from kb_retriever.models import ChunkDraft, DocumentDraft
from kb_retriever.ranking.bm25 import CorpusLexemes
from kb_retriever.search.modes import Legs
from kb_retriever.store import catalog_sql as catalog
from kb_retriever.store.fulltext import tsvector as fts
from kb_retriever.write.bulk import bulk_load

logger = logging.getLogger("beir.kb")

PROJECT = "scifact"


def load_corpus(kb: KnowledgeBase, ids: Sequence[str], titles: Sequence[str],
                bodies: Sequence[str], vectors: np.ndarray) -> dict[str, int]:
    """Write every abstract as one document with its precomputed vector, through the public
    bulk loader (binary COPY, the knowledge base's model). Returns status counts."""
    started = time.perf_counter()

    def items():
        for doc_id, title, body, vec in zip(ids, titles, bodies, vectors, strict=True):
            text = body if body.strip() else title
            yield PROJECT, DocumentDraft(
                source_path=f"{doc_id}.md", doc_key=doc_id, title=title or doc_id,
                source_type="markdown",
                content_hash=hashlib.sha256(f"{title}\n{body}".encode()).hexdigest(),
                chunks=(ChunkDraft(order=0, text=text, heading_path=title),),
            ), [vec]

    report = bulk_load(kb.url, items(), tenant=kb.tenant, embedder=kb.embedder)
    logger.info("kb-retriever: wrote %d documents in %.0fs", report.documents,
                time.perf_counter() - started)
    return {"inserted": report.documents, "updated": report.updated,
            "unchanged": report.unchanged}


def kb_search(kb: KnowledgeBase, *, cutoff: float | None = 0.0):
    """search(query, qvec, k) through the public API (the timed path). SciFact scores a ranked
    list of k documents, as the peers' vector stores return them: the adaptive cutoff (which
    trims a prompt, decision 0014) is off unless ``cutoff`` says otherwise (None: the
    settings')."""
    legs = Legs(context_cutoff=cutoff)

    def search(query: str, qvec: np.ndarray, k: int) -> list[str]:
        res = kb.search(query, limit=k, project=PROJECT, query_embedding=qvec, legs=legs)
        return [h.document.doc_key for h in res.primary]

    return search


# FTS-only: the full-text leg (store.sql.keyword_leg_sql) alone, with a choosable ranking expression.
FTS_RANKS = {
    "ts_rank_cd": "ts_rank_cd(c.tsv, q.query)",
    "ts_rank_cd/len(32)": "ts_rank_cd(c.tsv, q.query, 32)",
    "ts_rank_cd/log-len(1)": "ts_rank_cd(c.tsv, q.query, 1)",
    "ts_rank": "ts_rank(c.tsv, q.query)",
    "ts_rank/log-len(1)": "ts_rank(c.tsv, q.query, 1)",  # what the hybrid leg uses
    "ts_rank/len(2)": "ts_rank(c.tsv, q.query, 2)",
}


def fts_search(url: str, settings: Settings, *, rank: str = "ts_rank/log-len(1)",
               mode: str = "or"):
    """Rank the matching chunks by ``rank`` (a key of FTS_RANKS), tsquery form ``mode``."""
    conn = psycopg.connect(url, autocommit=True)
    with conn.cursor(row_factory=dict_row) as cur:
        corpus = CorpusLexemes.from_row(cur.execute(
            catalog.lexeme_stats_sql(), {"tenant": "default", "projects": [PROJECT]}).fetchone())
    estimates = corpus.estimates
    # the hybrid leg's own lexeme choice (store.sql.lexeme_selection_sql) and tsquery
    stmt = sql.SQL(
        "WITH {ql}, {sel}, q AS (SELECT {tsq} AS query) "
        "SELECT d.doc_key, {rank} AS s FROM kb_chunks c JOIN kb_documents d "
        "ON d.tenant_id = c.tenant_id AND d.id = c.document_id, q "
        "WHERE c.tsv @@ q.query AND c.tenant_id = %(tenant)s AND c.project_key = %(project)s "
        "ORDER BY s DESC, c.id LIMIT %(k)s"
    ).format(ql=fts.QUERY_LEXEMES, tsq=fts.tsquery_sql(mode, 0), rank=sql.SQL(FTS_RANKS[rank]),
             sel=fts.lexeme_selection_sql(fts.LexemeBudget(*estimates) if estimates else None,
                                        settings.fts_match_cap))

    def search(query: str, _qvec: np.ndarray, k: int) -> list[str]:
        rows = conn.execute(stmt, {"tenant": "default", "project": PROJECT, "k": k,
                                   "fts_lang": settings.fts_language, "fts_text": query})
        return [r[0] for r in rows]

    return search, conn.close
