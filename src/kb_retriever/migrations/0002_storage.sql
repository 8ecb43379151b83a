-- kb-retriever schema v2: storage for speed. kb_chunks_doc_ix duplicated the index behind
-- UNIQUE (tenant_id, document_id, chunk_order): one more B-tree to maintain on every insert
-- for no query it could serve better.
DROP INDEX IF EXISTS kb_chunks_doc_ix;

-- The FTS leg ranks up to KB_FTS_MATCH_CAP tsvectors per search: keep them in the heap row
-- rather than in TOAST (store/schema.py TSV_INLINE does the same for new databases, where the
-- column is added at first use). Rows written from now on are stored this way.
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = 'kb_chunks'::regclass
               AND attname = 'tsv' AND NOT attisdropped) THEN
        ALTER TABLE kb_chunks ALTER COLUMN tsv SET STORAGE MAIN;
    END IF;
END $$;
