"""Query tokenisation, keyword scoring and query-tag extraction (reference §11).

Stdlib only: ``[^\\W_]`` in a ``str`` pattern is "a character for which ``str.isalnum()`` is true",
which is the stdlib spelling of ``[\\p{L}\\p{N}]``. Text is NFC-normalised first so that a
decomposed accent (``e`` + U+0301) does not split a word in two.
"""

from __future__ import annotations

import math
import re
import unicodedata
from bisect import bisect_left
from collections.abc import Collection, Iterable, Mapping, Sequence

from ..vocabulary import QUESTION_STOP_WORDS

__all__ = [
    "MAX_HEADING_CHARS",
    "PREFIX_LANGUAGES",
    "STOP_WORDS",
    "acronyms",
    "cjk_bigrams",
    "clip_words",
    "fts_prefix",
    "keyword_score",
    "normalize_tags",
    "prefixed_query",
    "query_tags",
    "segment_cjk",
    "tokenize_query",
    "without_stop_words",
    "word_prefixes",
    "words",
]

_IT_STOP = (
    "il lo la i gli le un uno una di a da in con su per tra fra e o ma che non si come del della "
    "dello dei delle degli al alla allo ai alle agli nel nella nello nei nelle negli sul sulla "
    "sullo sui sulle sugli"
)
_EN_STOP = (
    "the a an is are was were be been to of in for on with at by from and or but not this that "
    "it how what which who where when"
)
#: The Italian + English stop-words of the reference tokenizer (§11).
STOP_WORDS: frozenset[str] = frozenset((_IT_STOP + " " + _EN_STOP).split())
# The tag extractor also drops "why" (reference QueryTagExtractor).
_TAG_STOP_WORDS = STOP_WORDS | {"why"}

# Anything that is neither a letter, a digit nor whitespace becomes a word break (underscore too:
# it is in \w but not in [\p{L}\p{N}]).
_NON_WORD = re.compile(r"[^\w\s]|_")
# Same, but hyphens survive so that tags such as "auth-flow" stay one token.
_NON_TAG = re.compile(r"[^\w\s-]|_")

# A query token shorter than this never matches as a prefix: "cat" must not hit "category",
# while "deploy" should partly match "deployment".
_MIN_PREFIX_LEN = 4
_PREFIX_CREDIT = 0.5  # a prefix hit is weaker evidence than a whole-word hit
_MAX_TAGS = 3  # the reference keeps the three longest query words as tags


def _fold(text: str) -> str:
    return unicodedata.normalize("NFC", text).lower()


def words(text: str) -> list[str]:
    """Lower-cased words of ``text``: runs of letters/digits (no stop-word or length filter)."""
    return _NON_WORD.sub(" ", _fold(text)).split()


def acronyms(text: str) -> frozenset[str]:
    """The words of ``text`` written in capitals (two characters or more), lower-cased as
    :func:`words` gives them.

    >>> sorted(acronyms("Should we run our own ELK stack on K8S? Or MES on Алиюнь, ЕГАИС?"))
    ['elk', 'k8s', 'mes', 'егаис']
    """
    raw = _NON_WORD.sub(" ", unicodedata.normalize("NFC", text)).split()
    return frozenset(w.lower() for w in raw if len(w) > 1 and w.isupper())


def tokenize_query(query: str) -> list[str]:
    """Query tokens as the reference reranker sees them.

    Lowercase, every non letter/digit/space character becomes a space, split on whitespace, drop
    tokens of length <= 1 and the IT+EN stop-words. Duplicates are kept (``keyword_score``
    dedupes).

    >>> tokenize_query("Come il OAuth-2 flow?")
    ['oauth', 'flow']
    """
    return [t for t in words(query) if len(t) > 1 and t not in STOP_WORDS]


