"""What a DOCX (a zip archive) unpacks to, checked before python-docx parses it.

python-docx reads every part into memory and builds an lxml tree of each XML part before the
first paragraph can be counted: a 184 KB file of 1.6 M tiny paragraphs took 8 s and 860 MB
just to load. So the zip directory's sizes are charged to the :class:`Budget` first (zipfile
never yields more than a member's declared size: its CRC check fails), then the parts are
streamed once and their markup counted, stopping as soon as a budget is spent.
"""

from __future__ import annotations

import io
import zipfile

from kb_retriever.ingest.budget import MB, Budget

__all__ = ["TAGS_PER_PARAGRAPH", "check_archive"]

# Text XML deflates 5-30:1 (python-docx's own styles.xml: 29:1) and a 3,000-row table of one
# word 160:1 at 1.5 MB; the hostile file above is 343:1 at 54 MB. A large part past 100:1 is
# repetition made to be unpacked, not a document.
_BOMB_RATIO = 100
_BOMB_MIN_BYTES = 10 * MB
# The lxml tree costs ~150 bytes per element whatever the bytes per element, so markup is
# counted too ("<" bytes: about two per element). A formatted paragraph with its runs and
# properties is 10-30 tags; a 2,000-paragraph document with a table holds 60,000.
TAGS_PER_PARAGRAPH = 40
_READ = MB


def check_archive(raw: bytes, budget: Budget, kind: str = "DOCX") -> None:
    """Raise the budget's :class:`~kb_retriever.errors.IngestError` when the archive ``raw``
    unpacks past ``KB_INGEST_MAX_UNPACKED_MB``, holds a part compressed past 100:1 (over
    10 MB), or more markup than ``KB_INGEST_MAX_PARAGRAPHS`` paragraphs need. A broken
    archive raises zipfile's own errors, for the loader to translate."""
    archive = zipfile.ZipFile(io.BytesIO(raw))
    infos = archive.infolist()
    budget.unpack(sum(info.file_size for info in infos), f"{kind} parts")
    for info in infos:
        if (info.file_size >= _BOMB_MIN_BYTES
                and info.file_size > _BOMB_RATIO * max(info.compress_size, 1)):
            raise budget.fail(
                f"{kind} part {info.filename[:80]!r} unpacks {info.file_size // MB} MB from "
                f"{info.compress_size // 1024} KB, more than {_BOMB_RATIO}:1; not a document")
    paragraphs = budget.settings.ingest_max_paragraphs
    limit, tags = TAGS_PER_PARAGRAPH * paragraphs, 0
    for info in infos:
        with archive.open(info) as part:
            while block := part.read(_READ):
                tags += block.count(b"<")
                if tags > limit:
                    raise budget.fail(
                        f"{kind} holds more than {limit} XML tags ({TAGS_PER_PARAGRAPH} per "
                        f"paragraph of KB_INGEST_MAX_PARAGRAPHS={paragraphs}); split the file "
                        "or raise the limit")
                budget.tick(f"unpacking {info.filename[:80]!r}")
