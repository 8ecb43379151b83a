"""Loading .md/.markdown/.txt/.pdf/.docx files into DocumentDrafts, and frontmatter edges."""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
import zipfile
from datetime import UTC, datetime
from pathlib import Path

import docx
import pytest

from kb_retriever.errors import IngestError
from kb_retriever.ingest import SUPPORTED_SUFFIXES, loaders, parse_document, parse_frontmatter
from kb_retriever.ingest.chunking import estimate_tokens
from kb_retriever.ingest.loaders import build_edges
from kb_retriever.models import EdgeDraft
from kb_retriever.settings import EDGE_TYPE_WEIGHTS, Settings

CANONICAL_MD = """---
slug: auth-flow
id: DEC-1
type: decision
status: accepted
title: Authentication flow
retrieval_priority: 80
tags: [auth, security]
owners: [alice]
summary: We use OAuth.
updated: 2024-05-01
language: en
related: [[[token-store]], session]
supersedes: ["[[old-auth]]"]
superseded_by: []
depends_on: [identity-provider]
---
# Auth

We use OAuth, see [[token-store]] and [[audit-log]] and [[auth-flow]].

```
[[not-a-link]]
```
"""


@pytest.fixture()
def settings() -> Settings:
    return Settings()


def write(root: Path, rel: str, content: str | bytes) -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    return path


def make_pdf(pages: list[str]) -> bytes:
    """A minimal valid PDF (Helvetica, one text line per page; '' = a page without text)."""
    objects: dict[int, bytes] = {
        1: b"<< /Type /Catalog /Pages 2 0 R >>",
        3: b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    }
    kids = []
    for i, text in enumerate(pages):
        page_no, content_no = 4 + 2 * i, 5 + 2 * i
        kids.append(f"{page_no} 0 R")
        escaped = text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")
        stream = f"BT /F1 10 Tf 20 700 Td ({escaped}) Tj ET".encode("latin-1") if text else b""
        objects[page_no] = (
            f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font "
            f"<< /F1 3 0 R >> >> /Contents {content_no} 0 R >>").encode()
        objects[content_no] = (b"<< /Length %d >>\nstream\n" % len(stream)) + stream + (
            b"\nendstream")
    objects[2] = f"<< /Type /Pages /Kids [{' '.join(kids)}] /Count {len(pages)} >>".encode()
    out = bytearray(b"%PDF-1.4\n")
    offsets = {}
    for number in sorted(objects):
        offsets[number] = len(out)
        out += f"{number} 0 obj\n".encode() + objects[number] + b"\nendobj\n"
    xref = len(out)
    out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode()
    for number in sorted(objects):
        out += f"{offsets[number]:010d} 00000 n \n".encode()
    out += (f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n"
            "%%EOF\n").encode()
    return bytes(out)


def make_docx() -> bytes:
    document = docx.Document()
    document.add_paragraph("Before any heading.")
    document.add_heading("Overview", level=1)
    document.add_paragraph("The service issues tokens.")
    document.add_heading("Rotation", level=2)
    document.add_paragraph("Keys rotate daily.")
    document.add_paragraph("# not a heading in the source")
    document.add_heading("Deep", level=6)
    document.add_paragraph("Six levels down.")
    table = document.add_table(rows=2, cols=2)
    table.cell(0, 0).text, table.cell(0, 1).text = "key", "value"
    table.cell(1, 0).text, table.cell(1, 1).text = "ttl", "3600"
    buffer = io.BytesIO()
    document.save(buffer)
    return buffer.getvalue()


def assert_one_line_error(exc: pytest.ExceptionInfo[IngestError], rel: str, *words: str) -> None:
    message = str(exc.value)
    assert message.startswith(f"{rel}: ")
    assert "\n" not in message
    for word in words:
        assert word in message


# --- markdown -------------------------------------------------------------------------------


