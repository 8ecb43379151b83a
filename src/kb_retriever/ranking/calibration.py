"""Per-knowledge-base calibration of the trust channels (issue 16; decision 0009).

An absolute cosine means different things per embedder and language: MiniLM gives unrelated
English text ~0.1 and unrelated Italian text ~0.45; E5 gives everything 0.7-0.85. So each
project measures its own *null*: at ingest, every probe sentence below (everyday questions no
engineering knowledge base answers, in six languages) is searched against the project's chunks
and its top-1 cosine kept (``kb_scope_stats.probe_similarity``). A query is vector evidence
when its best cosine clears the upper end of that null distribution by a margin, the same test
for any model.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["PROBES", "PROBE_VERSION", "Calibration", "quantile"]

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
    (the maximum over its projects), or nothing (never calibrated: absolute thresholds apply).

    >>> n = len(PROBES)
    >>> c = Calibration.from_rows([{"probe_version": PROBE_VERSION,
    ...                            "probe_similarity": [0.2] * (n - 1) + [0.6]},
    ...                           {"probe_version": PROBE_VERSION,
    ...                            "probe_similarity": [0.1] * (n - 1) + [0.9]}])
    >>> c.null_top1[:2], c.null_top1[-1], round(c.ceiling, 3)
    ((0.2, 0.2), 0.9, 0.2)
    >>> Calibration.from_rows([{"probe_version": "0", "probe_similarity": [0.2] * n}]).calibrated
    False
    """

    null_top1: tuple[float, ...] = ()

    @classmethod
    def from_rows(cls, rows: Sequence[Mapping[str, Any]]) -> Calibration:
        """From ``store.catalog_sql.scope_stats_sql`` rows (one per project of the scope). A scope
        whose projects are not all calibrated with the current probes counts as uncalibrated."""
        arrays = [list(r["probe_similarity"] or ()) for r in rows
                  if r.get("probe_version") == PROBE_VERSION]
        if not arrays or len(arrays) != len(rows) or any(len(a) != len(PROBES) for a in arrays):
            return cls()
        return cls(tuple(max(float(a[i]) for a in arrays) for i in range(len(PROBES))))

    @property
    def calibrated(self) -> bool:
        return bool(self.null_top1)

    @property
    def ceiling(self) -> float:
        """The upper end of the null: what unrelated text scores at best, nearly always."""
        return quantile(self.null_top1, NULL_QUANTILE) if self.null_top1 else 0.0

    def margin(self, similarity: float) -> float:
        """How far ``similarity`` clears the null ceiling, as a share of the room left above
        it (1 − ceiling): 0 at the ceiling, 1 at cosine 1, negative below. Scale-free, so the
        same threshold holds for a model that scores unrelated text 0.1 and one that scores
        it 0.8.

        >>> round(Calibration((0.5,) * len(PROBES)).margin(0.75), 3)
        0.5
        """
        c = self.ceiling
        return (similarity - c) / max(1.0 - c, 1e-6)
