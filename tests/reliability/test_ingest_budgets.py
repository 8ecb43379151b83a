"""Hostile files cost a bounded amount each (issue 23, part 4): unpacked bytes, paragraphs or
pages, characters and wall time are budgeted per file, before and while parsing; running out
is one file's failure in the report, and the run goes on."""

from __future__ import annotations

import io
import random
import zipfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import psycopg
import pytest

from kb_retriever import HashingEmbedder, KnowledgeBase, Settings
from kb_retriever.ingest import budget as budget_module
from kb_retriever.write.from_files import EMBED_BATCH

from ..unit.test_loaders import make_pdf, make_pdf_lines

pytestmark = pytest.mark.db

MakeKb = Callable[..., KnowledgeBase]
W = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
_CONTENT_TYPES = (
    '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>'
    '<Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">'
    '<Default Extension="rels" ContentType="application/vnd.openxmlformats-package.'
    'relationships+xml"/><Default Extension="xml" ContentType="application/xml"/>'
    '<Default Extension="bin" ContentType="application/octet-stream"/>'
    '<Override PartName="/word/document.xml" ContentType="application/vnd.openxmlformats-'
    'officedocument.wordprocessingml.document.main+xml"/></Types>')
_RELS = (
    '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>'
    '<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">'
    '<Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/2006/'
    'relationships/officeDocument" Target="word/document.xml"/></Relationships>')


