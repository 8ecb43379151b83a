"""The knowledge base's words, in one place: canonical document types and statuses, source
types, which documents are rejected approaches, and the full-text configuration of each
document language.

Python, the SQL builders (as bound values) and the adapters all read them from here.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

__all__ = ["ACCEPTED", "CANONICAL_STATUSES", "CANONICAL_TYPES", "CHUNKS_SOURCE_TYPE", "DECISION",
           "DEFAULT_EDGE_TYPES", "EDGE_TYPE_WEIGHTS", "EXPANDABLE_STATUSES", "PROJECT_INDEX",
           "FTS_CONFIG_BY_LANGUAGE", "FTS_CONFIG_OF_DOCUMENT", "FTS_LANGUAGES",
           "FTS_NEAREST_LANGUAGE", "QUESTION_STOP_WORDS", "REFERENCE_TYPES", "REJECTED_APPROACH",
           "SCRIPTS", "SOURCE_TYPES", "letters",
           "fts_language", "is_rejected_approach"]

CANONICAL_TYPES = (
    "project-index", "module-kb", "decision", "runbook", "standard", "incident",
    "integration", "domain-concept", "rejected-approach",
)
CANONICAL_STATUSES = ("draft", "review", "accepted", "superseded", "deprecated", "archived")
#: ``source_type`` of a document whose chunks are added and replaced by id
#: (:meth:`KnowledgeBase.upsert_chunks`): its text is its chunks', in order.
CHUNKS_SOURCE_TYPE = "chunks"
#: What a document came from: a file type, or chunks added by id.
SOURCE_TYPES = ("markdown", "text", "pdf", "docx", CHUNKS_SOURCE_TYPE)

#: Writing systems by name, as Unicode blocks: Latin (with its accented letters) and the
#: scripts that ``ranking.calibration.SCRIPT_PROBES`` has questions in.
SCRIPTS = {name: re.compile(f"[{chars}]") for name, chars in (
    ("latin", "A-Za-z\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u024f\u1e00-\u1eff"),
    ("han", "\u3400-\u4dbf\u4e00-\u9fff"), ("kana", "\u3040-\u30ff"),
    ("hangul", "\u1100-\u11ff\uac00-\ud7af"), ("cyrillic", "\u0400-\u04ff"),
    ("arabic", "\u0600-\u06ff"), ("greek", "\u0370-\u03ff"))}
_LETTER = re.compile(r"[^\W\d_]")


def letters(text: str, scripts: Iterable[str] | None = None) -> int:
    """The number of letters in ``text``: in any script, or in ``scripts`` (names of
    :data:`SCRIPTS`; an unknown name counts none).

    >>> letters("ERP は 基幹システム"), letters("ERP は 基幹システム", ["latin"])
    (10, 3)
    """
    if scripts is None:
        return len(_LETTER.findall(text))
    return sum(len(SCRIPTS[name].findall(text)) for name in scripts if name in SCRIPTS)


#: The type of a record of an idea the team considered and dismissed, and the status that
#: makes a canonical document binding.
REJECTED_APPROACH = "rejected-approach"
ACCEPTED = "accepted"
#: The type of a project's index, a hub that links to everything (graph expansion skips it).
PROJECT_INDEX = "project-index"
#: A decision record, and the types of what it links to for reference (how to operate it, the
#: rules it follows, the terms it uses) rather than as its context (decision 0021).
DECISION = "decision"
REFERENCE_TYPES = ("runbook", "standard", "domain-concept")
#: The statuses of the canonical documents that graph expansion may show.
EXPANDABLE_STATUSES = (ACCEPTED, "review")

#: Edge types and default weights (reference §1.3).
EDGE_TYPE_WEIGHTS: dict[str, float] = {
    "decision_for": 1.0,
    "implements": 1.0,
    "supersedes": 1.0,
    "depends_on": 0.8,
    "uses": 0.8,
    "affects": 0.8,
    "documented_by": 0.7,
    "invalidated_by": 0.7,
    "owned_by": 0.7,
    "related_to": 0.5,
}
DEFAULT_EDGE_TYPES = ("depends_on", "implements", "decision_for", "related_to", "supersedes")


def is_rejected_approach(document: Any) -> bool:
    """Whether ``document`` (anything with ``is_canonical``, ``canonical_type`` and
    ``canonical_status``: a :class:`~kb_retriever.models.DocumentRef`, a stored document) is an
    accepted rejected-approach record, the kind the rejected channel warns about.

    >>> from types import SimpleNamespace as D
    >>> is_rejected_approach(D(is_canonical=True, canonical_type="rejected-approach",
    ...                        canonical_status="accepted"))
    True
    >>> is_rejected_approach(D(is_canonical=True, canonical_type="rejected-approach",
    ...                        canonical_status="draft"))
    False
    """
    return bool(document.is_canonical and document.canonical_type == REJECTED_APPROACH
                and document.canonical_status == ACCEPTED)


#: A document's language (ISO 639-1, lower case) -> the full-text configuration its chunks are
#: indexed with, where the server has it; any other language gets the database's default
#: (``KB_FTS_LANGUAGE``). PostgreSQL 16 added Armenian, Basque, Catalan, Hindi, Serbian and
#: Yiddish, a later version Estonian: on an older server their documents get the default
#: (``store.schema.text_configs``).
FTS_CONFIG_BY_LANGUAGE = {
    "en": "english", "it": "italian", "fr": "french", "de": "german", "es": "spanish",
    "pt": "portuguese", "nl": "dutch", "da": "danish", "fi": "finnish", "hu": "hungarian",
    "no": "norwegian", "nb": "norwegian", "ru": "russian", "sv": "swedish", "tr": "turkish",
    "ar": "arabic", "el": "greek", "id": "indonesian", "ga": "irish", "lt": "lithuanian",
    "ne": "nepali", "ro": "romanian", "ta": "tamil", "hy": "armenian", "eu": "basque",
    "ca": "catalan", "hi": "hindi", "sr": "serbian", "yi": "yiddish", "et": "estonian",
}
#: The configurations ``KB_FTS_LANGUAGE`` may name: ``simple`` and every language's above.
FTS_LANGUAGES = ("simple", *dict.fromkeys(FTS_CONFIG_BY_LANGUAGE.values()))
#: The commonest words of a question in a language whose configuration has no stop words
#: (PostgreSQL ships none for Romanian, Greek, Indonesian or Catalan): a question is asked
#: without them (``ranking.text.without_stop_words``), as English's configuration drops
#: English's. Asked, they matched most chunks of their language and lent an off-topic question
#: keyword evidence.
#: Not words that name things in English text a scope may also hold ("ai", "ca", "ada").
QUESTION_STOP_WORDS = {
    "romanian": frozenset(
        "a al ale am ar are au avea că care ce cel cea cei cele cu da dacă daca dar de "
        "deci din după dupa e este eu fi fie fost iar în in îi își la le lor lui mai mă ne nici "
        "nu o ori pe pentru până pana prin sau se să sa si și sunt te tu un una unei unui unor "
        "va vă voi vom vor cum unde când cand cât cine".split()),
    "greek": frozenset(
        "ο η το οι τα του της των τον την τη τους τις στο στη στην στον στα στους στις στου σε "
        "για με από απο και κι να θα δεν μη μην ή ότι οτι που πού πως πώς τι τί ένα ενα μια μία "
        "ένας ενας ενός είναι ειναι ήταν ηταν αν αλλά αλλα ως όπως οπως αυτό αυτο αυτή αυτη αυτά "
        "αυτα μας σας μου σου κάθε καθε πιο".split()),
    "catalan": frozenset(
        "a al als amb de del dels el els en es és ha han hem hi ho i la les li o on pel pels per "
        "perquè que què qui quin quina quins quines quan quant quanta quants quantes com un una "
        "uns unes us ens ja més no sí si se seu seva seus seves nostre nostra aquest aquesta "
        "aquests aquestes això ara molt tot tota tots totes tan tant també però sobre entre fins "
        "cada ser està estan va vam van vaig fa".split()),
    "indonesian": frozenset(
        "yang dan di ke dari ini itu dengan untuk tidak dalam akan pada adalah juga karena bisa "
        "oleh atau sudah telah jika saat harus apa bagaimana kapan mengapa siapa kami kita "
        "kamu saya mereka ia dia agar bahwa sebagai hanya lebih masih belum".split()),
}
#: A language without a configuration, indexed and asked with a close one's (its document
#: keeps its own code): on a Ukrainian set, Russian's stemmer ranked better than the words'
#: prefixes did (decision 0022).
FTS_NEAREST_LANGUAGE = {"uk": "ru"}
#: Every document language that has a configuration, its own or the nearest language's.
FTS_CONFIG_OF_DOCUMENT = {**FTS_CONFIG_BY_LANGUAGE, **{
    code: FTS_CONFIG_BY_LANGUAGE[near] for code, near in FTS_NEAREST_LANGUAGE.items()}}


def fts_language(code: str | None) -> str | None:
    """The language code a chunk is indexed by (a key of :data:`FTS_CONFIG_BY_LANGUAGE`), or
    None for the database's default.

    >>> fts_language("IT"), fts_language("ja"), fts_language(None), fts_language("uk")
    ('it', None, None, 'ru')
    """
    key = code.strip().lower() if isinstance(code, str) else None
    key = FTS_NEAREST_LANGUAGE.get(key or "", key)
    return key if key in FTS_CONFIG_BY_LANGUAGE else None
