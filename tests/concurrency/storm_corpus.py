"""The storm's documents: a background corpus and a few shared ids with several versions."""

from __future__ import annotations

import itertools
import random

#: The hashing embedder's dimension: small, so that the HNSW index costs little (the storm is
#: about the write path, not about the vector index).
DIM = 32
#: The ids every storm thread writes, deletes and reads.
SHARED_IDS = [f"shared-{i}" for i in range(8)]
_WORDS = ("cache queue ledger token rotation incident rollback replica shard tenant index "
          "vector lexeme budget latency throughput deploy canary region failover quota "
          "billing invoice session oauth kafka redis postgres schema migration").split()


# A Zipf-like vocabulary of made-up words beside the real ones: text whose lexeme statistics
# look like a real corpus's (many rare lexemes), so that full-text work has its real cost.
_RNG = random.Random(11)
_VOCAB = _WORDS + ["".join(_RNG.choice("bcdfghklmnprstvz") + _RNG.choice("aeiou")
                           for _ in range(_RNG.randint(2, 4))) for _ in range(20_000)]
_CUMULATIVE = list(itertools.accumulate(1.0 / (rank + 1) for rank in range(len(_VOCAB))))


def section(rng: random.Random, n_words: int = 90) -> str:
    return " ".join(rng.choices(_VOCAB, cum_weights=_CUMULATIVE, k=n_words))


def version_text(doc_id: str, version: int, sections: int = 12) -> str:
    """Version ``version`` of a shared document: ``sections`` headed sections, each of its own
    words, so that two versions never share a chunk."""
    rng = random.Random(f"{doc_id}/{version}")
    body = "\n\n".join(f"## Section {s} of {doc_id} v{version}\n\n{section(rng)}"
                       for s in range(sections))
    return f"# {doc_id} version {version}\n\n{body}\n"


def background(n_docs: int, sections: int, seed: int = 7) -> list[dict[str, object]]:
    """``n_docs`` records of ``sections`` sections each (one chunk per section)."""
    rng = random.Random(seed)
    return [{"id": f"bg-{i}", "text": f"# Background {i}\n\n" + "\n\n".join(
        f"## Part {s}\n\n{section(rng)}" for s in range(sections))} for i in range(n_docs)]
