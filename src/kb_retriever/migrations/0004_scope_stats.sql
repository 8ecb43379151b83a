-- kb-retriever schema v4: statistics kept per scope by the project itself (docs/decisions/
-- 0009-trust-channels.md). BM25 document frequencies used to come from pg_stats, which is
-- database-wide: another tenant's ingest moved a tenant's scores, and the frequencies shown in
-- meta["lexeme_stats"] revealed other tenants' words. Now every write to kb_chunks (the
-- document writer, bulk loads, cascaded deletes) updates the counts of its own (tenant,
-- project) in the same transaction, through statement-level triggers with transition tables.

-- Chunks per (tenant, project) that hold each lexeme.
CREATE TABLE IF NOT EXISTS kb_lexemes (
    tenant_id   text   NOT NULL,
    project_key text   NOT NULL,
    lexeme      text   NOT NULL,
    chunks      bigint NOT NULL,
    PRIMARY KEY (tenant_id, project_key, lexeme)
);
-- The scope's most common lexemes are read by count (store/sql.py lexeme_stats_sql).
CREATE INDEX IF NOT EXISTS kb_lexemes_count_ix ON kb_lexemes (tenant_id, project_key, chunks DESC);

-- Chunk count per (tenant, project), and the refusal gate's calibration: the top-1 cosine of
-- each off-topic probe sentence in the project (ranking/calibration.py), for the embedder
-- that computed it.
CREATE TABLE IF NOT EXISTS kb_scope_stats (
    tenant_id        text   NOT NULL,
    project_key      text   NOT NULL,
    chunks           bigint NOT NULL DEFAULT 0,
    probe_model      text,
    probe_version    text,
    probe_similarity real[],
    calibrated_at    timestamptz,
    PRIMARY KEY (tenant_id, project_key)
);

-- Lexemes are upserted in lexeme order, so two writers of one project lock the rows they share
-- in the same order and cannot deadlock.
CREATE OR REPLACE FUNCTION kb_chunks_count_lexemes() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP IN ('DELETE', 'UPDATE') THEN
        WITH gone AS (
            SELECT o.tenant_id, o.project_key, u.lexeme, count(*) AS n
            FROM old_rows o CROSS JOIN LATERAL unnest(o.tsv) AS u
            GROUP BY o.tenant_id, o.project_key, u.lexeme
        ), locked AS (
            SELECT l.tenant_id, l.project_key, l.lexeme FROM kb_lexemes l
            JOIN gone g USING (tenant_id, project_key, lexeme)
            ORDER BY l.tenant_id, l.project_key, l.lexeme FOR UPDATE OF l
        )
        UPDATE kb_lexemes l SET chunks = l.chunks - g.n FROM gone g, locked k
        WHERE l.tenant_id = g.tenant_id AND l.project_key = g.project_key AND l.lexeme = g.lexeme
          AND k.tenant_id = g.tenant_id AND k.project_key = g.project_key AND k.lexeme = g.lexeme;
        DELETE FROM kb_lexemes l USING (SELECT DISTINCT tenant_id, project_key FROM old_rows) o
        WHERE l.tenant_id = o.tenant_id AND l.project_key = o.project_key AND l.chunks <= 0;
        UPDATE kb_scope_stats s SET chunks = greatest(s.chunks - o.n, 0)
        FROM (SELECT tenant_id, project_key, count(*) AS n FROM old_rows
              GROUP BY tenant_id, project_key) o
        WHERE s.tenant_id = o.tenant_id AND s.project_key = o.project_key;
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') THEN
        INSERT INTO kb_lexemes AS l (tenant_id, project_key, lexeme, chunks)
        SELECT n.tenant_id, n.project_key, u.lexeme, count(*)
        FROM new_rows n CROSS JOIN LATERAL unnest(n.tsv) AS u
        GROUP BY n.tenant_id, n.project_key, u.lexeme
        ORDER BY n.tenant_id, n.project_key, u.lexeme
        ON CONFLICT (tenant_id, project_key, lexeme) DO UPDATE SET chunks = l.chunks + EXCLUDED.chunks;
        INSERT INTO kb_scope_stats AS s (tenant_id, project_key, chunks)
        SELECT n.tenant_id, n.project_key, count(*) FROM new_rows n
        GROUP BY n.tenant_id, n.project_key ORDER BY n.tenant_id, n.project_key
        ON CONFLICT (tenant_id, project_key) DO UPDATE SET chunks = s.chunks + EXCLUDED.chunks;
    END IF;
    RETURN NULL;
END $$;

