"""Per-knowledge-base calibration of the trust channels (issue 16; decision 0009).

An absolute cosine means different things per embedder and language: MiniLM gives unrelated
English text ~0.1 and unrelated Italian text ~0.45; E5 gives everything 0.7-0.85. So each
project measures its own *null*: at ingest, every probe sentence below (everyday questions no
engineering knowledge base answers, in six languages of Latin script, and in each other script
the project's documents are written in) is searched against the project's chunks and its top-1
cosine kept (``kb_scope_stats.probe_similarity``). A query is vector evidence when its best
cosine clears the upper end of that null distribution by a margin, the same test for any
model.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

__all__ = ["ALL_PROBES", "GROUPS", "PROBES", "PROBE_VERSION", "SCRIPT_PROBES", "Calibration",
           "probes_for", "quantile"]

#: Bumped whenever PROBES change: a stored calibration of another version is ignored.
PROBE_VERSION = "1"

#: Everyday questions, unrelated to any engineering knowledge base, in the languages the
#: full-text configurations cover best. Not the benchmark's refusal questions (those test
#: the gate; these only calibrate it).
PROBES: tuple[str, ...] = (
    "How long should I boil an egg for a soft yolk?",
    "What is a good name for a golden retriever puppy?",
    "Which mountains are the highest in South America?",
    "How do I get red wine stains out of a carpet?",
    "What time does the bakery on the corner open on Sundays?",
    "Recommend a novel about a family saga in nineteenth century Russia.",
    "How many hours of sleep does a teenager need?",
    "What should I pack for a beach holiday with children?",
    "Quanto tempo deve cuocere la pasta al dente?",
    "Qual è il modo migliore per coltivare il basilico sul balcone?",
    "Chi ha dipinto la Cappella Sistina?",
    "Come si fa a togliere le macchie di caffè dalla camicia?",
    "Quali sono le spiagge più belle della Puglia?",
    "A che ora apre il mercato del pesce la domenica?",
    "Come si allena un cane a non tirare il guinzaglio?",
    "Quanti minuti servono per una camminata di cinque chilometri?",
    "Comment préparer une pâte à crêpes sans grumeaux ?",
    "Quel est le meilleur moment pour visiter la Provence ?",
    "Combien de temps faut-il pour apprendre le piano ?",
    "Qui a écrit Les Misérables ?",
    "Wie lange muss ein Sauerteigbrot gehen?",
    "Welche Pflanzen eignen sich für einen schattigen Garten?",
    "Wann beginnt die Skisaison in den Alpen?",
    "Wie pflege ich einen Ledersessel richtig?",
    "¿Cómo se prepara una buena paella de marisco?",
    "¿Cuál es la mejor época para ver flamencos en Doñana?",
    "¿Cuántas veces hay que regar un cactus?",
    "¿Quién ganó el premio Nobel de literatura en 1982?",
    "Como fazer um bolo de cenoura fofinho?",
    "Qual é a melhor praia para surfar no Algarve?",
    "Quantas horas de sol precisa um limoeiro?",
    "Quem compôs a música das Quatro Estações?",
)

#: Everyday questions in other scripts. A project whose documents are written in one of them
#: is measured against that script's questions too: E5 scores text of another script well
#: below unrelated text of the same one, so a Chinese knowledge base measured with the
#: questions above had its null at 0.78 while everyday Chinese questions scored 0.82-0.86 (and
#: were neither refused nor kept from warning). A project in Latin script alone is measured
#: with PROBES only (MiniLM scores scripts it never learnt at random).
SCRIPT_PROBES: dict[str, tuple[str, ...]] = {
    "han": ("煮溏心蛋需要多长时间？", "周末去哪里爬山比较好？", "怎样去除衬衫上的咖啡渍？",
            "红烧肉怎么做才好吃？", "明天北京的天气怎么样？", "给小狗起什么名字好听？"),
    "kana": ("半熟卵は何分ゆでればいいですか？", "週末に行くのにおすすめの温泉はどこですか？",
             "シャツについたコーヒーのしみはどうやって落としますか？", "桜は何月ごろに咲きますか？",
             "子犬にどんな名前をつけたらいいでしょうか？", "美味しいカレーの作り方を教えてください。"),
    "hangul": ("반숙 계란은 몇 분 동안 삶아야 하나요?", "주말에 가볼 만한 산이 어디인가요?",
               "셔츠에 묻은 커피 얼룩은 어떻게 지우나요?", "김치찌개를 맛있게 끓이는 방법은?",
               "강아지 이름으로 뭐가 좋을까요?", "내일 서울 날씨는 어때요?"),
    "cyrillic": ("Сколько минут варить яйцо всмятку?", "Куда лучше поехать летом с детьми?",
                 "Как вывести пятно от кофе с рубашки?", "Какую кличку дать щенку?",
                 "Кто написал роман «Война и мир»?", "Как приготовить вкусный борщ?"),
    "arabic": ("كم دقيقة أحتاج لسلق بيضة نصف مسلوقة؟", "ما هو أفضل وقت لزيارة البحر في الصيف؟",
               "كيف أزيل بقعة القهوة من القميص؟", "ما هو اسم جميل لجرو صغير؟",
               "كيف أحضر كبسة لذيذة؟", "من فاز بكأس العالم لكرة القدم عام 2022؟"),
    "greek": ("Πόσα λεπτά βράζω ένα αυγό μελάτο;", "Ποιο νησί είναι το καλύτερο για διακοπές;",
              "Πώς βγάζω έναν λεκέ από καφέ από το πουκάμισο;", "Τι όνομα να δώσω στο κουτάβι μου;",
              "Πώς φτιάχνω νόστιμο μουσακά;", "Ποιος έγραψε την Οδύσσεια;"),
}
#: Every probe, in the order their cosines are stored: PROBES, then each script's questions.
ALL_PROBES: tuple[str, ...] = PROBES + tuple(q for qs in SCRIPT_PROBES.values() for q in qs)


def _groups() -> tuple[tuple[str, slice], ...]:
    out, start = [("latin", slice(0, len(PROBES)))], len(PROBES)
    for name, qs in SCRIPT_PROBES.items():
        out.append((name, slice(start, start + len(qs))))
        start += len(qs)
    return tuple(out)


#: (script, its probes' slice of ALL_PROBES); "latin" is PROBES.
GROUPS = _groups()


def probes_for(scripts: Collection[str]) -> list[int]:
    """The indexes in :data:`ALL_PROBES` of the probes a project written in ``scripts`` (the
    non-Latin scripts of :func:`kb_retriever.ingest.language.scripts_of`) is measured with.

    >>> len(probes_for(())), len(probes_for({"han"})), probes_for({"han"})[-1] == len(PROBES) + 5
    (32, 38, True)
    """
    return [i for name, part in GROUPS if name == "latin" or name in scripts
            for i in range(part.start, part.stop)]


# The null ceiling is this quantile of the probes' top-1 cosines: the upper end of what
# unrelated text scores, robust to one probe that happens to touch a document.
NULL_QUANTILE = 0.9


def quantile(values: Sequence[float], q: float) -> float:
    """Linear-interpolation quantile (numpy's default) of non-empty ``values``.

    >>> quantile([0.1, 0.2, 0.3, 0.4], 0.5)
    0.25
    """
    xs = sorted(values)
    pos = (len(xs) - 1) * q
    lo, hi = math.floor(pos), math.ceil(pos)
    return round(xs[lo] + (xs[hi] - xs[lo]) * (pos - lo), 12)


@dataclass(frozen=True)
class Calibration:
    """The null distribution of a scope: each probe's top-1 cosine over the scope's chunks
    (the maximum over its projects; None for a script's probes that no project was measured
    with), or nothing (never calibrated: absolute thresholds apply).

    >>> n = len(PROBES)
    >>> c = Calibration.from_rows([{"probe_version": PROBE_VERSION,
    ...                            "probe_similarity": [0.2] * (n - 1) + [0.6]},
    ...                           {"probe_version": PROBE_VERSION,
    ...                            "probe_similarity": [0.1] * (n - 1) + [0.9]}])
    >>> c.null_top1[:2], c.null_top1[n - 1], c.null_top1[n], round(c.ceiling, 3)
    ((0.2, 0.2), 0.9, None, 0.2)
    >>> Calibration.from_rows([{"probe_version": "0", "probe_similarity": [0.2] * n}]).calibrated
    False
    """

    null_top1: tuple[float | None, ...] = ()

    @classmethod
    def from_rows(cls, rows: Sequence[Mapping[str, Any]]) -> Calibration:
        """From ``store.catalog_sql.scope_stats_sql`` rows (one per project of the scope): each
        holds the cosines of PROBES, or of ALL_PROBES when a script's probes measured it. A
        scope whose projects are not all calibrated with the current probes counts as
        uncalibrated."""
        arrays = [list(r["probe_similarity"] or ()) for r in rows
                  if r.get("probe_version") == PROBE_VERSION]
        if (not arrays or len(arrays) != len(rows)
                or any(len(a) not in (len(PROBES), len(ALL_PROBES)) for a in arrays)):
            return cls()
        full = [a + [None] * (len(ALL_PROBES) - len(a)) for a in arrays]
        return cls(tuple(max((float(x) for x in column if x is not None), default=None)
                         for column in zip(*full, strict=True)))

    @property
    def calibrated(self) -> bool:
        return bool(self.null_top1)

    @cached_property  # a scope's calibration is cached and read for every hit: once each
    def ceiling(self) -> float:
        """The upper end of the null: what unrelated text scores at best, nearly always (the
        quantile of PROBES' cosines). The refusal gate, the cutoff and the graph's floors
        compare against it."""
        return self._quantile(self.null_top1[:len(PROBES)])

    @cached_property
    def warning_ceiling(self) -> float:
        """The null of the rejected channel: the highest of each script's own quantile
        (PROBES', and those of the scripts the scope's documents are written in), so that six
        questions of one script are not outvoted by thirty of another. A warning needs the
        question to clear what everyday questions in the documents' script score; the gate and
        the cutoff keep :attr:`ceiling`, as a Chinese set's weak on-topic questions fell under
        this one and were refused (decision 0009, amendment)."""
        return max(self._quantile(self.null_top1[part]) for _, part in GROUPS)

    @staticmethod
    def _quantile(values: Sequence[float | None]) -> float:
        measured = [x for x in values if x is not None]
        return quantile(measured, NULL_QUANTILE) if measured else 0.0

    def margin(self, similarity: float, ceiling: float | None = None) -> float:
        """How far ``similarity`` clears the null ceiling, as a share of the room left above
        it (1 − ceiling): 0 at the ceiling, 1 at cosine 1, negative below. Scale-free, so the
        same threshold holds for a model that scores unrelated text 0.1 and one that scores
        it 0.8.

        >>> round(Calibration((0.5,) * len(PROBES)).margin(0.75), 3)
        0.5
        """
        c = self.ceiling if ceiling is None else ceiling
        return (similarity - c) / max(1.0 - c, 1e-6)
