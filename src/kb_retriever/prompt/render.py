"""Plain-text rendering of a :class:`SearchResult` for the terminal."""

from __future__ import annotations

from ..errors import printable
from ..models import Hit, SearchResult
from ..ranking.signals import CANONICAL_TERMS, SIGNALS
from ..ranking.text import clip_words

# Every signal of the reranker, then the canonical adjustment's terms.
_SIGNALS = (*(s.name for s in SIGNALS), *CANONICAL_TERMS)


def _row(i: int, hit: Hit) -> str:
    d = hit.document
    status = f"{d.canonical_type}/{d.canonical_status}" if d.is_canonical else "-"
    sim = "" if hit.similarity is None else f"{hit.similarity:.3f}"
    name = printable(d.slug or d.doc_key)
    return (f"{i:>3}  {hit.score:7.4f}  {sim:>6}  {_fit(name, 34):<34}  "
            f"{_fit(printable(status), 28):<28}  {_fit(printable(hit.heading_path), 40)}")


def _fit(text: str, width: int) -> str:
    """``text`` in ``width`` characters, cut after a whole word and marked with an ellipsis."""
    return text if len(text) <= width else clip_words(text, width - 1) + "…"


def _num(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def _legs(vector_rank: int | None, fts_rank: int | None, fts_ran: bool) -> str:
    """Where the candidate legs ranked the chunk. The ``keyword`` signal is the rerank's own
    word match on the chunk, so a chunk the full-text leg did not return can still score it.

    >>> _legs(3, None, True)
    'vector leg #3, full-text leg: not returned'
    >>> _legs(None, 1, True), _legs(2, None, False)
    ('vector leg: not returned, full-text leg #1', 'vector leg #2, full-text leg: off')
    """
    vec = "vector leg: not returned" if vector_rank is None else f"vector leg #{vector_rank}"
    if not fts_ran:
        fts = "full-text leg: off"
    else:
        fts = "full-text leg: not returned" if fts_rank is None else f"full-text leg #{fts_rank}"
    return f"{vec}, {fts}"


def render_result(result: SearchResult, *, explain: bool = False) -> str:
    strategy = result.meta.get("search_strategy") or {}
    fts_ran = bool(strategy.get("fts_enabled", True))
    header = (f"  #    score     sim  {'document':<34}  {'type/status':<28}  heading")
    lines = [f"query: {printable(result.query)}", "", header]
    for i, hit in enumerate(result.primary, 1):
        lines.append(_row(i, hit))
        if explain:
            s = hit.scores
            terms = "  ".join(f"{k}={getattr(s, k):.3f}" for k in _SIGNALS)
            lines.append(f"        {terms}")
            lines.append(
                f"        base={s.base:.4f} additive={s.additive:.4f} canonical={s.canonical:.4f}"
                f" total={s.total:.4f}  (raw sim={_num(s.raw_similarity)}, "
                f"{_legs(s.vector_rank, s.fts_rank, fts_ran)}, fused={s.fused_score:.5f})"
            )
    if result.expanded:
        lines += ["", "related (graph):"]
        for hit in result.expanded:
            lines.append(
                f"     {hit.score:7.4f}  {printable(hit.document.slug)}  via "
                f"{printable(hit.edge_type)} from {printable(hit.from_slug)} (hop {hit.hop})"
            )
    if result.rejected:
        lines += ["", "rejected approaches:"]
        for hit in result.rejected:
            lines.append(f"     sim {hit.similarity:.3f}  {printable(hit.document.slug)}  "
                         f"{printable(hit.document.title)}")
    meta = result.meta
    lines += ["", f"{meta.get('primary_count')} primary, {meta.get('expanded_count')} related, "
              f"{meta.get('rejected_count')} rejected, {meta.get('runner_up_count')} runner-up; "
              f"{meta.get('retrieval_ms')} ms; should_refuse={meta.get('should_refuse')}"]
    return "\n".join(lines)
