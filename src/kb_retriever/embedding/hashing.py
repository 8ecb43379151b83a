"""A deterministic hashing embedder for fast tests (parity with the reference's test embedder).

Never the default: it knows no synonyms or meaning, only shared tokens.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Sequence

_TOKEN = re.compile(r"[^a-z0-9]+")


class HashingEmbedder:
    """Feature hashing of ASCII tokens (reference §20 ``DeterministicEmbedder``).

    tokens = lowercase split on ``[^a-z0-9]+``, length >= 2; bucket = first 8 hex digits of
    md5 mod ``dimension``; sign from the 9th hex digit; L2-normalised. The reference uses 4096
    dimensions; pgvector's HNSW index takes at most 4000 (as halfvec), so the store searches
    those exactly (fine at test sizes).
    """

    def __init__(self, dimension: int = 4096) -> None:
        if dimension < 2:
            raise ValueError("dimension must be >= 2")
        self._dimension = dimension

    @property
    def model_id(self) -> str:
        return f"hashing-md5-{self._dimension}"

    @property
    def dimension(self) -> int:
        return self._dimension

    def _embed(self, text: str) -> list[float]:
        vec = [0.0] * self._dimension
        for tok in _TOKEN.split(text.lower()):
            if len(tok) < 2:
                continue
            digest = hashlib.md5(tok.encode()).hexdigest()
            bucket = int(digest[:8], 16) % self._dimension
            vec[bucket] += 1.0 if int(digest[8], 16) % 2 == 0 else -1.0
        norm = math.sqrt(sum(v * v for v in vec))
        if norm == 0:
            # Token-less text (no ASCII word: Chinese, Cyrillic, "!!!"): a unit vector of the
            # whole text's bucket keeps cosine defined, 1 to the same text and ~0 to others
            # (one fixed vector made every two such texts identical).
            digest = hashlib.md5(text.strip().lower().encode()).hexdigest()
            vec[int(digest[:8], 16) % self._dimension] = 1.0
            return vec
        return [v / norm for v in vec]

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        return [self._embed(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self._embed(text)
