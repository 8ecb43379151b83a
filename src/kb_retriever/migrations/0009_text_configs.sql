-- kb-retriever schema v9: the tsv column's languages are recorded (kb_meta 'fts_configs', a JSON
-- object of language code -> text search configuration), and searches stem a question by what
-- it records, so that a question meets its documents however their column was built.
--
-- A column built before this version maps the fifteen languages below. store/schema.py then
-- builds it again, once, with every language of vocabulary.FTS_CONFIG_BY_LANGUAGE that the
-- server has (ensure_fixed_choices, which also does so after an upgrade of PostgreSQL that
-- brings configurations).
INSERT INTO kb_meta (key, value)
SELECT 'fts_configs', '{"en": "english", "it": "italian", "fr": "french", "de": "german",
    "es": "spanish", "pt": "portuguese", "nl": "dutch", "da": "danish", "fi": "finnish",
    "hu": "hungarian", "no": "norwegian", "nb": "norwegian", "ru": "russian", "sv": "swedish",
    "tr": "turkish"}'
WHERE EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = 'kb_chunks'::regclass
              AND attname = 'tsv' AND NOT attisdropped)
ON CONFLICT (key) DO NOTHING;
