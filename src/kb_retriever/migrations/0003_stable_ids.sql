-- kb-retriever schema v3: stable ids and in-memory documents (docs/decisions/0006-install.md
-- covers the install; the ids are in docs/decisions/0007-documents.md).
--
-- A document's id is its source_path (a file's relative path, or the caller's id for a
-- document added from memory). A chunk's id (chunk_uid) is derived from its document's id and
-- its own text, so re-ingesting a changed document keeps the ids of the chunks whose text did
-- not change: the first 32 hex digits of sha256(source_path, occurrence, text) joined by U+001F,
-- where occurrence counts earlier chunks of the same document with the same text
-- (kb_retriever.store.writer.chunk_uids computes the same values). The integer kb_chunks.id stays
-- the search results' chunk_id.
ALTER TABLE kb_chunks ADD COLUMN IF NOT EXISTS chunk_uid text;

UPDATE kb_chunks c SET chunk_uid = u.uid
FROM (
    SELECT c2.tenant_id, c2.id,
           left(encode(sha256(convert_to(
               d.source_path || chr(31)
               || (row_number() OVER (PARTITION BY c2.tenant_id, c2.document_id, c2.text
                                      ORDER BY c2.chunk_order) - 1)::text
               || chr(31) || c2.text, 'UTF8')), 'hex'), 32) AS uid
    FROM kb_chunks c2
    JOIN kb_documents d ON d.tenant_id = c2.tenant_id AND d.id = c2.document_id
) u
WHERE c.tenant_id = u.tenant_id AND c.id = u.id AND c.chunk_uid IS NULL;

ALTER TABLE kb_chunks ALTER COLUMN chunk_uid SET NOT NULL;
CREATE UNIQUE INDEX IF NOT EXISTS kb_chunks_uid_uq ON kb_chunks (tenant_id, project_key, chunk_uid);

-- A document added from memory keeps its text and metadata exactly as given, so it can be
-- returned as it was added (get_by_ids, the framework vector stores). NULL for files.
ALTER TABLE kb_documents ADD COLUMN IF NOT EXISTS content text;
ALTER TABLE kb_documents ADD COLUMN IF NOT EXISTS metadata jsonb;
