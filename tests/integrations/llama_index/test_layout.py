"""One distribution per integration type, LlamaIndex's layout; the moved names still import."""

from __future__ import annotations

import importlib
import importlib.metadata
import subprocess
import sys

import pytest

PACKAGES = {
    "llama_index.vector_stores.kb": "llama-index-vector-stores-kb",
    "llama_index.retrievers.kb": "llama-index-retrievers-kb",
    "llama_index.postprocessor.kb": "llama-index-postprocessor-kb",
    "llama_index.embeddings.kb": "llama-index-embeddings-kb",
}


@pytest.mark.parametrize(("module", "dist"), sorted(PACKAGES.items()))
def test_each_package_has_its_distribution_and_version(module: str, dist: str) -> None:
    mod = importlib.import_module(module)
    assert mod.__version__ == importlib.metadata.version(dist)
    files = importlib.metadata.files(dist) or []
    assert not any("llama_index" in str(f) and module.split(".")[1] not in str(f)
                   for f in files if str(f).endswith(".py"))


def test_the_umbrella_distribution_depends_on_the_four() -> None:
    requires = " ".join(importlib.metadata.requires("llama-index-kb-retriever") or [])
    assert all(dist in requires for dist in PACKAGES.values())


def test_the_old_embedding_paths_still_work_with_a_deprecation_warning() -> None:
    code = (
        "import warnings; warnings.simplefilter('error', DeprecationWarning)\n"
        "import llama_index.embeddings.kb as new\n"
        "try:\n"
        "    from llama_index.retrievers.kb import KBCoreEmbedding\n"
        "except DeprecationWarning as w: print('warned:', w)\n"
        "warnings.simplefilter('ignore')\n"
        "from llama_index.retrievers.kb import KBCoreEmbedding, KBLlamaEmbedding\n"
        "from llama_index.retrievers.kb.embedding import KBCoreEmbedding as old\n"
        "assert KBCoreEmbedding is new.KBCoreEmbedding is old\n"
        "assert KBLlamaEmbedding is new.KBLlamaEmbedding\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "warned:" in out.stdout and "llama_index.embeddings.kb" in out.stdout
