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
