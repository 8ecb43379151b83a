"""Per-scope lexeme statistics (migration 0004): another tenant's ingest changes no score, and
nothing in a result reveals another tenant's vocabulary (issue 16, item 3)."""

from __future__ import annotations

import psycopg
import pytest

pytestmark = pytest.mark.db

DOCS = {
    "cache.md": "# Cache\n\nThe session cache is Redis with a ttl of fifteen minutes.\n",
    "queue.md": "# Queue\n\nOrders go through the kafka topic orders-v2, twelve partitions.\n",
    "backup.md": "# Backups\n\nPostgres backups run nightly and are kept thirty days.\n",
}
SECRET = "zanzibarquokka"


def _write(root, files):
    root.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (root / name).write_text(text, encoding="utf-8")
    return root


def _scores(result):
    return [(h.chunk_id, h.score, h.scores.keyword) for h in (*result.primary, *result.runner_up)]


def test_another_tenants_ingest_changes_no_score_and_leaks_no_word(make_kb, tmp_path):
    kb = make_kb()
    kb.ingest([_write(tmp_path / "mine", DOCS)], tenant="mine")
    queries = ("how long is the redis session cache ttl", "kafka orders partitions",
               f"{SECRET} cache backups")
    before = [kb.search(q, tenant="mine", limit=3) for q in queries]

    # Another tenant writes many chunks full of the same words and a secret one.
    theirs = {f"t{i}.md": f"# Cache {i}\n\nredis cache ttl kafka orders {SECRET} backups "
                          f"postgres nightly {i}\n" for i in range(40)}
    kb.ingest([_write(tmp_path / "theirs", theirs)], tenant="other")
    kb.clear_caches()
    after = [kb.search(q, tenant="mine", limit=3) for q in queries]

    for b, a in zip(before, after, strict=True):
        assert _scores(a) == _scores(b)  # identical to the last digit
        assert a.meta["lexeme_stats"] == b.meta["lexeme_stats"]
    probe = after[2].meta["lexeme_stats"]["freqs"]
    # the secret word is unknown in my scope (None), as before the other tenant's ingest
    assert any("zanzibar" in lex for lex in probe) and all(
        probe[lex] is None for lex in probe if "zanzibar" in lex)


def test_counts_follow_updates_and_deletes(make_kb, tmp_path):
    kb = make_kb()
    root = _write(tmp_path / "kb", DOCS)
    kb.ingest([root])

    def counts():
        with psycopg.connect(kb.url) as conn:
            lex = dict(conn.execute(
                "SELECT lexeme, chunks FROM kb_lexemes WHERE tenant_id = 'default' "
                "AND project_key = 'default'").fetchall())
            n = conn.execute("SELECT chunks FROM kb_scope_stats WHERE tenant_id = 'default' "
                             "AND project_key = 'default'").fetchone()[0]
            truth = dict(conn.execute(
                "SELECT u.lexeme, count(*) FROM kb_chunks c, unnest(c.tsv) u "
                "WHERE c.tenant_id = 'default' AND c.project_key = 'default' "
                "GROUP BY u.lexeme").fetchall())
            real_n = conn.execute("SELECT count(*) FROM kb_chunks").fetchone()[0]
        return lex, n, truth, real_n

    lex, n, truth, real_n = counts()
    assert lex == truth and n == real_n and lex["redi"] == 1
    (root / "cache.md").write_text("# Cache\n\nWe replaced Redis with Valkey.\n", encoding="utf-8")
    (root / "backup.md").unlink()
    kb.ingest([root], prune=True)
    lex, n, truth, real_n = counts()
    assert lex == truth and n == real_n
    assert "nightli" not in lex and lex["valkey"] == 1
