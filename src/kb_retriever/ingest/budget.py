"""What one file may cost while it is read: unpacked bytes, paragraphs or pages, characters
and wall time (its embedding's too).

The file size limit bounds what is read, not what it unpacks to: a 184 KB DOCX held 1.6 M
paragraphs (54 MB of XML) and an ingest for 283 s. A :class:`Budget` is charged before parsing
(an archive's declared sizes) and while extracting (between paragraphs and pages), so a
hostile file stops early; running out is an :class:`~kb_retriever.errors.IngestError` naming
the file and the setting that bounds it, and the run goes on.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from kb_retriever.errors import IngestError
from kb_retriever.settings import Settings

__all__ = ["MB", "Budget"]

MB = 1024 * 1024
_RAISE = "; split the file or raise the limit"


@dataclass
class Budget:
    """One file's budget; ``rel`` names the file in the errors."""

    rel: str
    settings: Settings
    deadline: float
    unpacked: int = 0
    blocks: int = 0
    chars: int = 0
    chunked: int = 0  # the chunks made when the deadline was last checked

    @classmethod
    def start(cls, rel: str, settings: Settings) -> Budget:
        return cls(rel, settings, time.monotonic() + settings.ingest_file_timeout_s)

    def fail(self, reason: str) -> IngestError:
        return IngestError(f"{self.rel}: {reason}")

    def tick(self, where: str = "") -> None:
        """Fail once the file has taken longer than ``KB_INGEST_FILE_TIMEOUT_S``."""
        if time.monotonic() > self.deadline:
            at = f" (stopped at {where})" if where else ""
            raise self.fail(f"reading and embedding took more than KB_INGEST_FILE_TIMEOUT_S="
                            f"{self.settings.ingest_file_timeout_s:g} s{at}{_RAISE}")

    def ticker(self, where: str) -> Callable[..., None]:
        """:meth:`tick` as a callback of any arguments: pypdf's visitor of each operator of a
        page, the forms it draws included (a 4.5 KB page drew a 50,000-operator form 100
        times, and held an ingest 15 minutes between two pages' checks)."""
        return lambda *_: self.tick(where)

    def unpack(self, size: int, what: str) -> None:
        """Charge ``size`` unpacked bytes of ``what``, before they are parsed."""
        self.unpacked += size
        limit = self.settings.ingest_max_unpacked_mb
        if self.unpacked > limit * MB:
            raise self.fail(f"{what} unpack to more than KB_INGEST_MAX_UNPACKED_MB={limit} MB"
                            f"{_RAISE}")

    def paragraph(self) -> None:
        """Count one DOCX paragraph or table row (and check the deadline)."""
        self.blocks += 1
        if self.blocks > self.settings.ingest_max_paragraphs:
            raise self.fail(f"more than KB_INGEST_MAX_PARAGRAPHS="
                            f"{self.settings.ingest_max_paragraphs} paragraphs and table rows"
                            f"{_RAISE}")
        self.tick(f"paragraph {self.blocks}")

    def pages(self, count: int) -> None:
        """Check a PDF's page count (declared, or reached) and the deadline."""
        if count > self.settings.ingest_max_pages:
            raise self.fail(f"{count} pages, more than KB_INGEST_MAX_PAGES="
                            f"{self.settings.ingest_max_pages}{_RAISE}")
        self.tick(f"page {count}")

    def chunks(self, count: int) -> None:
        """Check the chunks made so far (and, every 256 of them, the deadline): called by the
        chunkers after each section, so a file of a million headings stops at the limit, not
        after it has them all (16 MB of headings made 1.3 M chunks and 856 MB before the count
        was read)."""
        limit = self.settings.ingest_max_chunks
        if count > limit:
            raise self.fail(f"more than KB_INGEST_MAX_CHUNKS={limit} chunks{_RAISE}")
        if count - self.chunked >= 256:
            self.chunked = count
            self.tick("chunking")

    def text(self, length: int) -> None:
        """Charge ``length`` characters of extracted text."""
        self.chars += length
        if self.chars > self.settings.ingest_max_chars:
            raise self.fail(f"more than KB_INGEST_MAX_CHARS={self.settings.ingest_max_chars} "
                            f"characters of text{_RAISE}")