def test_canonical_markdown(tmp_path: Path, settings: Settings) -> None:
    path = write(tmp_path, "decisions/auth-flow.md", CANONICAL_MD)
    draft = parse_document(path, root=tmp_path, settings=settings)
    assert draft.source_path == "decisions/auth-flow.md"
    assert draft.doc_key == "auth-flow"
    assert draft.title == "Authentication flow"
    assert draft.source_type == "markdown"
    assert draft.is_canonical
    assert (draft.slug, draft.doc_id, draft.canonical_type, draft.canonical_status) == (
        "auth-flow", "DEC-1", "decision", "accepted")
    assert draft.retrieval_priority == 80
    assert draft.tags == ("auth", "security")
    assert draft.owners == ("alice",)
    assert draft.summary == "We use OAuth."
    assert draft.language == "en"
    assert draft.doc_date == datetime(2024, 5, 1, tzinfo=UTC)
    assert draft.canonical_warnings == ()
    assert len(draft.chunks) == 1
    assert draft.chunks[0].heading_path == "Auth"
    assert draft.chunks[0].metadata["filename"] == "auth-flow.md"
    assert "slug:" not in draft.chunks[0].text
    assert [(e.to_slug, e.edge_type, e.provenance) for e in draft.edges] == [
        ("token-store", "related_to", "frontmatter_related"),
        ("session", "related_to", "frontmatter_related"),
        ("old-auth", "supersedes", "frontmatter_supersedes"),
        ("identity-provider", "depends_on", "frontmatter_typed"),
        ("audit-log", "related_to", "wikilink"),  # token-store deduped, self-link skipped
    ]
    assert draft.frontmatter["_derived"]["related_slugs"] == ["token-store", "session"]
    json.dumps(dict(draft.frontmatter))  # the writer stores it as jsonb


def test_plain_markdown_title_is_first_h1(tmp_path: Path, settings: Settings) -> None:
    path = write(tmp_path, "Notes.Markdown", "## Sub\n\n# Heading\n\ntext [[some-doc]]")
    draft = parse_document(path, root=tmp_path, settings=settings)
    assert draft.title == "Heading"  # the reference used the file name (decision 0002)
    assert draft.doc_key == "Notes"
    assert not draft.is_canonical
    assert draft.edges == ()  # only canonical documents get edges


def test_markdown_without_h1_title_falls_back_to_file_name(tmp_path: Path, settings: Settings) -> None:
    path = write(tmp_path, "Notes.md", "## Only a subheading\n\ntext")
    draft = parse_document(path, root=tmp_path, settings=settings)
    assert draft.title == "Notes"
    assert draft.frontmatter == {}


def test_invalid_canonical_frontmatter_is_ingested_with_warnings(
    tmp_path: Path, settings: Settings
) -> None:
    text = CANONICAL_MD.replace("slug: auth-flow", "slug: Auth Flow")
    draft = parse_document(write(tmp_path, "a.md", text), root=tmp_path, settings=settings)
    assert not draft.is_canonical
    assert draft.slug is None and draft.canonical_type is None and draft.edges == ()
    assert draft.retrieval_priority == 50
    assert any("slug" in w for w in draft.canonical_warnings)
    assert draft.title == "Authentication flow"  # descriptive fields still apply
    assert draft.tags == ("auth", "security")
    assert len(draft.chunks) == 1


def test_canonical_disabled(tmp_path: Path) -> None:
    settings = Settings(canonical_enabled=False)
    draft = parse_document(write(tmp_path, "a.md", CANONICAL_MD), root=tmp_path,
                           settings=settings)
    assert not draft.is_canonical
    assert draft.slug is None and draft.doc_id is None and draft.edges == ()
    assert draft.title == "Authentication flow"
    assert any("canonical_enabled" in w for w in draft.canonical_warnings)
    assert "slug:" not in draft.chunks[0].text  # frontmatter is still stripped


def test_malformed_yaml_is_non_canonical_not_an_error(tmp_path: Path, settings: Settings) -> None:
    path = write(tmp_path, "bad-yaml.md", "---\nslug: [oops\n---\n# Still\nindexed")
    draft = parse_document(path, root=tmp_path, settings=settings)
    assert not draft.is_canonical
    assert draft.canonical_warnings and "YAML" in draft.canonical_warnings[0]
    assert [c.text for c in draft.chunks] == ["indexed"]


def test_empty_markdown_has_zero_chunks(tmp_path: Path, settings: Settings) -> None:
    draft = parse_document(write(tmp_path, "empty.md", ""), root=tmp_path, settings=settings)
    assert draft.chunks == ()
    # A canonical document with an empty body is still canonical, and stored: its title and
    # summary are its one chunk (with none, the ingest skipped it and deleted what was stored).
    draft = parse_document(write(tmp_path, "only-fm.md", CANONICAL_MD.split("# Auth")[0]),
                           root=tmp_path, settings=settings)
    assert draft.is_canonical and [c.text for c in draft.chunks] == [
        "Authentication flow\n\nWe use OAuth."]


