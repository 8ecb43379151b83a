"""Synthetic corpus for the speed benchmark (reference/postgres-performance.md §2.1).

384-d vectors = 100 cluster centres + 64-d low-rank within-cluster variation + noise; text =
pseudo-English: Zipf vocabulary (70 %), stop words (30 %), and 15 % topic words tied to the
chunk's cluster, so FTS and vectors agree. Documents of 5 chunks share a cluster; 10 scopes
("tenants") hold ~10 % each; 1 % of documents are canonical with edges, plus a few
rejected-approach documents per tenant.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kb_retriever.models import ChunkDraft, DocumentDraft, EdgeDraft

DIM, CLUSTERS, LATENT = 384, 100, 64
VOCAB, TOPIC_WORDS = 20_000, 20
CHUNKS_PER_DOC, TENANTS = 5, 10
STOP = ("the a of and to in is that for it as with was on be by this are or at from an not "
        "which have has but were they their can all will one").split()
_SYL = ("ka lo ri mu te sa ne vi po da ru mi fe go ta le ni so bu ze ko pa di").split()


def _words(n: int, rng: np.random.Generator) -> list[str]:
    out, seen = [], set()
    while len(out) < n:
        w = "".join(rng.choice(_SYL, size=int(rng.integers(2, 5))))
        if w not in seen:
            seen.add(w)
            out.append(w)
    return out


@dataclass
class Corpus:
    vectors: np.ndarray  # (n, 384) float32, unit length
    cluster: np.ndarray  # (n,) cluster of each chunk
    tenant: np.ndarray  # (n,) tenant index 0..9 of each chunk
    texts: list[str]
    vocab: list[str]  # by Zipf rank (most common first)
    topics: list[list[str]]  # topic words per cluster
    centres: np.ndarray
    basis: np.ndarray


def _vectors(cluster: np.ndarray, centres: np.ndarray, basis: np.ndarray,
             rng: np.random.Generator) -> np.ndarray:
    out = np.empty((len(cluster), DIM), dtype=np.float32)
    for c in np.unique(cluster):
        rows = np.flatnonzero(cluster == c)
        z = rng.standard_normal((len(rows), LATENT)).astype(np.float32) * 0.08
        noise = rng.standard_normal((len(rows), DIM)).astype(np.float32) * 0.01
        v = centres[c] + z @ basis[c] + noise
        out[rows] = v / np.linalg.norm(v, axis=1, keepdims=True)
    return out


def make_corpus(n: int, seed: int = 7) -> Corpus:
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((CLUSTERS, DIM)).astype(np.float32)
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    basis = (rng.standard_normal((CLUSTERS, LATENT, DIM)).astype(np.float32) / np.sqrt(DIM))
    n_docs = (n + CHUNKS_PER_DOC - 1) // CHUNKS_PER_DOC
    doc_cluster = rng.integers(0, CLUSTERS, n_docs)
    cluster = np.repeat(doc_cluster, CHUNKS_PER_DOC)[:n]
    tenant = np.repeat(np.arange(n_docs) % TENANTS, CHUNKS_PER_DOC)[:n]
    vectors = _vectors(cluster, centres, basis, rng)
    words = _words(VOCAB + CLUSTERS * TOPIC_WORDS, rng)
    vocab, topic_pool = words[:VOCAB], words[VOCAB:]
    topics = [topic_pool[c * TOPIC_WORDS:(c + 1) * TOPIC_WORDS] for c in range(CLUSTERS)]
    zipf = 1.0 / np.arange(1, VOCAB + 1)
    zipf /= zipf.sum()
    # One id space: vocab, then stop words, then topic words; sampled in one go.
    table = [*vocab, *STOP, *topic_pool]
    lengths = rng.integers(100, 201, n)
    total = int(lengths.sum())
    ids = rng.choice(VOCAB, size=total, p=zipf)
    kind = rng.random(total)
    stops = kind < 0.30
    ids[stops] = VOCAB + rng.integers(0, len(STOP), int(stops.sum()))
    topical = (kind >= 0.30) & (kind < 0.45)
    owner = np.repeat(cluster, lengths)
    ids[topical] = (VOCAB + len(STOP) + owner[topical] * TOPIC_WORDS
                    + rng.integers(0, TOPIC_WORDS, int(topical.sum())))
    ends = np.cumsum(lengths)
    texts = []
    for i in range(n):
        words = " ".join([table[t] for t in ids[ends[i] - lengths[i]:ends[i]].tolist()])
        texts.append(words.capitalize() + ".")
    return Corpus(vectors, cluster, tenant, texts, vocab, topics, centres, basis)


def queries(corpus: Corpus, n: int, seed: int = 11) -> tuple[np.ndarray, list[str], np.ndarray]:
    """Held-out query vectors, their text (2 topic words + 1 common word: Zipf rank 100-1000,
    in ~1-10 % of chunks), a tenant each."""
    rng = np.random.default_rng(seed)
    cl = rng.integers(0, CLUSTERS, n)
    vecs = _vectors(cl, corpus.centres, corpus.basis, rng)
    texts = [
        " ".join([*rng.choice(corpus.topics[c], 2, replace=False).tolist(),
                  corpus.vocab[int(rng.integers(100, 1000))]])
        for c in cl
    ]
    return vecs, texts, rng.integers(0, TENANTS, n)


def documents(corpus: Corpus, tenant: int) -> list[tuple[DocumentDraft, np.ndarray]]:
    """The tenant's documents as drafts with their chunk vectors (metadata i = chunk index)."""
    idx = np.flatnonzero(corpus.tenant == tenant)
    out = []
    docs = [idx[i:i + CHUNKS_PER_DOC] for i in range(0, len(idx), CHUNKS_PER_DOC)]
    canon_every = 100  # 1 % canonical, chained by depends_on edges
    for j, rows in enumerate(docs):
        canonical = j % canon_every == 0
        rejected = j % 997 == 5  # a few rejected-approach docs per tenant
        slug = f"doc-{tenant}-{j}" if canonical or rejected else None
        edges = ()
        if canonical and j + canon_every < len(docs):
            edges = (EdgeDraft(to_slug=f"doc-{tenant}-{j + canon_every}", edge_type="depends_on",
                               weight=1.0, provenance="frontmatter"),)
        chunks = tuple(ChunkDraft(order=k, text=corpus.texts[r], heading_path=f"Part {k}",
                                  metadata={"i": int(r)}) for k, r in enumerate(rows))
        out.append((DocumentDraft(
            source_path=f"t{tenant}/doc-{j}.md", doc_key=f"doc-{j}", title=f"Document {j}",
            source_type="markdown", content_hash=f"h{tenant}-{j}", chunks=chunks, edges=edges,
            slug=slug, is_canonical=canonical or rejected,
            canonical_type="rejected-approach" if rejected else ("decision" if canonical else None),
            canonical_status="accepted" if canonical or rejected else None,
        ), corpus.vectors[rows]))
    return out
