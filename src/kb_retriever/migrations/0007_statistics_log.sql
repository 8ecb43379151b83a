-- kb-retriever schema v7: statistics without triggers (docs/decisions/0010-write-path.md).
--
-- Migration 0004 kept the per-scope lexeme counts with statement triggers on kb_chunks that
-- upserted shared counter rows inside every writer's transaction: writers of one project
-- queued on those rows, could deadlock across a replace's delete and insert, and Citus cannot
-- distribute a table with triggers. Now each write appends one row to kb_lexeme_log (the
-- lexemes its chunks added or removed, and the chunk count), in its own transaction and with
-- no lock on any shared row; a compaction folds the log into kb_lexemes / kb_scope_stats
-- after the write commits, one compactor per scope at a time. Readers sum both, so the
-- statistics are exact at every moment.
DROP TRIGGER IF EXISTS kb_chunks_lexemes_ins ON kb_chunks;
DROP TRIGGER IF EXISTS kb_chunks_lexemes_del ON kb_chunks;
DROP TRIGGER IF EXISTS kb_chunks_lexemes_upd ON kb_chunks;
DROP FUNCTION IF EXISTS kb_chunks_count_lexemes();

CREATE TABLE IF NOT EXISTS kb_lexeme_log (
    tenant_id   text     NOT NULL,
    id          bigint   GENERATED ALWAYS AS IDENTITY,
    project_key text     NOT NULL,
    chunks      bigint   NOT NULL,  -- chunks added (+) or removed (-) by one write
    lexemes     text[]   NOT NULL,  -- sorted
    deltas      bigint[] NOT NULL,  -- chunks holding each lexeme, added (+) or removed (-)
    PRIMARY KEY (tenant_id, id)
);
CREATE INDEX IF NOT EXISTS kb_lexeme_log_scope_ix ON kb_lexeme_log (tenant_id, project_key);

-- A chunk's full-text configuration: the writer stores its document's language code (NULL:
-- the database's default), and the tsv column maps it to a configuration by a CASE of
-- literals (store/schema.py rebuilds the column with that expression, after this file). The
-- trigger that filled fts_config from kb_documents is gone with the column.
DROP TRIGGER IF EXISTS kb_chunks_fts_config_ins ON kb_chunks;
DROP FUNCTION IF EXISTS kb_chunks_fts_config();
ALTER TABLE kb_chunks ADD COLUMN IF NOT EXISTS fts_lang text;
UPDATE kb_chunks c SET fts_lang = lower(d.language) FROM kb_documents d
WHERE d.tenant_id = c.tenant_id AND d.id = c.document_id
  AND lower(d.language) IN ('en', 'it', 'fr', 'de', 'es', 'pt', 'nl', 'da', 'fi', 'hu', 'no',
                            'nb', 'ru', 'sv', 'tr');