def test_utf8_bom_is_accepted(tmp_path: Path, settings: Settings) -> None:
    path = write(tmp_path, "bom.md", "\ufeff---\nslug: a\ntype: runbook\nstatus: draft\n---\nHi")
    draft = parse_document(path, root=tmp_path, settings=settings)
    assert draft.is_canonical
    assert draft.chunks[0].text == "Hi"


@pytest.mark.parametrize("end", ["\r\n", "\r"])
def test_windows_and_old_mac_line_ends(tmp_path: Path, settings: Settings, end: str) -> None:
    """An \r-only file was one line: its title held the whole text, its frontmatter unread."""
    text = end.join(["---", "slug: a", "type: runbook", "status: draft", "---", "# CR",
                     "", "line one", "line two"])
    path = tmp_path / "cr.md"
    path.write_bytes(text.encode())
    draft = parse_document(path, root=tmp_path, settings=settings)
    assert draft.is_canonical and draft.title == "CR"
    assert "\r" not in "".join(c.text for c in draft.chunks)


def test_chunk_settings_are_applied(tmp_path: Path) -> None:
    body = "# H\n\n" + "\n\n".join(f"Paragraph {i} " + "word " * 40 for i in range(10))
    path = write(tmp_path, "long.md", body)
    draft = parse_document(path, root=tmp_path,
                           settings=Settings(chunk_hard_cap_tokens=100, chunk_overlap_tokens=0))
    assert len(draft.chunks) > 1
    assert all(estimate_tokens(c.text) <= 100 for c in draft.chunks)


def test_content_hash(tmp_path: Path, settings: Settings) -> None:
    path = write(tmp_path, "a.md", "# A\ntext")
    first = parse_document(path, root=tmp_path, settings=settings).content_hash
    assert len(first) == 64
    assert parse_document(path, root=tmp_path, settings=settings).content_hash == first
    other_settings = Settings(chunk_hard_cap_tokens=256)
    assert parse_document(path, root=tmp_path, settings=other_settings).content_hash != first
    write(tmp_path, "a.md", "# A\ntext!")
    assert parse_document(path, root=tmp_path, settings=settings).content_hash != first


def test_path_equal_to_root_uses_its_name(tmp_path: Path, settings: Settings) -> None:
    path = write(tmp_path, "single.md", "x")
    assert parse_document(path, root=path, settings=settings).source_path == "single.md"


def test_path_outside_root_is_an_error(tmp_path: Path, settings: Settings) -> None:
    path = write(tmp_path, "a/x.md", "x")
    with pytest.raises(IngestError, match="not inside"):
        parse_document(path, root=tmp_path / "b", settings=settings)


# --- text -----------------------------------------------------------------------------------


def test_text_file_heading_path_is_the_file_name(tmp_path: Path, settings: Settings) -> None:
    text = "First paragraph.\n\n# a line that looks like a heading\n\nLast [[x-y]]."
    draft = parse_document(write(tmp_path, "notes/todo.txt", text), root=tmp_path,
                           settings=settings)
    assert draft.source_type == "text"
    assert draft.title == "todo"
    assert [c.heading_path for c in draft.chunks] == ["todo.txt"]
    assert draft.chunks[0].text == text
    assert draft.chunks[0].metadata["strategy"] == "section_aware"
    assert not draft.is_canonical


def test_text_file_frontmatter_is_not_parsed(tmp_path: Path, settings: Settings) -> None:
    draft = parse_document(write(tmp_path, "t.txt", CANONICAL_MD), root=tmp_path,
                           settings=settings)
    assert not draft.is_canonical
    assert draft.chunks[0].text.startswith("---\nslug: auth-flow")


# --- docx -----------------------------------------------------------------------------------


def test_docx_headings_become_breadcrumbs(tmp_path: Path, settings: Settings) -> None:
    draft = parse_document(write(tmp_path, "spec.docx", make_docx()), root=tmp_path,
                           settings=settings)
    assert draft.source_type == "docx"
    assert draft.title == "spec"
    assert [(c.heading_path, c.text) for c in draft.chunks] == [
        ("", "Before any heading."),
        ("Overview", "The service issues tokens."),
        ("Overview > Rotation", "Keys rotate daily.\n\n\\# not a heading in the source"),
        ("Overview > Rotation > Deep", "Six levels down.\n\n| key | value |\n| ttl | 3600 |"),
    ]
    assert draft.doc_date is None or draft.doc_date.tzinfo is not None


