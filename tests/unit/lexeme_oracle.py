"""The test oracle of the full-text leg's OR-lexeme choice, which the leg makes in SQL
(``store.fulltext.tsvector.lexeme_selection_sql``): rarest first, while the chunks they match together
(estimated) stay within the budget; at least the rarest one; every lexeme without statistics.

The full-text leg ranks at most the match cap's worth of matches, taken in table order, so a
frequent lexeme would fill that sample with weak matches and push out the chunks that hold the
rare, telling ones.
"""

from __future__ import annotations

from collections.abc import Sequence

from kb_retriever.ranking.bm25 import CorpusLexemes


def select_lexemes(corpus: CorpusLexemes, lexemes: Sequence[str], *, budget: int) -> list[str]:
    unique = list(dict.fromkeys(lexemes))
    est = {lex: corpus.chunks_with(lex) for lex in unique}
    if any(v is None for v in est.values()):
        return unique
    chosen: list[str] = []
    total = 0.0
    for lex in sorted(unique, key=lambda x: (est[x], x)):
        n = float(est[lex] or 0.0)
        if chosen and total + n > budget:
            break
        chosen.append(lex)
        total += n
    return chosen
