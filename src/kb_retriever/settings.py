"""The one typed settings object.

Every knob of the retrieval pipeline lives here, read once from the environment (prefix ``KB_``,
the env names of the reference implementation) and validated eagerly. Pass a :class:`Settings`
into :class:`~kb_retriever.KnowledgeBase`; nothing deeper reads the environment.

Example::

    from kb_retriever import Settings
    s = Settings(hybrid_search_enabled=False)           # explicit values win over env
    s2 = s.model_copy(update={"default_limit": 5})      # never mutate a shared object
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AliasChoices,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from . import settings_checks as checks
from .errors import ConfigError
from .vocabulary import DEFAULT_EDGE_TYPES, EDGE_TYPE_WEIGHTS

__all__ = ["Settings", "is_blank", "load_settings", "DEFAULT_EDGE_TYPES", "EDGE_TYPE_WEIGHTS"]

def _env(*names: str) -> Any:
    return AliasChoices(*names)


def _field(default: Any, *env: str, **kw: Any) -> Any:
    return Field(default, validation_alias=_env(*env), **kw)


CommaList = Annotated[tuple[str, ...], NoDecode]
_PG_MAX_INT = 2_147_483_647  # PostgreSQL's integer settings (statement_timeout) stop here


def is_blank(value: Any) -> bool:
    """An empty ``home`` (the current directory) or ``database_url`` (libpq's defaults)."""
    return isinstance(value, str | Path) and not str(value).strip()


def refuse_blank_location(database_url: Any, home: Any) -> None:
    """:class:`ConfigError` for a ``database_url`` or ``home`` given empty (None: not given)."""
    for name, value, default in (("database_url", database_url, "KB_DATABASE_URL or the "
                                  "embedded server"),
                                 ("home", home, "KB_HOME or the default (~/.kb-retriever)")):
        if is_blank(value):
            raise ConfigError(f"{name} is empty: give a value, or leave it out for {default}")


class Settings(BaseSettings):
    """All knobs of kb-retriever. Field docs name the environment variable."""

    model_config = SettingsConfigDict(
        frozen=True, extra="forbid", populate_by_name=True, env_prefix="KB_", case_sensitive=False,
        allow_inf_nan=False,  # a NaN weight would make every score NaN (and --json print NaN)
    )

    # --- where the data lives -------------------------------------------------------------
    database_url: str | None = _field(None, "KB_DATABASE_URL")
    # Streaming replicas that answer searches and reads (comma-separated in the environment);
    # writes go to the primary (store/replicas.py, decision 0012).
    replica_urls: CommaList = _field((), "KB_REPLICA_URLS")
    # A replica further behind the primary than this is skipped until it catches up.
    replica_max_lag_s: float = _field(30.0, "KB_REPLICA_MAX_LAG_S", gt=0)
    # A replica that could not be reached is skipped for this long.
    replica_retry_s: float = _field(10.0, "KB_REPLICA_RETRY_S", ge=0)
    # How long a read waits for a replica's connection before it tries another server.
    replica_connect_timeout_s: float = _field(2.0, "KB_REPLICA_CONNECT_TIMEOUT_S", gt=0)
    home: Path = _field(Path.home() / ".kb-retriever", "KB_HOME")
    embedder: Literal["minilm", "e5", "hashing"] = _field("minilm", "KB_EMBEDDER")
    # Two connections kept open: a second thread's search, or a second leg, need not connect.
    pool_min_size: int = _field(2, "KB_POOL_MIN_SIZE", ge=0, le=64)
    pool_max_size: int = _field(4, "KB_POOL_MAX_SIZE", ge=1, le=256)
    # Run the vector and full-text legs at once, each on a pooled connection, when a second
    # connection is idle (true), or both in one statement on one connection (false, the
    # default; decision 0015, amended: at once costs more CPU on both sides and no longer
    # wins at one client). "auto", the default before, is read as false with a warning.
    parallel_legs: bool = _field(False, "KB_PARALLEL_LEGS")
    pool_timeout_s: float = _field(10.0, "KB_POOL_TIMEOUT_S", gt=0, le=600)
    statement_timeout_ms: int = _field(10_000, "KB_STATEMENT_TIMEOUT_MS", ge=0, le=_PG_MAX_INT)
    # Behind a pooler in transaction mode (PgBouncer, Supavisor): no prepared statements, and a
    # read's HNSW settings and statement timeout set for its own transaction, never a session's.
    transaction_pooler: bool = _field(False, "KB_TRANSACTION_POOLER")
    hnsw_ef_search: int = _field(100, "KB_HNSW_EF_SEARCH", ge=1, le=1000)
    # How an embedding model's approximate index is built (store/spaces.py), when the model is
    # first used and by ``doctor --reindex``: pgvector's HNSW ``m`` and ``ef_construction``, and
    # the indexed type: ``auto`` indexes ``vector`` up to 2,000 dimensions and ``halfvec`` up to
    # 4,000 (half the index; pgvector's limits), ``halfvec`` always, ``vector`` only.
    hnsw_m: int = _field(16, "KB_HNSW_M", ge=2, le=100)
    hnsw_ef_construction: int = _field(64, "KB_HNSW_EF_CONSTRUCTION", ge=4, le=1000)
    hnsw_type: Literal["auto", "vector", "halfvec"] = _field("auto", "KB_HNSW_TYPE")

    # --- search basics --------------------------------------------------------------------
    default_min_similarity: float = _field(0.30, "KB_MIN_SIMILARITY", ge=-1.0, le=1.0)
    default_limit: int = _field(8, "KB_DEFAULT_LIMIT", ge=1, le=200)
    max_limit: int = _field(200, "KB_MAX_LIMIT", ge=1, le=10_000)
    max_query_chars: int = _field(10_000, "KB_MAX_QUERY_CHARS", ge=1)
    prompt_timezone: str = _field("UTC", "KB_PROMPT_TIMEZONE")

    # --- hybrid (FTS + RRF) ---------------------------------------------------------------
    hybrid_search_enabled: bool = _field(True, "KB_HYBRID_SEARCH_ENABLED")
    fts_language: str = _field("english", "KB_FTS_LANGUAGE")
    fts_query_mode: Literal["or", "websearch", "plain"] = _field("or", "KB_FTS_QUERY_MODE")
    # Matches ranked by the FTS leg at most (reference/postgres-performance.md §3.1: ranking reads
    # every match), and the budget for the OR query's lexemes: rarest first while their
    # estimated matches fit (store.fulltext.tsvector.lexeme_selection_sql). Decision 0003 has
    # the measurements.
    fts_match_cap: int = _field(300, "KB_FTS_MATCH_CAP", ge=10, le=1_000_000)
    # How long a process reuses what only changes when the knowledge base is written: the lexeme
    # statistics (BM25 idf, the OR lexemes' budget) and the calibration; the full-text
    # configurations and trust channels' reads at most 5 s (search.pipeline.TRUST_TTL_S). A base's
    # own writes clear it; other writers show after at most this long (0: never kept).
    catalog_cache_ttl_seconds: int = _field(300, "KB_CATALOG_CACHE_TTL_SECONDS", ge=0)
    rrf_k: int = _field(60, "KB_RRF_K", ge=1)
    hybrid_semantic_weight: float = _field(
        0.70, "KB_HYBRID_SEMANTIC_WEIGHT", ge=0
    )
    hybrid_fts_weight: float = _field(0.30, "KB_HYBRID_FTS_WEIGHT", ge=0)

    # --- synonyms -------------------------------------------------------------------------
    synonyms_enabled: bool = _field(True, "KB_SYNONYM_EXPANSION_ENABLED")
    synonyms_cache_ttl_seconds: int = _field(
        300, "KB_SYNONYM_CACHE_TTL_SECONDS", ge=0
    )

    # --- reranker -------------------------------------------------------------------------
    reranking_enabled: bool = _field(True, "KB_RERANKING_ENABLED")
    candidate_multiplier: int = _field(
        3, "KB_RERANK_CANDIDATE_MULTIPLIER", ge=1, le=100
    )
    # The rerank pool: the best this many times the candidates per leg of the fused list are
    # read and scored (0: every candidate of both legs). At 1.5 the pool holds the vector leg's
    # hits and the full-text leg's best; decision 0017 measures what it saves and keeps.
    rerank_pool_factor: float = _field(1.5, "KB_RERANK_POOL_FACTOR", ge=0, le=2)
    vector_weight: float = _field(0.55, "KB_RERANK_VECTOR_WEIGHT")
    keyword_weight: float = _field(0.70, "KB_RERANK_KEYWORD_WEIGHT")
    heading_weight: float = _field(0.05, "KB_RERANK_HEADING_WEIGHT")
    tag_overlap_weight: float = _field(
        0.05, "KB_RERANK_TAG_OVERLAP_WEIGHT"
    )
    preamble_weight: float = _field(0.05, "KB_RERANK_PREAMBLE_WEIGHT")
    recency_weight: float = _field(0.02, "KB_RERANK_RECENCY_WEIGHT")
    status_active_weight: float = _field(0.02, "KB_RERANK_STATUS_WEIGHT")
    mention_boost_weight: float = _field(
        0.50, "KB_RERANK_MENTION_BOOST_WEIGHT"
    )
    keyword_idf: bool = _field(True, "KB_RERANK_KEYWORD_IDF")
    # "coverage": share of (IDF-weighted) query words present; "bm25": pool BM25 (tf + length).
    keyword_scoring: Literal["coverage", "bm25"] = _field("bm25", "KB_RERANK_KEYWORD_SCORING")
    normalize_scores: bool = _field(False, "KB_RERANK_NORMALIZE_SCORES")
    mentions_mode: Literal["boost", "filter"] = _field("boost", "KB_MENTIONS_MODE")
    max_chunks_per_doc: int = _field(
        3, "KB_DIVERSIFICATION_MAX_CHUNKS_PER_DOC", ge=0
    )
    # The pool's other candidates shown as runner-ups; the hits the adaptive cutoff moved out
    # of primary are runner-ups beside them, always (SearchResult.top_k gives them back).
    runner_up_limit: int = _field(15, "KB_RUNNER_UP_LIMIT", ge=0, le=1000)
    # The adaptive cutoff (issue 27; decisions 0014 and 0016): a primary document, and a graph
    # neighbour that no strong edge brings, stays in the context only when its evidence reaches
    # this share of the best primary hit's (measured against the scope's null when calibrated,
    # like the refusal gate), and a rejected approach is warned about only then; the others
    # become runner-ups. 0 turns it off: ``limit`` hits whatever they hold.
    context_cutoff: float = _field(0.5, "KB_CONTEXT_CUTOFF", ge=0, le=1)
    # A document of the top that the answer's document (the graph's seed) links to needs this
    # share instead (the lower applies), and so does a neighbour that a shown passage names.
    context_cutoff_linked: float = _field(0.3, "KB_CONTEXT_CUTOFF_LINKED", ge=0, le=1)
    # Any other document needs this share of the best keyword signal too: near in meaning is
    # not evidence alone when others hold the question's words (decision 0020).
    context_cutoff_lexical: float = _field(0.4, "KB_CONTEXT_CUTOFF_LEXICAL", ge=0, le=1)

    # --- canonical trust gradient ---------------------------------------------------------
    canonical_enabled: bool = _field(True, "KB_CANONICAL_ENABLED")
    priority_weight: float = _field(0.001, "KB_CANONICAL_PRIORITY_WEIGHT", ge=0)
    superseded_penalty: float = _field(
        0.40, "KB_CANONICAL_SUPERSEDED_PENALTY", ge=0
    )
    deprecated_penalty: float = _field(
        0.40, "KB_CANONICAL_DEPRECATED_PENALTY", ge=0
    )
    archived_penalty: float = _field(
        0.60, "KB_CANONICAL_ARCHIVED_PENALTY", ge=0
    )
    auto_tier_penalty: float = _field(
        0.02, "KB_CANONICAL_AUTO_TIER_PENALTY", ge=0
    )

    # --- graph expansion ------------------------------------------------------------------
    graph_expansion_enabled: bool = _field(
        True, "KB_GRAPH_EXPANSION_ENABLED"
    )
    graph_expansion_hops: int = _field(
        1, "KB_GRAPH_EXPANSION_HOPS", ge=1, le=5
    )
    graph_expansion_max_nodes: int = _field(
        20, "KB_GRAPH_EXPANSION_MAX_NODES", ge=1, le=500
    )
    # Each seed contributes at most this many neighbours, its best by score (decision 0014).
    graph_expansion_max_per_seed: int = _field(
        3, "KB_GRAPH_EXPANSION_MAX_PER_SEED", ge=1, le=100
    )
    # A hub (an index, or a document linking out to this many) is never related context; one
    # with this many edges either way enters on a strong edge only (decision 0014, amended).
    graph_hub_min_degree: int = _field(10, "KB_GRAPH_HUB_MIN_DEGREE", ge=2)
    # Edges at least this strong bring a neighbour without evidence of its own (with the default
    # weights every typed edge but related_to, the generic link an index is made of); 0 lets
    # every edge do so, above 1 none.
    graph_strong_edge_weight: float = _field(0.8, "KB_GRAPH_STRONG_EDGE_WEIGHT", ge=0)
    graph_expansion_edge_types: CommaList = _field(
        DEFAULT_EDGE_TYPES, "KB_GRAPH_EXPANSION_EDGE_TYPES"
    )
    graph_expansion_direction: Literal["outgoing", "incoming", "both"] = _field(
        "outgoing", "KB_GRAPH_EXPANSION_DIRECTION"
    )
    graph_hop_decay: float = _field(
        0.5, "KB_GRAPH_HOP_DECAY", gt=0, le=1
    )

    # --- rejected-approach injection ------------------------------------------------------
    rejected_injection_enabled: bool = _field(True, "KB_REJECTED_INJECTION_ENABLED")
    rejected_injection_max_docs: int = _field(3, "KB_REJECTED_INJECTION_MAX_DOCS", ge=1, le=50)
    # "calibrated": correlate by evidence on a calibrated scope (below), the absolute cosine
    # rule on a scope never calibrated; "absolute": KB_REJECTED_MIN_SIMILARITY everywhere.
    rejected_rule: Literal["calibrated", "absolute"] = _field("calibrated", "KB_REJECTED_RULE")
    rejected_min_similarity: float = _field(
        0.40, "KB_REJECTED_MIN_SIMILARITY", ge=-1, le=1
    )

    # Evidence on a calibrated scope (ranking/calibration.py, decision 0009): a cosine's margin
    # above the scope's null, plus this weight times the keyword signal, plus the edge bonus
    # for a rejected document linked to one of the two best primary documents. Fitted on the
    # three bench sets with MiniLM and E5, checked leaving each set out (decision 0009).
    rejected_min_evidence: float = _field(0.60, "KB_REJECTED_MIN_EVIDENCE")
    rejected_edge_bonus: float = _field(0.20, "KB_REJECTED_EDGE_BONUS", ge=0)
    # A correlated record is warned about only when the question is about it: the question
    # names it, or its evidence is at least this times the best other document's in the top
    # (search.rejected_channel.about_question; decision 0009, amended 2026-12-05). 0: all.
    rejected_focus_ratio: float = _field(1.2, "KB_REJECTED_FOCUS_RATIO", ge=0)
    evidence_lexical_weight: float = _field(1.5, "KB_EVIDENCE_LEXICAL_WEIGHT", ge=0)
    # An accepted document linked to a rejected one ranks above it when it scores at least this
    # share of the rejected one's score (rejected.yield_to_accepted; decisions 0009 and 0014:
    # 0, always, since issue 27).
    rejected_yield_ratio: float = _field(0.0, "KB_REJECTED_YIELD_RATIO", ge=0)

    # --- grounding gate -------------------------------------------------------------------
    # "calibrated": the gate on evidence against the scope's null (KB_REFUSAL_MIN_EVIDENCE) on a
    # calibrated scope, the absolute rule on a scope never calibrated; "absolute": the absolute
    # rule (KB_REFUSAL_MIN_SIMILARITY or KB_REFUSAL_MIN_RERANK_SCORE) everywhere. A threshold
    # never switches the rule (issue 24).
    refusal_rule: Literal["calibrated", "absolute"] = _field("calibrated", "KB_REFUSAL_RULE")
    # In the band (0.26-0.32) where one query run of 198 (3 sets x 2 embedders) is on the
    # wrong side (decision 0009).
    refusal_min_evidence: float = _field(0.30, "KB_REFUSAL_MIN_EVIDENCE")
    refusal_min_similarity: float = _field(
        0.45, "KB_REFUSAL_MIN_SIMILARITY", ge=-1, le=1  # a cosine
    )
    refusal_min_rerank_score: float = _field(
        0.25, "KB_REFUSAL_MIN_RERANK_SCORE"
    )
    refusal_min_chunks: int = _field(1, "KB_REFUSAL_MIN_CHUNKS", ge=0)

    # --- chunking -------------------------------------------------------------------------
    # The reference's connector chunkers' target; the Markdown chunker cuts at headings and,
    # within a long section, at the hard cap (kept for the reference's configuration).
    chunk_target_tokens: int = _field(512, "KB_CHUNK_TARGET_TOKENS", ge=16)
    chunk_hard_cap_tokens: int = _field(
        1024, "KB_CHUNK_HARD_CAP_TOKENS", ge=16
    )
    chunk_overlap_tokens: int = _field(64, "KB_CHUNK_OVERLAP_TOKENS", ge=0)

    # --- ingest limits ---------------------------------------------------------------------
    # A file with more chunks fails with this reason: 20,000 headings in 388 KB is not prose,
    # while a 19 MB manual makes about 5,000 chunks.
    ingest_max_chunks: int = _field(10_000, "KB_INGEST_MAX_CHUNKS", ge=1, le=1_000_000)
    # Budgets of one file while it is read (ingest/budget.py): a 184 KB DOCX unpacked to 1.6 M
    # paragraphs and held an ingest for 283 s. A 300-page PDF or a 2,000-paragraph DOCX uses
    # a few percent of each. Unpacked: a DOCX's parts (zip directory, before parsing), a PDF's
    # page contents; characters: the text extracted from a PDF or DOCX; the timeout covers
    # reading and parsing, not embedding.
    ingest_max_unpacked_mb: int = _field(100, "KB_INGEST_MAX_UNPACKED_MB", ge=1, le=4096)
    ingest_max_paragraphs: int = _field(100_000, "KB_INGEST_MAX_PARAGRAPHS", ge=1,
                                        le=10_000_000)
    ingest_max_pages: int = _field(10_000, "KB_INGEST_MAX_PAGES", ge=1, le=1_000_000)
    ingest_max_chars: int = _field(20_000_000, "KB_INGEST_MAX_CHARS", ge=1, le=1_000_000_000)
    ingest_file_timeout_s: float = _field(120.0, "KB_INGEST_FILE_TIMEOUT_S", gt=0, le=86_400)
    # The statement timeout of an ingest's connection: a large file's COPY takes longer than a
    # search may (KB_STATEMENT_TIMEOUT_MS). 0 means none.
    ingest_statement_timeout_ms: int = _field(600_000, "KB_INGEST_STATEMENT_TIMEOUT_MS", ge=0,
                                              le=_PG_MAX_INT)
    # --- benchmark gates ------------------------------------------------------------------
    # Shares (a negative one passed every gate, silently; one above 1 fails every gate, as a
    # test's gate that must miss wants it).
    benchmark_threshold_ndcg: float = _field(0.80, "KB_BENCHMARK_THRESHOLD_NDCG", ge=0)
    benchmark_threshold_mrr: float = _field(0.85, "KB_BENCHMARK_THRESHOLD_MRR", ge=0)
    benchmark_threshold_citation_precision: float = _field(
        0.90, "KB_BENCHMARK_THRESHOLD_CITATION_PRECISION", ge=0
    )
    benchmark_threshold_refusal_accuracy: float = _field(
        0.95, "KB_BENCHMARK_THRESHOLD_REFUSAL_ACCURACY", ge=0
    )

    def __init__(self, **values: Any) -> None:
        try:
            super().__init__(**values)
        except ValidationError as exc:  # one error type for every bad setting, env or code
            raise _config_error(exc) from None

    @field_validator("graph_expansion_edge_types", mode="before")
    @classmethod
    def _split_edge_types(cls, value: Any) -> Any:
        return checks.edge_types(value)

    @field_validator("replica_urls", mode="before")
    @classmethod
    def _split_urls(cls, value: Any) -> Any:
        return checks.replica_urls(value)

    @field_validator("parallel_legs", mode="before")
    @classmethod
    def _auto_legs(cls, value: Any) -> Any:
        if isinstance(value, str) and value.strip().lower() == "auto":
            warnings.warn("KB_PARALLEL_LEGS=auto is gone (decision 0015, amended): it reads as "
                          "false, one statement per search; set true or false",
                          DeprecationWarning, stacklevel=2)
            return False
        return value

    @field_validator("prompt_timezone")
    @classmethod
    def _check_timezone(cls, value: str) -> str:
        return checks.time_zone(value)

    @field_validator("home", "database_url", mode="before")
    @classmethod
    def _not_empty(cls, value: Any, info: ValidationInfo) -> Any:
        if is_blank(value):
            default = ("~/.kb-retriever" if info.field_name == "home"
                       else "the embedded server")
            raise ValueError(f"empty; unset it for the default ({default}), or give one")
        return value

    @field_validator("fts_language")
    @classmethod
    def _check_language(cls, value: str) -> str:
        return checks.fts_language(value)

    @model_validator(mode="after")
    def _check_together(self) -> Settings:
        checks.together(self)
        return self

    def model_copy(self, *, update: Mapping[str, Any] | None = None,
                   deep: bool = False) -> Settings:
        """A copy with ``update`` applied, validated as the constructor validates (pydantic's
        own copy checks nothing: a limit of 0 or a NaN weight went through); a bad value is a
        :class:`ConfigError`. Every value is given, so the environment changes none."""
        if not update:
            return super().model_copy(deep=deep)
        return type(self)(**{**self.model_dump(), **update})


def load_settings(**overrides: Any) -> Settings:
    """Build :class:`Settings` from the environment plus ``overrides``; raise :class:`ConfigError`.

    The message names the offending setting and its valid values.
    """
    return Settings(**overrides)


def _config_error(exc: ValidationError) -> ConfigError:
    lines = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"]) or "settings"
        lines.append(f"{loc}: {err['msg']}")
    return ConfigError("invalid configuration: " + "; ".join(lines))