def test_docx_text_that_looks_like_markdown_syntax_is_escaped(tmp_path: Path,
                                                              settings: Settings) -> None:
    document = docx.Document()
    for text in ["---", "slug: x", "---", "```", "## fake", "real text"]:
        document.add_paragraph(text)
    buffer = io.BytesIO()
    document.save(buffer)
    draft = parse_document(write(tmp_path, "md-like.docx", buffer.getvalue()), root=tmp_path,
                           settings=settings)
    assert [c.heading_path for c in draft.chunks] == [""] * 6  # no headings, no frontmatter
    assert [c.text for c in draft.chunks] == [
        "\\---", "slug: x", "\\---", "\\```", "\\## fake", "real text"]


@pytest.mark.parametrize("content", [
    b"PK\x03\x04 not really a zip",
    b"plain text pretending to be a docx",
])
def test_broken_docx_is_an_ingest_error(tmp_path: Path, settings: Settings,
                                        content: bytes) -> None:
    with pytest.raises(IngestError) as exc:
        parse_document(write(tmp_path, "d/broken.docx", content), root=tmp_path,
                       settings=settings)
    assert_one_line_error(exc, "d/broken.docx", "DOCX")


def test_zip_without_a_document_is_an_ingest_error(tmp_path: Path, settings: Settings) -> None:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("hello.txt", "not word")
    with pytest.raises(IngestError) as exc:
        parse_document(write(tmp_path, "z.docx", buffer.getvalue()), root=tmp_path,
                       settings=settings)
    assert_one_line_error(exc, "z.docx", "DOCX")


def test_docx_headings_from_outline_levels_and_short_bold_paragraphs(
        tmp_path: Path, settings: Settings) -> None:
    """Headings styled "Normal": short bold paragraphs and outline levels still make sections
    with a heading path (issue 16), while bold sentences stay body text."""
    from docx.oxml import OxmlElement
    from docx.oxml.ns import qn

    document = docx.Document()
    document.add_paragraph().add_run("Connection pooling").bold = True
    document.add_paragraph("We use PgBouncer in transaction mode.")
    document.add_paragraph().add_run("Do not hold transactions open while waiting.").bold = True
    outlined = document.add_paragraph("Timeouts")
    level = OxmlElement("w:outlineLvl")
    level.set(qn("w:val"), "2")
    outlined._p.get_or_add_pPr().append(level)
    document.add_paragraph("idle_in_transaction_session_timeout is 60 s.")
    custom = document.styles.add_style("Section Title", 1)  # 1 = paragraph style
    custom.base_style = document.styles["Heading 1"]
    document.add_paragraph("Appendix", style="Section Title")
    document.add_paragraph("Extra notes.")
    buffer = io.BytesIO()
    document.save(buffer)
    draft = parse_document(write(tmp_path, "pool.docx", buffer.getvalue()), root=tmp_path,
                           settings=settings)
    assert [(c.heading_path, c.text) for c in draft.chunks] == [
        ("Connection pooling", "We use PgBouncer in transaction mode.\n\n"
                               "Do not hold transactions open while waiting."),
        ("Connection pooling > Timeouts", "idle_in_transaction_session_timeout is 60 s."),
        ("Appendix", "Extra notes."),
    ]


def make_pdf_lines(lines: list[str]) -> bytes:
    """One page with one text line per item (``T*`` moves down a line)."""
    pdf = make_pdf(["PLACEHOLDER"])
    shown = " T* ".join("({})Tj".format(x.replace("(", "\\(").replace(")", "\\)"))
                        for x in lines)
    old = b"BT /F1 10 Tf 20 700 Td (PLACEHOLDER) Tj ET"
    new = f"BT /F1 10 Tf 12 TL 20 700 Td {shown} ET".encode("latin-1")
    body = pdf.replace(b"<< /Length %d >>" % len(old), b"<< /Length %d >>" % len(new))
    body = body.replace(old, new)
    # the xref offsets after the stream move by the length difference: rebuild them
    head, _, _ = body.partition(b"xref\n")
    offsets = [m.start() for m in re.finditer(rb"\d+ 0 obj\n", head)]
    xref = f"xref\n0 {len(offsets) + 1}\n0000000000 65535 f \n".encode()
    xref += b"".join(f"{o:010d} 00000 n \n".encode() for o in offsets)
    trailer = (f"trailer\n<< /Size {len(offsets) + 1} /Root 1 0 R >>\nstartxref\n{len(head)}\n"
               "%%EOF\n").encode()
    return head + xref + trailer


