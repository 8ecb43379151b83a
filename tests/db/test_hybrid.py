"""Hybrid search rescues an exact identifier that the vector leg alone misses."""

from __future__ import annotations

import pytest

from kb_retriever import Settings

pytestmark = pytest.mark.db

NOTES = {
    "checkout-timeouts.md": "# Checkout timeouts\n\nCheckout requests time out when the payment "
    "provider is slow. We retry twice with jitter and then show the customer an error page.",
    "checkout-errors.md": "# Checkout errors\n\nCustomers sometimes see an error during checkout. "
    "Most errors come from card declines or expired sessions and resolve on retry.",
    "payment-retries.md": "# Payment retries\n\nFailed payment calls during checkout are retried "
    "with exponential backoff. Alerting fires when the error rate passes two percent.",
    "quota-ledger.md": "# Ledger quota\n\nThe ledger service rejects writes beyond the tenant's "
    "monthly allowance with code E_QUOTA_7731; raise the allowance in the billing console.",
    "cart-service.md": "# Cart service\n\nThe cart keeps items for seven days and recalculates "
    "prices at checkout. Errors in pricing are logged to the cart error stream.",
}
QUERY = "E_QUOTA_7731 error at checkout"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("hybrid")
    for name, text in NOTES.items():
        (root / name).write_text(text)
    return root


def test_vector_leg_alone_misses_identifier_that_hybrid_finds(make_kb, minilm, corpus):
    # the vector leg alone: no FTS leg, no reranking (pure cosine order)
    semantic = make_kb(minilm, Settings(hybrid_search_enabled=False, reranking_enabled=False))
    semantic.ingest([corpus])
    top_semantic = semantic.search(QUERY, limit=1).primary[0]
    assert "E_QUOTA_7731" not in top_semantic.text

    hybrid = make_kb(minilm, Settings(hybrid_search_enabled=True))
    hybrid.ingest([corpus])
    result = hybrid.search(QUERY, limit=1)
    top = result.primary[0]
    assert "E_QUOTA_7731" in top.text
    assert top.scores.fts_rank is not None  # found by the FTS leg too
    assert result.meta["search_strategy"]["fts_enabled"] is True


def test_the_statements_fused_scores_order_as_pythons(new_database):
    """The one statement computed ``0.7 / (60 + rank)`` in numeric (the weights were untyped
    literals), where ``fusion.fuse_legs`` computes doubles: 17 pairs of ranks up to 50 that tie
    in numeric do not in doubles, so the two forms of the legs kept different chunks at the
    rerank pool's edge."""
    import psycopg
    from psycopg import sql

    from kb_retriever.store.literal import Literal
    from kb_retriever.store.sql import _FUSED

    ranks = [(v, f) for v in range(1, 51) for f in range(1, 51)]
    fused = _FUSED.format(wv=Literal(0.7), wf=Literal(0.3), rrf_k=Literal(60))
    with psycopg.connect(new_database()) as conn:
        rows = conn.execute(sql.SQL(
            "SELECT vector_rank, fts_rank FROM unnest(%s::int[], %s::int[]) AS t(vector_rank, "
            "fts_rank) ORDER BY {} DESC, vector_rank, fts_rank").format(fused),
            [[v for v, _ in ranks], [f for _, f in ranks]]).fetchall()
    python = sorted(ranks, key=lambda r: (-(0.7 / (60 + r[0]) + 0.3 / (60 + r[1])), r))
    assert rows == python
