"""History questions: the superseded record next to its successor (issue 16; decision 0009).

The status penalty keeps a superseded decision below the current one, which is right for "what
do we use?" and wrong for "why did we move off Memcached?". The two are told apart by the
supersession edge itself (``supersedes`` / ``invalidated_by``), not by a list of "why"/"when"
words: a question names the predecessor when one of its words is in the predecessor's title and
not in its successor's (titles name what a decision chose: "Self-hosted Airflow ...", "Dagster+
..."). Then the predecessor's best chunk moves to just after its successor's, so the current
decision still comes first and the superseded one is read next to it.

A question that paraphrases the predecessor ("the old Windows terminals" for "Skorpio X3
handhelds"), or names it in another inflection ("паролями" for "паролем"), names no title
word. When the score before the trust gradient's adjustments puts the predecessor at least as
high as its successor, its best chunk moves too (decision 0009, amended 2026-12-06).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import TypeVar

from .diversify import Ranked
from .text import tokenize_query, words

__all__ = ["between", "first_index", "key_of", "names_document", "names_predecessor",
           "promote_predecessors", "shared_words"]

R = TypeVar("R", bound=Ranked)
Key = tuple[str, str]  # (project, slug)
#: A word that this share of the candidate documents hold names none of them (decision 0014).
SHARED = 0.7
#: ... and at least this many of them: a word of four documents is no word of the domain.
SHARED_LEAST = 5


def key_of(item: Ranked) -> Key | None:
    """The (project, slug) of an item's document; None without a slug."""
    d = item.document
    return (d.project_key, d.slug) if d.slug else None


def first_index(items: Sequence[Ranked], key: Key) -> int | None:
    """The position of the first item of the document ``key`` (its best chunk), or None."""
    return next((i for i, it in enumerate(items) if key_of(it) == key), None)


def between(item: R, above: R | None, below: R | None) -> R:
    """``item`` rescored (``Scored.rescored``) to sit between ``above`` and ``below``, so the
    list stays sorted by score; unchanged when it has no score to change."""
    rescored = getattr(item, "rescored", None)
    if rescored is None:
        return item
    hi = getattr(above, "score", None)
    lo = getattr(below, "score", None)
    if hi is None and lo is None:
        return item
    if hi is None:
        target = float(lo) + max(abs(float(lo)) * 1e-6, 1e-9)  # type: ignore[arg-type]
    elif lo is None or lo >= hi:
        target = float(hi) - max(abs(float(hi)) * 1e-6, 1e-9)
    else:
        target = (float(hi) + float(lo)) / 2.0
    return rescored(target)  # type: ignore[no-any-return]


def names_document(query: str, title: str, others: Iterable[str],
                   shared: Collection[str] = ()) -> bool:
    """True when a word of ``query`` is in ``title`` and in none of ``others`` (whole words),
    and is not one of ``shared`` (the words most of the candidates hold): the question names
    this document rather than the ones it competes with.

    >>> names_document("Should we switch the lake to Apache Hudi?", "Apache Hudi as the table "
    ...                "format", ["Apache Iceberg as the table format"])
    True
    >>> names_document("Which table format do we use?", "Apache Hudi as the table format",
    ...                ["Apache Iceberg as the table format"])
    False
    """
    mine = set(words(title))
    theirs = {w for other in others for w in words(other)}
    return any(t in mine and t not in theirs and t not in shared for t in tokenize_query(query))


def shared_words(query: str, texts: Mapping[int, Iterable[str]], share: float = SHARED,
                 least: int = SHARED_LEAST) -> frozenset[str]:
    """The words of ``query`` that at least ``share`` of the documents hold, and at least
    ``least`` of them (``texts``: each document's candidate texts, by id): in a knowledge base
    about hotels, "room" names none; among the five candidates of a small question, the four
    that discuss Memcached do not make it a word of the domain.

    >>> sorted(shared_words("open the room door", {1: ["room key"], 2: ["room status"],
    ...                                            3: ["door lock"]}, share=0.6, least=2))
    ['room']
    >>> shared_words("open the room door", {1: ["room key"], 2: ["room status"],
    ...                                     3: ["door lock"]}, share=0.6, least=3)
    frozenset()
    """
    wanted = set(tokenize_query(query))
    if not wanted or not texts:
        return frozenset()
    held = [wanted & {w for text in chunks for w in words(text)} for chunks in texts.values()]
    enough = max(share * len(held), least)
    return frozenset(t for t in wanted if sum(t in h for h in held) >= enough)


def names_predecessor(query: str, predecessor_title: str, successor_title: str) -> bool:
    """True when a query word is in the predecessor's title and not in the successor's (whole
    words: a prefix such as "plan" for "planning" names nothing).

    >>> names_predecessor("Why did we move off Airflow?", "Self-hosted Airflow for pipeline "
    ...                   "orchestration", "Dagster+ for pipeline orchestration")
    True
    >>> names_predecessor("Which tool orchestrates our pipelines today?", "Self-hosted Airflow"
    ...                   " for pipeline orchestration", "Dagster+ for pipeline orchestration")
    False
    """
    return names_document(query, predecessor_title, [successor_title])


def promote_predecessors(query: str, ranked: Sequence[R], successors: Mapping[Key, Sequence[Key]],
                         *, top: int, chunks: int = 1) -> tuple[list[R], list[Key]]:
    """``ranked`` with each predecessor the query names, or puts at least as high as its
    successor before the trust gradient, moved to just after its successor, when the
    successor's best chunk is among the first ``top``; and the predecessors moved. Up to
    ``chunks`` of a named predecessor's chunks move, best first: for "why did we move off X?"
    its own account of what went wrong is the answer, beside the successor. Of one the question
    is only closer to, its best chunk moves: the question may be about the current state.

    ``successors``: (project, successor slug) -> its predecessors' keys.
    """
    out = list(ranked)
    moved: list[Key] = []
    first: dict[Key, int] = {}
    for i, item in enumerate(out):
        key = key_of(item)
        if key is not None:
            first.setdefault(key, i)
    for s_key, preds in successors.items():
        if first.get(s_key) is None or first[s_key] >= top:
            continue
        # where the successor is now: another successor's predecessor may have moved above it
        s_pos = first_index(out, s_key)
        assert s_pos is not None
        s_title = out[s_pos].document.title
        for p_key in preds:
            p_pos = first_index(out, p_key)
            if p_pos is None or p_pos <= s_pos + 1:
                continue
            if names_predecessor(query, out[p_pos].document.title, s_title):
                n = max(chunks, 1)
            elif _closer(out[p_pos], out[s_pos]):
                n = 1
            else:
                continue
            picked = [i for i, it in enumerate(out) if key_of(it) == p_key][:n]
            items = [out[i] for i in picked]
            for i in reversed(picked):
                out.pop(i)
            s_now = first_index(out, s_key)  # the successor stays; the moved chunks were after it
            assert s_now is not None
            at = s_now + 1
            for item in items:
                out.insert(at, between(item, out[at - 1], out[at] if at < len(out) else None))
                at += 1
            moved.append(p_key)
    return out, moved


def _closer(item: Ranked, other: Ranked) -> bool:
    """Whether ``item`` scores at least as high as ``other`` before the trust gradient's
    adjustments (``canonical``: priority, status and type boosts and penalties, and the moves
    booked by ``rescored``): by the question's evidence, with recency and any @mention."""
    mine, theirs = getattr(item, "terms", None), getattr(other, "terms", None)
    if mine is None or theirs is None:
        return False
    return bool(mine["total"] - mine["canonical"] >= theirs["total"] - theirs["canonical"])