def test_pdf_words_broken_across_lines_are_joined(tmp_path: Path, settings: Settings) -> None:
    pdf = make_pdf_lines(["Kill sessions that stay idle-in-", "transaction for an hour; the",
                          "connec-", "tion pool recovers."])
    draft = parse_document(write(tmp_path, "pg.pdf", pdf), root=tmp_path, settings=settings)
    text = draft.chunks[0].text
    assert "idle-in-transaction" in text and "connection pool" in text
    assert "-\n" not in text


# --- pdf ------------------------------------------------------------------------------------


def test_pdf_one_chunk_per_page(tmp_path: Path, settings: Settings) -> None:
    pdf = make_pdf(["Hello from page one.", "", "Page three says goodbye."])
    draft = parse_document(write(tmp_path, "docs/manual.pdf", pdf), root=tmp_path,
                           settings=settings)
    assert draft.source_type == "pdf"
    assert draft.title == "manual"
    assert draft.source_path == "docs/manual.pdf"
    assert [(c.order, c.heading_path, c.text) for c in draft.chunks] == [
        (0, "Page 1", "Hello from page one."),
        (1, "Page 3", "Page three says goodbye."),  # the page without text is skipped
    ]
    assert draft.chunks[0].metadata["strategy"] == "pdf_page"


def test_pdf_with_two_pages(tmp_path: Path, settings: Settings) -> None:
    pdf = make_pdf(["Alpha page text.", "Beta page text."])
    draft = parse_document(write(tmp_path, "two.pdf", pdf), root=tmp_path, settings=settings)
    assert [c.heading_path for c in draft.chunks] == ["Page 1", "Page 2"]
    assert [c.text for c in draft.chunks] == ["Alpha page text.", "Beta page text."]


def test_oversize_pdf_page_is_split_under_the_same_heading(tmp_path: Path) -> None:
    long_line = " ".join(f"Sentence {i} is here." for i in range(60))
    pdf = make_pdf([long_line, "short"])
    settings = Settings(chunk_hard_cap_tokens=32)
    draft = parse_document(write(tmp_path, "big.pdf", pdf), root=tmp_path, settings=settings)
    page_one = [c for c in draft.chunks if c.heading_path == "Page 1"]
    assert len(page_one) > 1
    assert all(estimate_tokens(c.text) <= 32 for c in draft.chunks)  # no overlap for PDFs
    assert draft.chunks[-1].heading_path == "Page 2"
    assert [c.order for c in draft.chunks] == list(range(len(draft.chunks)))


@pytest.mark.parametrize("content", [
    b"%PDF-1.4\n1 0 obj\n<< /Type /Catalog /Pages 9 0 R >>\nendobj\ntrailer\n<<>>\n%%EOF",
    b"%PDF-1.7 truncated",
    b"not a pdf at all",
    b"",
])
def test_broken_pdf_is_an_ingest_error(tmp_path: Path, settings: Settings,
                                       content: bytes) -> None:
    with pytest.raises(IngestError) as exc:
        parse_document(write(tmp_path, "x/broken.pdf", content), root=tmp_path,
                       settings=settings)
    assert_one_line_error(exc, "x/broken.pdf", "PDF")


# --- other errors ---------------------------------------------------------------------------


