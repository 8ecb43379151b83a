-- kb-retriever schema v2. kb_chunks_doc_ix duplicated the index behind
-- UNIQUE (tenant_id, document_id, chunk_order): one more B-tree to maintain on every insert
-- for no query it could serve better.
DROP INDEX IF EXISTS kb_chunks_doc_ix;
