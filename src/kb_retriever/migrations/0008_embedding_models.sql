-- kb-retriever schema v8: several embedding models in one database (decision 0013).
--
-- Before, the database fixed one embedding dimension at first use (a typed vector(d) column
-- and one HNSW index). Now each embedding model (its id and dimension) is a row of kb_models
-- with an approximate index of its own: a partial HNSW index over the expression
-- embedding::vector(d) (or ::halfvec(d)) for that model's chunks. The column is untyped, so
-- chunks of different dimensions live in one table. Each project is bound to one model in
-- kb_projects: its writes and searches use that model, and a re-embed moves it to another.
-- store/schema.py's step after this file adds kb_chunks.model and moves the model of a
-- database made before into kb_models.
CREATE TABLE IF NOT EXISTS kb_models (
    id                   smallint    PRIMARY KEY,
    model_id             text        NOT NULL,
    dimension            integer     NOT NULL CHECK (dimension > 0),
    index_type           text        NOT NULL CHECK (index_type IN ('vector', 'halfvec', 'none')),
    index_name           text,
    hnsw_m               integer,
    hnsw_ef_construction integer,
    created_at           timestamptz NOT NULL DEFAULT now(),
    UNIQUE (model_id, dimension)
);

CREATE TABLE IF NOT EXISTS kb_projects (
    tenant_id   text     NOT NULL,
    project_key text     NOT NULL,
    model       smallint NOT NULL REFERENCES kb_models (id),
    PRIMARY KEY (tenant_id, project_key)
);