-- Per-document full-text configuration (issue 16): a chunk is indexed with the configuration
-- of its document's language (frontmatter `language`, else detected at ingest), NULL meaning
-- the database's default (KB_FTS_LANGUAGE, kb_meta.fts_language). The tsv column reads it.
CREATE OR REPLACE FUNCTION kb_fts_config(code text) RETURNS regconfig
    LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT (CASE lower(code)
        WHEN 'en' THEN 'english' WHEN 'it' THEN 'italian' WHEN 'fr' THEN 'french'
        WHEN 'de' THEN 'german' WHEN 'es' THEN 'spanish' WHEN 'pt' THEN 'portuguese'
        WHEN 'nl' THEN 'dutch' WHEN 'da' THEN 'danish' WHEN 'fi' THEN 'finnish'
        WHEN 'hu' THEN 'hungarian' WHEN 'no' THEN 'norwegian' WHEN 'nb' THEN 'norwegian'
        WHEN 'ru' THEN 'russian' WHEN 'sv' THEN 'swedish' WHEN 'tr' THEN 'turkish'
    END)::regconfig
$$;
ALTER TABLE kb_chunks ADD COLUMN IF NOT EXISTS fts_config regconfig;

CREATE OR REPLACE FUNCTION kb_chunks_fts_config() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.fts_config IS NULL THEN
        SELECT kb_fts_config(d.language) INTO NEW.fts_config FROM kb_documents d
        WHERE d.tenant_id = NEW.tenant_id AND d.id = NEW.document_id;
    END IF;
    RETURN NEW;
END $$;
DROP TRIGGER IF EXISTS kb_chunks_fts_config_ins ON kb_chunks;
CREATE TRIGGER kb_chunks_fts_config_ins BEFORE INSERT ON kb_chunks
    FOR EACH ROW EXECUTE FUNCTION kb_chunks_fts_config();

-- An existing database: index each chunk with its document's configuration (the generated
-- column is rebuilt with the new expression; store/schema.py builds the same on a new one).
DO $$
DECLARE
    lang text;
BEGIN
    IF EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = 'kb_chunks'::regclass
               AND attname = 'tsv' AND NOT attisdropped) THEN
        SELECT value INTO lang FROM kb_meta WHERE key = 'fts_language';
        UPDATE kb_chunks c SET fts_config = kb_fts_config(d.language) FROM kb_documents d
        WHERE d.tenant_id = c.tenant_id AND d.id = c.document_id AND d.language IS NOT NULL;
        ALTER TABLE kb_chunks DROP COLUMN tsv;
        EXECUTE format('ALTER TABLE kb_chunks ADD COLUMN tsv tsvector GENERATED ALWAYS AS '
                       '(to_tsvector(coalesce(fts_config, %L::regconfig), '
                       'search_prefix || '' '' || text)) STORED', coalesce(lang, 'english'));
        ALTER TABLE kb_chunks ALTER COLUMN tsv SET STORAGE MAIN;
        CREATE INDEX IF NOT EXISTS kb_chunks_tsv_ix ON kb_chunks USING gin (tsv);
    END IF;
END $$;

DROP TRIGGER IF EXISTS kb_chunks_lexemes_ins ON kb_chunks;
CREATE TRIGGER kb_chunks_lexemes_ins AFTER INSERT ON kb_chunks
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION kb_chunks_count_lexemes();
DROP TRIGGER IF EXISTS kb_chunks_lexemes_del ON kb_chunks;
CREATE TRIGGER kb_chunks_lexemes_del AFTER DELETE ON kb_chunks
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION kb_chunks_count_lexemes();
DROP TRIGGER IF EXISTS kb_chunks_lexemes_upd ON kb_chunks;
CREATE TRIGGER kb_chunks_lexemes_upd AFTER UPDATE ON kb_chunks
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION kb_chunks_count_lexemes();

-- An existing database: count what it holds (a new one has no tsv column yet, and no rows).
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = 'kb_chunks'::regclass
               AND attname = 'tsv' AND NOT attisdropped) THEN
        DELETE FROM kb_lexemes;
        DELETE FROM kb_scope_stats;
        INSERT INTO kb_lexemes (tenant_id, project_key, lexeme, chunks)
        SELECT c.tenant_id, c.project_key, u.lexeme, count(*)
        FROM kb_chunks c CROSS JOIN LATERAL unnest(c.tsv) AS u
        GROUP BY c.tenant_id, c.project_key, u.lexeme;
        INSERT INTO kb_scope_stats (tenant_id, project_key, chunks)
        SELECT tenant_id, project_key, count(*) FROM kb_chunks GROUP BY tenant_id, project_key;
    END IF;
END $$;
