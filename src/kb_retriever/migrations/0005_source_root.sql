-- The ingest root a file was found under, so that prune removes exactly the documents whose
-- files under the given roots are gone (NULL: written before 0005, or not from a file).
ALTER TABLE kb_documents ADD COLUMN IF NOT EXISTS source_root text;