def docx_of(paragraphs: Iterator[bytes] | list[bytes], *, extra: bytes = b"") -> bytes:
    """A minimal DOCX whose body is ``paragraphs`` (``<w:p>`` elements), streamed into the
    zip; ``extra`` is stored as one more (unreferenced) part."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("[Content_Types].xml", _CONTENT_TYPES)
        archive.writestr("_rels/.rels", _RELS)
        with archive.open("word/document.xml", "w", force_zip64=True) as part:
            part.write(f'<?xml version="1.0" encoding="UTF-8" standalone="yes"?>'
                       f'<w:document xmlns:w="{W}"><w:body>'.encode())
            for p in paragraphs:
                part.write(p)
            part.write(b"</w:body></w:document>")
        if extra:
            archive.writestr("word/media/blob.bin", extra, compress_type=zipfile.ZIP_STORED)
    return buffer.getvalue()


def para(text: str, runs: int = 1) -> bytes:
    return b"<w:p>" + f"<w:r><w:t>{text}</w:t></w:r>".encode() * runs + b"</w:p>"


def _write(folder: Path, name: str, content: str | bytes) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    return path


def _stored(kb: KnowledgeBase) -> list[str]:
    with psycopg.connect(kb.url) as conn:
        return [r[0] for r in conn.execute("SELECT source_path FROM kb_documents ORDER BY 1")]


@pytest.fixture
def parses(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Records each file python-docx or pypdf was asked to parse (or extract a page of)."""
    import docx
    from pypdf import PageObject

    calls: list[str] = []
    real_document, real_extract = docx.Document, PageObject.extract_text

    def document(*args: Any, **kwargs: Any) -> Any:
        calls.append("docx")
        return real_document(*args, **kwargs)

    def extract(self: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append("pdf page")
        return real_extract(self, *args, **kwargs)

    monkeypatch.setattr(docx, "Document", document)
    monkeypatch.setattr(PageObject, "extract_text", extract)
    return calls


class FakeClock:
    """time.monotonic() that advances one second per call: a deadline falls at a known tick."""

    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        self.now += 1.0
        return self.now


# --- DOCX ---------------------------------------------------------------------------------

def test_a_docx_zip_bomb_fails_before_python_docx_reads_it(make_kb: MakeKb, tmp_path: Path,
                                                          parses: list[str]) -> None:
    # The file: 184 KB of 1.6 M tiny paragraphs. A quarter of it (14 MB of XML in a
    # 40 KB zip) is as hostile and quicker to make.
    block = para("x") * 10_000
    _write(tmp_path, "bomb.docx", docx_of(block for _ in range(40)))
    _write(tmp_path, "fine.md", "# Fine\n\nredis is our cache\n")
    assert (tmp_path / "bomb.docx").stat().st_size < 100_000
    kb = make_kb()
    report = kb.ingest([tmp_path])
    assert report.added == ["fine.md"]
    [(path, reason)] = report.failed
    assert path == "bomb.docx" and "more than 100:1" in reason, reason
    assert parses == []  # refused from the zip directory alone
    assert _stored(kb) == ["fine.md"]


def test_docx_markup_beyond_the_paragraph_budget_is_refused_before_parsing(
        make_kb: MakeKb, tmp_path: Path, parses: list[str]) -> None:
    # Low ratio (every paragraph differs), under the size budget, but 5,000 paragraphs of 20
    # runs each: 210,000 tags, more than 40 per paragraph of a 1,000-paragraph budget.
    _write(tmp_path, "dense.docx", docx_of([para(f"w{i}", runs=20) for i in range(5_000)]))
    kb = make_kb(settings=Settings(ingest_max_paragraphs=1_000))
    [(path, reason)] = kb.ingest([tmp_path]).failed
    assert path == "dense.docx"
    assert "more than 40000 XML tags" in reason and "KB_INGEST_MAX_PARAGRAPHS=1000" in reason
    assert parses == [] and _stored(kb) == []


def test_docx_paragraphs_are_counted_while_extracting(make_kb: MakeKb, tmp_path: Path,
                                                      parses: list[str]) -> None:
    _write(tmp_path, "long.docx", docx_of([para(f"paragraph {i}") for i in range(1_500)]))
    kb = make_kb(settings=Settings(ingest_max_paragraphs=1_000))
    report = kb.ingest([tmp_path])
    assert report.failed == [("long.docx", "more than KB_INGEST_MAX_PARAGRAPHS=1000 paragraphs "
                                           "and table rows; split the file or raise the limit")]
    assert parses == ["docx"]  # parsed, then stopped at paragraph 1,001
    assert _stored(kb) == []


def test_docx_unpacked_size_and_characters_are_budgeted(make_kb: MakeKb, tmp_path: Path,
                                                        parses: list[str]) -> None:
    noise = random.Random(7).randbytes(2 * 1024 * 1024)  # stored: the ratio is 1:1
    _write(tmp_path / "big", "media.docx", docx_of([para("hello")], extra=noise))
    kb = make_kb(settings=Settings(ingest_max_unpacked_mb=1, ingest_max_chars=5_000))
    [(path, reason)] = kb.ingest([tmp_path / "big"]).failed
    assert path == "media.docx" and "KB_INGEST_MAX_UNPACKED_MB=1 MB" in reason
    assert parses == []
    _write(tmp_path / "wordy", "wordy.docx", docx_of([para("w" * 100)] * 100))  # 10,000 chars
    [(path, reason)] = kb.ingest([tmp_path / "wordy"]).failed
    assert path == "wordy.docx" and "KB_INGEST_MAX_CHARS=5000" in reason
    assert _stored(kb) == []


def test_docx_wall_time_is_checked_between_paragraphs(make_kb: MakeKb, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    _write(tmp_path, "slow.docx", docx_of([para(f"paragraph {i}") for i in range(500)]))
    _write(tmp_path, "z-next.md", "# Next\n\nstill ingested\n")
    kb = make_kb(settings=Settings(ingest_file_timeout_s=100))
    monkeypatch.setattr(budget_module, "time", FakeClock())
    report = kb.ingest([tmp_path])
    [(path, reason)] = report.failed
    assert path == "slow.docx" and "KB_INGEST_FILE_TIMEOUT_S=100 s" in reason
    assert "(stopped at paragraph" in reason
    assert report.added == ["z-next.md"]  # its own budget: the run went on


def test_a_normal_docx_and_pdf_pass_the_default_budgets(make_kb: MakeKb, tmp_path: Path) -> None:
    import docx

    document = docx.Document()
    for i in range(2_000):
        if i % 100 == 0:
            document.add_heading(f"Section {i // 100}", level=1)
        document.add_paragraph(f"Paragraph {i} explains how the cache layer handles key {i}.")
    table = document.add_table(rows=200, cols=3)
    for row in table.rows:
        for cell in row.cells:
            cell.text = "n/a"
    document.save(str(tmp_path / "handbook.docx"))
    _write(tmp_path, "manual.pdf", make_pdf([f"Page {i} of the manual about redis."
                                             for i in range(300)]))
    kb = make_kb()
    report = kb.ingest([tmp_path])
    assert report.failed == [] and sorted(report.added) == ["handbook.docx", "manual.pdf"]


# --- PDF ----------------------------------------------------------------------------------

def test_pdf_pages_are_budgeted_before_and_while_extracting(make_kb: MakeKb, tmp_path: Path,
                                                            parses: list[str]) -> None:
    kb = make_kb(settings=Settings(ingest_max_pages=200))
    many = make_pdf([f"page {i}" for i in range(600)])
    _write(tmp_path / "a", "many.pdf", many)
    [(path, reason)] = kb.ingest([tmp_path / "a"]).failed
    assert (path, reason) == ("many.pdf", "600 pages, more than KB_INGEST_MAX_PAGES=200; split "
                                          "the file or raise the limit")
    assert parses == []  # the declared count, before the first page
    # A file that declares one page but holds 600 stops at page 201.
    liar = many.replace(b"/Count 600 >>", b"/Count 1   >>")
    assert len(liar) == len(many)
    _write(tmp_path / "b", "liar.pdf", liar)
    [(path, reason)] = kb.ingest([tmp_path / "b"]).failed
    assert (path, reason) == ("liar.pdf", "201 pages, more than KB_INGEST_MAX_PAGES=200; split "
                                          "the file or raise the limit")
    assert len(parses) == 200
    assert _stored(kb) == []


def test_pdf_characters_and_wall_time_are_budgeted(make_kb: MakeKb, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    _write(tmp_path / "a", "wordy.pdf", make_pdf(["x" * 80] * 50))  # 4,000 characters
    kb = make_kb(settings=Settings(ingest_max_chars=1_000, ingest_file_timeout_s=30))
    [(path, reason)] = kb.ingest([tmp_path / "a"]).failed
    assert path == "wordy.pdf" and "KB_INGEST_MAX_CHARS=1000" in reason
    _write(tmp_path / "b", "slow.pdf", make_pdf([f"page {i}" for i in range(100)]))
    monkeypatch.setattr(budget_module, "time", FakeClock())
    [(path, reason)] = kb.ingest([tmp_path / "b"]).failed
    assert path == "slow.pdf" and "KB_INGEST_FILE_TIMEOUT_S=30 s (stopped at page" in reason
    assert _stored(kb) == []


def test_the_deadline_holds_within_a_page(make_kb: MakeKb, tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The deadline was checked between pages only: a 4.5 KB page that drew a 50,000-operator
    form 100 times held an ingest 15 minutes. It is checked at each operator now (the fake
    clock ticks a second a look: one page of 60 lines, 180 operators, passes 30 s within it)."""
    _write(tmp_path, "one-page.pdf", make_pdf_lines([f"line {i}" for i in range(60)]))
    kb = make_kb(settings=Settings(ingest_file_timeout_s=30))
    monkeypatch.setattr(budget_module, "time", FakeClock())
    [(path, reason)] = kb.ingest([tmp_path]).failed
    assert path == "one-page.pdf" and reason.startswith(
        "reading and embedding took more than KB_INGEST_FILE_TIMEOUT_S=30 s (stopped at page 1)")


class ClockedEmbedder(HashingEmbedder):
    """A hashing embedder whose every call takes 20 s of the fake clock."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__(64)
        self.clock = clock

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        self.clock.now += 20.0
        return super().embed_documents(texts)


def test_the_deadline_holds_while_a_file_is_embedded(make_kb: MakeKb, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Embedding was outside the deadline: a 4.4 MB text file embedded for 100 s. The deadline
    is checked before each batch now, and the batches embedded stay cached: the next ingest
    goes on from there."""
    _write(tmp_path, "long.md", "\n\n".join(f"# Part {i}\n\nparagraph {i}" for i in range(600)))
    clock = FakeClock()
    kb = make_kb(embedder=ClockedEmbedder(clock), settings=Settings(ingest_file_timeout_s=30))
    monkeypatch.setattr(budget_module, "time", clock)
    [(path, reason)] = kb.ingest([tmp_path]).failed
    assert path == "long.md" and reason.startswith(
        "reading and embedding took more than KB_INGEST_FILE_TIMEOUT_S=30 s (stopped at "
        f"embedding chunk {2 * EMBED_BATCH + 1} of 600)")
    assert _stored(kb) == []
    monkeypatch.undo()
    again = kb.ingest([tmp_path])
    assert again.added == ["long.md"] and again.chunks_embedded == 600 - 2 * EMBED_BATCH


@pytest.mark.parametrize("name", ["KB_INGEST_MAX_UNPACKED_MB", "KB_INGEST_MAX_PARAGRAPHS",
                                  "KB_INGEST_MAX_PAGES", "KB_INGEST_MAX_CHARS",
                                  "KB_INGEST_FILE_TIMEOUT_S"])
@pytest.mark.parametrize("value", ["0", "-1", "nan", "many"])
def test_the_budgets_are_validated_settings(monkeypatch: pytest.MonkeyPatch, name: str,
                                            value: str) -> None:
    from kb_retriever import ConfigError

    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError, match=name):
        Settings()