def test_binary_file_is_an_ingest_error(tmp_path: Path, settings: Settings) -> None:
    with pytest.raises(IngestError) as exc:
        parse_document(write(tmp_path, "img.md", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"),
                       root=tmp_path, settings=settings)
    assert_one_line_error(exc, "img.md", "binary")


@pytest.mark.parametrize("name", ["latin1.txt", "latin1.md"])
def test_undecodable_file_is_an_ingest_error(tmp_path: Path, settings: Settings,
                                             name: str) -> None:
    with pytest.raises(IngestError) as exc:
        parse_document(write(tmp_path, name, "café crème".encode("latin-1")), root=tmp_path,
                       settings=settings)
    assert_one_line_error(exc, name, "UTF-8", "offset 3")


def test_unsupported_suffix(tmp_path: Path, settings: Settings) -> None:
    with pytest.raises(IngestError) as exc:
        parse_document(write(tmp_path, "a.rtf", "x"), root=tmp_path, settings=settings)
    assert_one_line_error(exc, "a.rtf", "unsupported", ".md")


def test_missing_file_and_directory(tmp_path: Path, settings: Settings) -> None:
    with pytest.raises(IngestError) as exc:
        parse_document(tmp_path / "gone.md", root=tmp_path, settings=settings)
    assert_one_line_error(exc, "gone.md", "cannot read")
    (tmp_path / "dir.md").mkdir()
    with pytest.raises(IngestError):
        parse_document(tmp_path / "dir.md", root=tmp_path, settings=settings)


def test_file_over_the_size_limit(tmp_path: Path, settings: Settings,
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    assert loaders.MAX_FILE_BYTES == 20 * 1024 * 1024
    monkeypatch.setattr(loaders, "MAX_FILE_BYTES", 100)
    path = write(tmp_path, "big.md", "x" * 101)
    with pytest.raises(IngestError) as exc:
        parse_document(path, root=tmp_path, settings=settings)
    assert_one_line_error(exc, "big.md", "larger than")
    write(tmp_path, "ok.md", "x" * 100)
    assert parse_document(tmp_path / "ok.md", root=tmp_path, settings=settings).chunks


def test_supported_suffixes() -> None:
    assert SUPPORTED_SUFFIXES == (".md", ".markdown", ".txt", ".pdf", ".docx")


# --- edges ----------------------------------------------------------------------------------


def test_build_edges_weights_dedupe_and_self_links() -> None:
    fm = parse_frontmatter(
        "---\nslug: me\ntype: decision\nstatus: accepted\nrelated: [a, me, a]\n"
        "superseded_by: [newer]\nrelated_to: [a, b]\nimplements: [spec]\n---\n")
    edges = build_edges(fm, ["b", "c", "me", ""])
    assert edges == (
        EdgeDraft("a", "related_to", EDGE_TYPE_WEIGHTS["related_to"], "frontmatter_related"),
        EdgeDraft("newer", "invalidated_by", 0.7, "frontmatter_superseded_by"),
        EdgeDraft("spec", "implements", 1.0, "frontmatter_typed"),  # EDGE_TYPE_WEIGHTS order
        EdgeDraft("b", "related_to", 0.5, "frontmatter_typed"),
        EdgeDraft("c", "related_to", 0.5, "wikilink"),
    )


def test_build_edges_same_target_different_types_are_kept() -> None:
    fm = parse_frontmatter("---\nslug: me\ntype: decision\nstatus: accepted\nrelated: [x]\n"
                           "supersedes: [x]\n---\n")
    assert [(e.to_slug, e.edge_type) for e in build_edges(fm)] == [
        ("x", "related_to"), ("x", "supersedes")]


def test_build_edges_non_canonical_has_none() -> None:
    fm = parse_frontmatter("---\nslug: me\nrelated: [x]\n---\n")
    assert build_edges(fm, ["y"]) == ()


def test_docx_styles_are_looked_up_once_per_style(monkeypatch: pytest.MonkeyPatch) -> None:
    """100k paragraphs took minutes because every paragraph looked its style up (several
    times); now each distinct style is read once, and the headings come out the same."""
    import io

    import docx
    from docx.text.paragraph import Paragraph

    from kb_retriever.ingest.budget import Budget
    from kb_retriever.ingest.loaders import _docx_markdown

    d = docx.Document()
    for i in range(300):
        d.add_paragraph(f"Section {i}", style="Heading 2" if i % 100 == 0 else None)
        d.add_paragraph(f"body text of paragraph {i}, a sentence.")
    buf = io.BytesIO()
    d.save(buf)
    lookups = []
    real = Paragraph.style.fget  # type: ignore[attr-defined]
    monkeypatch.setattr(Paragraph, "style", property(lambda p: lookups.append(1) or real(p)))
    text, _ = _docx_markdown(buf.getvalue(), "many.docx", Budget.start("many.docx", Settings()))
    assert text.count("## Section") == 3
    assert len(lookups) <= 3  # the default style, Heading 2 (and the document's base)


@pytest.mark.parametrize("text", [
    "# a" + " " * 200_000 + "b\n\nbody",  # a heading line of spaces (chunker and title)
    "# a" + "#" * 200_000 + "b\n\nbody",
    "w" * 200_000,  # one long word (a base64 blob in a PDF): the hyphen joiner
    "a-" * 100_000,
])
def test_no_line_costs_the_square_of_its_length(text: str) -> None:
    """A 120 KB heading line of spaces held an ingest 2 min 43 s, a 200,000-letter word in a
    PDF 286 s: the heading, title and hyphen patterns backtracked over the whole line from
    each position. Bounded here at 60 s for what took minutes to hours (it takes
    milliseconds); in a process of its own, as a regex holds the interpreter until it ends."""
    script = ("import sys\n"
              "from kb_retriever.ingest.chunking import chunk_markdown\n"
              "from kb_retriever.ingest.loaders import _first_h1, join_hyphenation\n"
              "text = sys.stdin.read()\n"
              "chunk_markdown(text), _first_h1(text), join_hyphenation(text)\n")
    subprocess.run([sys.executable, "-c", script], input=text, text=True, check=True,
                   timeout=60)


def test_a_heading_with_nothing_under_it_keeps_its_words(tmp_path: Path, settings: Settings) -> None:
    """A section with a heading and no body vanished, heading included: a short bold DOCX
    line taken for a heading ("NEVER restart the old primary" before the next heading, or as
    the last paragraph) was in no chunk and no heading path. A heading whose section holds a
    deeper one lives on in that one's path; the others are kept as chunks of their own."""
    document = docx.Document()
    document.add_paragraph().add_run("NEVER restart the old primary").bold = True
    document.add_heading("Failover", level=2)
    document.add_paragraph("Promote the replica with pg_ctl promote.")
    document.add_paragraph().add_run("Approved by the CTO on 2024-05-01").bold = True
    buffer = io.BytesIO()
    document.save(buffer)
    draft = parse_document(write(tmp_path, "f.docx", buffer.getvalue()), root=tmp_path,
                           settings=settings)
    text = "\n".join(c.text + " " + c.heading_path for c in draft.chunks)
    assert "NEVER restart the old primary" in text and "Approved by the CTO" in text
    assert [c.heading_path for c in draft.chunks] == ["", "Failover"]  # a real heading stays one


def test_docx_text_in_insertions_content_controls_fields_and_nested_tables(
        tmp_path: Path, settings: Settings) -> None:
    """python-docx's ``Paragraph.text`` reads a paragraph's own runs: a tracked insertion, a
    content control (inline, or around whole paragraphs), a field's result and a table in a
    table cell were dropped without a word; a cell spanning three columns came three times."""
    from docx.oxml import parse_xml
    from docx.oxml.ns import nsdecls

    w = nsdecls("w")
    document = docx.Document()
    p = document.add_paragraph("Before ")
    p._p.append(parse_xml(f'<w:ins {w} w:id="1" w:author="a"><w:r><w:t>INSERTED</w:t></w:r></w:ins>'))
    p._p.append(parse_xml(f'<w:sdt {w}><w:sdtContent><w:r><w:t xml:space="preserve"> INLINE-SDT'
                          f'</w:t></w:r></w:sdtContent></w:sdt>'))
    p._p.append(parse_xml(f'<w:fldSimple {w} w:instr="DATE"><w:r><w:t xml:space="preserve"> '
                          f'FIELD-RESULT</w:t></w:r></w:fldSimple>'))
    p._p.append(parse_xml(f'<w:del {w} w:id="2" w:author="a"><w:r><w:delText>DELETED'
                          f'</w:delText></w:r></w:del>'))
    document.element.body.append(parse_xml(
        f'<w:sdt {w}><w:sdtContent><w:p><w:r><w:t>BLOCK-SDT paragraph</w:t></w:r></w:p>'
        f'</w:sdtContent></w:sdt>'))
    table = document.add_table(rows=2, cols=3)
    table.cell(0, 0).merge(table.cell(0, 2)).text = "MERGED"
    table.cell(1, 0).add_table(rows=1, cols=1).cell(0, 0).text = "NESTED-TABLE-TEXT"
    buffer = io.BytesIO()
    document.save(buffer)
    draft = parse_document(write(tmp_path, "f.docx", buffer.getvalue()), root=tmp_path,
                           settings=settings)
    text = "\n".join(c.text for c in draft.chunks)
    for shown in ("Before INSERTED INLINE-SDT FIELD-RESULT", "BLOCK-SDT paragraph",
                  "NESTED-TABLE-TEXT"):
        assert shown in text, text
    assert "DELETED" not in text and text.count("MERGED") == 1


def test_a_canonical_record_with_no_body_is_stored_by_its_title_and_summary(
        tmp_path: Path, settings: Settings) -> None:
    """A rejected approach written as frontmatter and a title alone had no chunk: the ingest
    skipped it ("no text to index") and deleted its stored version, slug, summary and edges."""
    text = ("---\nslug: rej-memcached\ntype: rejected-approach\nstatus: accepted\n"
            "summary: Memcached has no persistence and no replication.\n"
            "related: ['[[dec-cache]]']\n---\n# Rejected: memcached\n")
    draft = parse_document(write(tmp_path, "rej.md", text.encode()), root=tmp_path,
                           settings=settings)
    assert draft.is_canonical and [c.text for c in draft.chunks] == [
        "Rejected: memcached\n\nMemcached has no persistence and no replication."]
    assert [e.to_slug for e in draft.edges] == ["dec-cache"]


def test_the_title_is_not_a_comment_in_a_code_block(tmp_path: Path, settings: Settings) -> None:
    """A leading shell block's comment (``# restart the service``) was taken for the H1."""
    text = "```bash\n# restart the service\nsystemctl restart api\n```\n\n# Real Title\n\nBody.\n"
    draft = parse_document(write(tmp_path, "r.md", text.encode()), root=tmp_path,
                           settings=settings)
    assert draft.title == "Real Title"


def test_a_text_that_opens_with_a_rule_keeps_what_stands_between_the_rules(
        tmp_path: Path, settings: Settings) -> None:
    """``---`` / a paragraph / ``---`` read as a frontmatter block that is no mapping: the
    paragraph was indexed nowhere."""
    text = "---\n\nIntro paragraph that matters.\n\n---\n\n# Heading\n\ntext\n"
    draft = parse_document(write(tmp_path, "rule.md", text.encode()), root=tmp_path,
                           settings=settings)
    assert "Intro paragraph that matters." in "\n".join(c.text for c in draft.chunks)


@pytest.mark.parametrize("codec", ["utf-16", "utf-16-be"])
def test_a_utf16_text_file_with_its_bom_is_read(tmp_path: Path, settings: Settings,
                                                codec: str) -> None:
    """Windows' "Unicode" (UTF-16 with a byte order mark) failed as "a binary file (contains
    NUL bytes)"."""
    text = "# Notes\n\nÇa marche: the cache is Redis.\n"
    raw = text.encode(codec) if codec == "utf-16" else b"\xfe\xff" + text.encode(codec)
    draft = parse_document(write(tmp_path, "w.md", raw), root=tmp_path, settings=settings)
    assert draft.title == "Notes" and draft.chunks[0].text == "Ça marche: the cache is Redis."


@pytest.mark.parametrize("name", ["many.md", "many.txt"])
def test_a_file_of_too_many_chunks_stops_while_it_is_chunked(tmp_path: Path, name: str) -> None:
    """The chunk limit was read only once every chunk existed: 16 MB of headings made 1.3 M
    chunks and 856 MB before it, past the file's deadline. The chunkers now count as they
    go, so the file fails at the limit, and a text file's characters count as a PDF's do."""
    body = "\n".join(f"# Heading {i}\n\nline {i}" for i in range(5_000))
    if name.endswith(".txt"):  # one section: its paragraphs split at the cap
        body = "\n\n".join(f"paragraph {i} " + "word " * 60 for i in range(2_000))
    path = write(tmp_path, name, body)
    with pytest.raises(IngestError) as exc:
        parse_document(path, root=tmp_path, settings=Settings(ingest_max_chunks=100))
    assert_one_line_error(exc, name, "more than KB_INGEST_MAX_CHUNKS=100 chunks")
    with pytest.raises(IngestError) as exc:
        parse_document(path, root=tmp_path, settings=Settings(ingest_max_chars=10_000))
    assert_one_line_error(exc, name, "KB_INGEST_MAX_CHARS=10000")


def test_a_pdf_or_docx_is_read_again_by_another_version_of_its_reader(
        tmp_path: Path, settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    """A new pypdf or python-docx extracts other text, but the hash named only the file and
    the settings: every PDF stayed "unchanged", with the old version's chunks."""
    paths = [write(tmp_path, "a.pdf", make_pdf(["Page text"])),
             write(tmp_path, "b.docx", make_docx()), write(tmp_path, "c.md", "# C\ntext")]
    before = [parse_document(p, root=tmp_path, settings=settings).content_hash for p in paths]
    monkeypatch.setattr(loaders.importlib.metadata, "version", lambda name: "99.0")
    loaders._reader_version.cache_clear()
    try:
        after = [parse_document(p, root=tmp_path, settings=settings).content_hash for p in paths]
    finally:
        loaders._reader_version.cache_clear()
    assert after[0] != before[0] and after[1] != before[1] and after[2] == before[2]
