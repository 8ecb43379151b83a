"""The core never imports a framework, and its public surface is pinned."""

from __future__ import annotations

import subprocess
import sys

import kb_retriever


def test_importing_core_loads_no_framework():
    code = (
        "import sys, kb_retriever, kb_retriever.cli, kb_retriever.prompt, kb_retriever.ranking;"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('langchain', 'langchain_core', 'llama_index'));"
        "print(','.join(bad))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_public_surface_is_pinned():
    assert sorted(kb_retriever.__all__) == sorted([
        "Candidate", "ChunkRecord", "ConfigError", "DocumentRecord", "DocumentRef", "Embedder",
        "EmbeddingError", "FilterError",
        "HashingEmbedder", "Hit", "IngestError", "IngestReport", "InputError", "KbError",
        "KnowledgeBase", "MiniLMEmbedder", "Origin", "PromptTemplate", "ScoreBreakdown",
        "SchemaError", "SearchFilters", "SearchResult", "Settings", "StoreError", "StoredChunk",
        "StoredDocument", "compose_prompt", "load_settings", "__version__",
    ])
    for name in kb_retriever.__all__:
        assert hasattr(kb_retriever, name)