def keyword_score(
    tokens: Sequence[str], text: str, weights: Mapping[str, float] | None = None
) -> float:
    """Fraction of the unique query ``tokens`` found in ``text``, in ``[0, 1]``.

    With ``weights`` (token -> weight, e.g. :func:`pool_idf`) the fraction is weighted, so a rare
    token such as an error code counts more than a word every candidate contains (fix of
    reference §24.7: no IDF).

    A token scores 1.0 when it is a whole word of ``text``, 0.5 when it is at least 4 characters
    long and a prefix of a word (``deploy`` -> ``deployment``), else 0. Case-insensitive and
    Unicode-aware; linear in ``len(text)`` plus a binary search per token.

    >>> keyword_score(["oauth", "deploy"], "OAuth deployment guide")
    0.75
    """
    if not text:
        return 0.0
    return score_vocabulary(tokens, frozenset(words(text)), weights)


def score_vocabulary(
    tokens: Sequence[str], vocabulary: Collection[str], weights: Mapping[str, float] | None = None
) -> float:
    """:func:`keyword_score` over a text's precomputed word set (``set(words(text))``).

    The reranker tokenises each candidate once and scores it against this set.
    """
    return score_folded(unique_folded(tokens), vocabulary, weights)


def unique_folded(tokens: Sequence[str]) -> list[str]:
    """The distinct non-empty ``tokens``, case- and Unicode-folded, in first-seen order."""
    return list(dict.fromkeys(_fold(t) for t in tokens if t))


def score_folded(unique: Sequence[str], vocabulary: Collection[str],
                 weights: Mapping[str, float] | None = None) -> float:
    """:func:`score_vocabulary` for tokens already passed through :func:`unique_folded`: the
    reranker folds the query once rather than once per candidate."""
    if not unique or not vocabulary:
        return 0.0
    ordered: list[str] | None = None  # sorted lazily: most calls never need a prefix lookup
    total = 0.0
    norm = 0.0
    for token in unique:
        w = 1.0 if weights is None else weights.get(token, 1.0)
        norm += w
        if token in vocabulary:
            total += w
        elif len(token) >= _MIN_PREFIX_LEN:
            ordered = ordered if ordered is not None else sorted(vocabulary)
            # The first word >= token in sort order is the only candidate that can start with it.
            i = bisect_left(ordered, token)
            if i < len(ordered) and ordered[i].startswith(token):
                total += _PREFIX_CREDIT * w
    return total / norm if norm > 0 else 0.0


def pool_idf(tokens: Sequence[str], texts: Sequence[str | Collection[str]]) -> dict[str, float]:
    """BM25-style inverse document frequency of each token over a candidate pool.

    ``idf = ln(1 + (N - df + 0.5) / (df + 0.5))`` (Robertson/Sparck Jones, as in BM25; always
    positive), with ``df`` counting the texts in which the token occurs as a whole word. The pool
    (the few dozen candidates of one query) stands in for the corpus: cheap, and it ranks what
    distinguishes candidates from each other.

    >>> idf = pool_idf(["quota", "checkout"], ["quota checkout", "checkout", "checkout"])
    >>> idf["quota"] > idf["checkout"]
    True
    """
    unique = list(dict.fromkeys(_fold(t) for t in tokens if t))
    # Each item is a text or an already computed word set (the reranker passes word sets).
    vocabularies = [set(words(t)) if isinstance(t, str) else t for t in texts]
    n = len(vocabularies)
    out = {}
    for token in unique:
        df = sum(1 for v in vocabularies if token in v)
        out[token] = math.log(1.0 + (n - df + 0.5) / (df + 0.5))
    return out


def query_tags(query: str, limit: int = _MAX_TAGS) -> list[str]:
    """The query words compared with a chunk's tags (reference QueryTagExtractor).

    Lowercase; characters other than letters, digits, whitespace and hyphens become spaces; drop
    stop-words (plus ``why``) and tokens of length <= 2; dedupe; the ``limit`` longest words
    (stable for equal lengths). Leading/trailing hyphens are trimmed (``-foo`` -> ``foo``).

    >>> query_tags("Why did we pick the auth-flow for billing?")
    ['auth-flow', 'billing', 'pick']
    """
    tokens = (t.strip("-") for t in _NON_TAG.sub(" ", _fold(query)).split())
    kept = [t for t in tokens if len(t) > 2 and t not in _TAG_STOP_WORDS]
    unique = list(dict.fromkeys(kept))
    unique.sort(key=len, reverse=True)  # list.sort is stable: equal lengths keep query order
    return unique[:limit]


