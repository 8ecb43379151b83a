-- kb-retriever schema v1. The embedding dimension and the FTS language are fixed at first use
-- (store/schema.py adds the typed vector column, the generated tsvector and their indexes).
-- Every table that holds tenant data carries tenant_id, and every
-- primary, unique and foreign key includes it, so tables can be distributed by tenant (Citus).
CREATE EXTENSION IF NOT EXISTS vector;

CREATE TABLE IF NOT EXISTS kb_meta (
    key   text PRIMARY KEY,
    value text NOT NULL
);

CREATE TABLE IF NOT EXISTS kb_documents (
    tenant_id          text        NOT NULL,
    id                 bigint      GENERATED ALWAYS AS IDENTITY,
    project_key        text        NOT NULL,
    source_path        text        NOT NULL,
    doc_key            text        NOT NULL,
    title              text        NOT NULL,
    source_type        text        NOT NULL,
    content_hash       text        NOT NULL,
    doc_id             text,
    slug               text,
    is_canonical       boolean     NOT NULL DEFAULT false,
    canonical_type     text,
    canonical_status   text,
    retrieval_priority smallint    NOT NULL DEFAULT 50 CHECK (retrieval_priority BETWEEN 0 AND 100),
    generation_source  text        NOT NULL DEFAULT 'human',
    evidence_tier      text,
    tags               text[]      NOT NULL DEFAULT '{}',
    owners             text[]      NOT NULL DEFAULT '{}',
    summary            text,
    language           text,
    doc_date           timestamptz,
    frontmatter        jsonb       NOT NULL DEFAULT '{}',
    indexed_at         timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, id),
    UNIQUE (tenant_id, project_key, source_path)
);
CREATE UNIQUE INDEX IF NOT EXISTS kb_documents_slug_uq
    ON kb_documents (tenant_id, project_key, slug) WHERE slug IS NOT NULL;
CREATE INDEX IF NOT EXISTS kb_documents_rejected_ix
    ON kb_documents (tenant_id, project_key)
    WHERE is_canonical AND canonical_type = 'rejected-approach';

CREATE TABLE IF NOT EXISTS kb_chunks (
    tenant_id     text      NOT NULL,
    id            bigint    GENERATED ALWAYS AS IDENTITY,
    document_id   bigint    NOT NULL,
    project_key   text      NOT NULL,
    chunk_order   integer   NOT NULL,
    heading_path  text      NOT NULL DEFAULT '',
    text          text      NOT NULL,
    text_hash     text      NOT NULL,
    search_prefix text      NOT NULL DEFAULT '',
    metadata      jsonb     NOT NULL DEFAULT '{}',
    embedding     vector    NOT NULL,
    PRIMARY KEY (tenant_id, id),
    UNIQUE (tenant_id, document_id, chunk_order),
    FOREIGN KEY (tenant_id, document_id) REFERENCES kb_documents (tenant_id, id) ON DELETE CASCADE
);
CREATE INDEX IF NOT EXISTS kb_chunks_scope_ix ON kb_chunks (tenant_id, project_key);

CREATE TABLE IF NOT EXISTS kb_edges (
    tenant_id          text    NOT NULL,
    id                 bigint  GENERATED ALWAYS AS IDENTITY,
    project_key        text    NOT NULL,
    from_slug          text    NOT NULL,
    to_slug            text    NOT NULL,
    edge_type          text    NOT NULL,
    weight             real    NOT NULL,
    provenance         text    NOT NULL,
    source_document_id bigint  NOT NULL,
    PRIMARY KEY (tenant_id, id),
    UNIQUE (tenant_id, project_key, from_slug, to_slug, edge_type),
    FOREIGN KEY (tenant_id, source_document_id) REFERENCES kb_documents (tenant_id, id)
        ON DELETE CASCADE
);
CREATE INDEX IF NOT EXISTS kb_edges_to_ix ON kb_edges (tenant_id, project_key, to_slug);

CREATE TABLE IF NOT EXISTS kb_synonyms (
    tenant_id   text    NOT NULL,
    project_key text    NOT NULL,
    term        text    NOT NULL,
    synonyms    text[]  NOT NULL DEFAULT '{}',
    enabled     boolean NOT NULL DEFAULT true,
    PRIMARY KEY (tenant_id, project_key, term)
);

CREATE TABLE IF NOT EXISTS kb_embedding_cache (
    tenant_id text   NOT NULL,
    model_id  text   NOT NULL,
    text_hash text   NOT NULL,
    embedding vector NOT NULL,
    PRIMARY KEY (tenant_id, model_id, text_hash)
);
