"""Embed the BEIR corpus and queries once and keep the vectors under ``benchmarks/.cache/``.

The cache key is the embedder's ``model_id`` plus a hash of the exact texts, so a different
model or a changed dataset never reuses stale vectors. Vectors are float32 ``.npy`` files.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

logger = logging.getLogger("beir.embed")

CACHE_DIR = Path(__file__).resolve().parent / ".cache"
# Progress is logged every this many texts; one batch of the embedder is 32.
LOG_EVERY = 256


def texts_hash(texts: Sequence[str]) -> str:
    h = hashlib.sha256()
    for t in texts:
        h.update(t.encode("utf-8"))
        h.update(b"\0")
    return h.hexdigest()[:16]


def cached_embeddings(embedder, texts: Sequence[str], *, kind: str,
                      query: bool = False) -> np.ndarray:
    """Return an ``(n, dim)`` float32 array for ``texts``, embedding only on a cache miss."""
    safe_model = embedder.model_id.replace("/", "_")
    path = CACHE_DIR / f"{kind}-{safe_model}-{texts_hash(texts)}.npy"
    if path.is_file():
        arr = np.load(path)
        if arr.shape[0] == len(texts):
            logger.info("%s: %d cached vectors from %s", kind, len(texts), path.name)
            return arr
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    out: list[list[float]] = []
    for start in range(0, len(texts), LOG_EVERY):
        batch = list(texts[start : start + LOG_EVERY])
        if query:
            out.extend(embedder.embed_query(t) for t in batch)
        else:
            out.extend(embedder.embed_documents(batch))
        elapsed = time.perf_counter() - started
        logger.info("%s: embedded %d/%d (%.0fs)", kind, len(out), len(texts), elapsed)
    arr = np.asarray(out, dtype=np.float32)
    tmp = path.with_suffix(".tmp.npy")
    np.save(tmp, arr)
    tmp.replace(path)
    return arr