def normalize_tags(tags: Iterable[object]) -> set[str]:
    """Lower-cased, trimmed, non-empty tag strings (for Jaccard overlap)."""
    out = set()
    for tag in tags:
        if tag is None:
            continue
        clean = _fold(str(tag)).strip()
        if clean:
            out.add(clean)
    return out


# A heading is a label: longer ones are pasted prose (a 1.7 MB "heading" overflowed the chunk's
# tsvector, whose limit is 1 MB); they are cut at a word boundary.
MAX_HEADING_CHARS = 200


def clip_words(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` characters, at a word boundary where there is one.

    >>> clip_words("a rather long heading", 12)
    'a rather'
    """
    if len(text) <= limit:
        return text
    cut = text[:limit + 1].rsplit(None, 1)[0] if " " in text[:limit + 1] else text[:limit]
    return cut[:limit].rstrip()


# Kana, Han and Hangul: written without spaces between words, so PostgreSQL's parser takes a
# whole run of them for one word, and full-text search never matched part of a sentence.
_CJK_RUN = re.compile("[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]+")


def cjk_bigrams(text: str) -> list[str]:
    """The overlapping character pairs of each run of Chinese, Japanese or Korean script in
    ``text`` (a lone character stands alone): the words that full-text search indexes and
    matches for scripts written without spaces, as n-gram indexes do.

    >>> cjk_bigrams("缓存层 uses Redis; 会话 and 键")
    ['缓存', '存层', '会话', '键']
    """
    out: list[str] = []
    for run in _CJK_RUN.findall(text):
        out.extend([run] if len(run) == 1 else [run[i:i + 2] for i in range(len(run) - 1)])
    return out


def segment_cjk(text: str) -> str:
    """``text`` with each run of Chinese, Japanese or Korean script replaced by its character
    pairs (:func:`cjk_bigrams`): the full-text query of a question. Other text is unchanged.

    >>> segment_cjk("Redis 缓存层怎么配置?")
    'Redis 缓存 存层 层怎 怎么 么配 配置 ?'
    """
    if not _CJK_RUN.search(text):
        return text
    return " ".join(_CJK_RUN.sub(lambda m: f" {' '.join(cjk_bigrams(m.group()))} ", text).split())


#: Languages that PostgreSQL has no stemmer for and whose words change their endings
#: (ingest.language detects them): their chunks and the questions asked of them are indexed
#: by each longer word's first :data:`PREFIX_CHARS` letters too (decision 0022; Finnish,
#: which PostgreSQL stems, was measured with them on two sets and left out: its amendment
#: of 2026-12-07).
PREFIX_LANGUAGES = frozenset({"cs", "pl", "sk"})
PREFIX_CHARS = 6
_LETTERS = re.compile(r"[^\W\d_]+")
# A question's word of letters alone, punctuation around it aside: "wodomierzy," and
# "(LoRaWAN)" are words; "PostgreSQL16", "e-faktura", "lis.oru.max_stari_min" and addresses
# are identifiers, which the parser keeps whole and which a question asks by whole.
_PLAIN_WORD = re.compile(r"(\W*)([^\W\d_]+)(\W*)")


def _long_word(token: str) -> tuple[str, str, str] | None:
    """A token's (punctuation before, word, punctuation after) when it is a word longer than
    :data:`PREFIX_CHARS`; None for a short word, an identifier or Chinese, Japanese or Korean
    script (paired by :func:`segment_cjk` instead)."""
    m = _PLAIN_WORD.fullmatch(token)
    if m is None or len(m.group(2)) <= PREFIX_CHARS or _CJK_RUN.search(m.group(2)):
        return None
    return m.group(1), m.group(2), m.group(3)


def word_prefixes(text: str) -> str:
    """The first :data:`PREFIX_CHARS` letters of each longer run of letters of ``text`` (not
    Chinese, Japanese or Korean), lower-cased: the crude stem that lets "wodomierzy" and
    "wodomierzem" meet where no stemmer does. Runs inside identifiers count too: a chunk
    that holds a word within "kopii/zapasowych" is found by the word.

    >>> word_prefixes("Odczyty wodomierzy przez bramy LoRaWAN, kopii/zapasowych, 二维码扫描枪")
    'odczyt wodomi lorawa zapaso'
    """
    return " ".join(w[:PREFIX_CHARS] for w in _LETTERS.findall(_fold(text))
                    if len(w) > PREFIX_CHARS and not _CJK_RUN.search(w))


def without_stop_words(text: str, configs: Iterable[str]) -> str:
    """``text`` without the words of :data:`~kb_retriever.vocabulary.QUESTION_STOP_WORDS` of
    ``configs`` (the text unchanged when none has a list, or when nothing else would be left).

    >>> without_stop_words("Ce vreme va fi la Constanța în weekend?", ["romanian"])
    'vreme Constanța weekend?'
    >>> without_stop_words("Ce vreme va fi la Constanța?", ["english"])
    'Ce vreme va fi la Constanța?'
    """
    stop = frozenset().union(*(QUESTION_STOP_WORDS.get(c, ()) for c in configs))
    if not stop:
        return text
    kept = [t for t in text.split()
            if not ((m := _PLAIN_WORD.fullmatch(_fold(t))) and m.group(2) in stop)]
    return " ".join(kept) if kept else text


def prefixed_query(text: str, *, keep_words: bool) -> str:
    """A question's full-text query for documents indexed by their words' prefixes too: each
    longer word as its prefix; with ``keep_words`` (a scope that also holds documents indexed
    by their words alone) the words and then the prefixes. A chunk holds both a word and its
    prefix, so a question that asked by both would count every exact match twice.
    Identifiers and Chinese, Japanese or Korean text stay whole.

    >>> prefixed_query("Kiedy wymieniamy wodomierze w 2025?", keep_words=False)
    'kiedy wymien wodomi w 2025?'
    >>> prefixed_query("Czy PostgreSQL16 obsługuje dyzurny@wodociagi.pl?", keep_words=False)
    'czy postgresql16 obsług dyzurny@wodociagi.pl?'
    >>> prefixed_query("Kiedy wymieniamy wodomierze?", keep_words=True)
    'Kiedy wymieniamy wodomierze? wymien wodomi'
    """
    if keep_words:
        return f"{text} {word_prefixes(text)}".rstrip()
    return " ".join(f"{w[0]}{w[1][:PREFIX_CHARS]}{w[2]}" if (w := _long_word(t)) else t
                    for t in _fold(text).split())


def fts_prefix(title: str, heading_path: str, text: str, language: str | None = None) -> str:
    """A chunk's ``search_prefix``, which its full-text vector indexes with its text: its
    title and heading path, the character pairs of its Chinese, Japanese or Korean text, and,
    in a language of :data:`PREFIX_LANGUAGES`, its words' prefixes (a chunk in other languages
    and scripts gets its title and heading path, as before).

    >>> fts_prefix("Cache", "Cache > TTL", "We keep sessions 15 minutes.")
    'Cache Cache > TTL'
    >>> fts_prefix("缓存", "缓存 > 过期", "会话保存")
    '缓存 缓存 > 过期 会话 话保 保存'
    >>> fts_prefix("Awarie sieci", "Awarie sieci", "Wymiana wodomierza", "pl")
    'Awarie sieci Awarie sieci wymian wodomi'
    """
    head = segment_cjk(f"{title} {heading_path}".strip())
    extra = " ".join(cjk_bigrams(text))
    if language in PREFIX_LANGUAGES:
        extra = f"{extra} {word_prefixes(f'{title} {heading_path} {text}')}".strip()
    return f"{head} {extra}".strip() if extra else head
