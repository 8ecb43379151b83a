"""A DOCX file's text as markdown: paragraphs, headings (``#``) and tables, in body order.

The text is read from the document's XML, not from python-docx's ``Paragraph.text``, which
reads a paragraph's own runs and links only: a tracked insertion (``w:ins``), a content
control (``w:sdt``, inline or around whole paragraphs and tables), a field's shown result
(``w:fldSimple``) and a table inside a table cell were dropped without a word. A tracked
deletion and the source side of a tracked move are not text the document shows, and are left
out, as are a field's instructions.
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterator
from typing import Any, NamedTuple

from kb_retriever.ingest.archive import check_archive
from kb_retriever.ingest.budget import Budget

__all__ = ["docx_markdown"]

_HEADING_STYLE_RE = re.compile(r"^heading ([1-6])$", re.IGNORECASE)
# A short paragraph that is bold all through reads as a heading (documents style headings as
# "Normal" + bold as often as with "Heading N"): at most this long, and not a sentence.
_BOLD_HEADING_MAX_CHARS = 80
_BOLD_HEADING_MAX_WORDS = 10
_SENTENCE_END = (".", ";", ",", ":", "!", "?")
# The level such a paragraph gets: below a title, above the sections a real heading opens.
_BOLD_HEADING_LEVEL = 2
# Text that markdown would read as structure (a heading, a fence, a rule) is escaped.
_MARKDOWN_SYNTAX_RE = re.compile(r"^(?=#{1,6}\s| {0,3}(?:```|~~~)|---[ \t]*$)", re.MULTILINE)


def _w(name: str) -> str:
    """The qualified name of a WordprocessingML element or attribute (as python-docx's
    ``qn("w:" + name)``, without importing it)."""
    return "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}" + name


class _StyleInfo(NamedTuple):
    """What a paragraph style says about headings, read once per style of a document: looking
    a style up costs more than the rest of a paragraph (100k paragraphs took minutes)."""

    name_level: int | None  # a ``Heading N`` style, or one based on it
    outline_level: int | None  # the style's own ``w:outlineLvl``
    bold: bool  # the style's font is bold


class _Block(NamedTuple):
    text: str
    level: int | None  # a heading's level, else None
    guessed: bool  # a heading read from bold type alone


def docx_markdown(raw: bytes, budget: Budget) -> tuple[str, Any]:
    """The document's text as markdown, and its ``modified`` core property (raw). The
    archive is checked before python-docx reads it (``archive.check_archive``); paragraphs,
    rows and characters are counted as they are extracted. Raises what the libraries raise."""
    import docx  # the format libraries load only when such a file shows up

    check_archive(raw, budget)
    document = docx.Document(io.BytesIO(raw))
    styles: dict[str | None, _StyleInfo] = {}
    blocks: list[_Block] = []
    for element in _blocks(document.element.body):
        budget.paragraph()
        if element.tag == _w("tbl"):
            blocks.append(_Block(_table_markdown(element, budget), None, False))
        else:
            blocks.append(_paragraph_block(element, document, styles))
        budget.text(len(blocks[-1].text))
    shown = [b for b in blocks if b.text]
    lines = []
    for i, block in enumerate(shown):
        after = shown[i + 1] if i + 1 < len(shown) else None
        # a bold line that heads nothing (a heading or the end follows) is a line of text
        heads = block.level is not None and not (block.guessed and (after is None or after.level))
        lines.append("#" * (block.level or 0) + " " + " ".join(block.text.split()) if heads
                     else _MARKDOWN_SYNTAX_RE.sub("\\\\", block.text))
    return "\n\n".join(lines).replace("\x00", ""), _modified(document)


def _blocks(container: Any) -> Iterator[Any]:
    """The paragraphs and tables of ``container`` (the body, a cell), in order, including
    those inside block content controls."""
    for child in container.iterchildren():
        if child.tag in (_w("p"), _w("tbl")):
            yield child
        elif child.tag == _w("sdt"):
            content = child.find(_w("sdtContent"))
            if content is not None:
                yield from _blocks(content)


# What a paragraph's elements show: a ``w:t`` its text (None here), the others white space.
_SHOWN = {_w("t"): None, _w("tab"): "\t", _w("br"): "\n", _w("cr"): "\n"}
_MOVED_FROM = _w("moveFrom")


def _text(paragraph: Any) -> str:
    """The text a paragraph shows: its ``w:t`` (tabs and breaks as white space), wherever it
    sits (runs, links, insertions, content controls, field results), save a move's source."""
    out = []
    for node in paragraph.iter(*_SHOWN):
        if any(a.tag == _MOVED_FROM for a in node.iterancestors()):
            continue
        out.append(_SHOWN[node.tag] or node.text or "")
    return "".join(out)


def _paragraph_block(element: Any, document: Any, styles: dict[str | None, _StyleInfo]
                     ) -> _Block:
    from docx.text.paragraph import Paragraph

    text = _text(element).strip()
    if not text:
        return _Block("", None, False)
    level, guessed = _heading_level(Paragraph(element, document), text, styles)
    return _Block(text, level, guessed)


def _heading_level(paragraph: Any, text: str, styles: dict[str | None, _StyleInfo]
                   ) -> tuple[int | None, bool]:
    """A paragraph's heading level: its style (``Heading N``, or a style based on one), its
    outline level (``w:outlineLvl`` on the paragraph or its style), or a short paragraph that
    is bold all through (:data:`_BOLD_HEADING_LEVEL`, guessed); None for body text."""
    key = paragraph._p.style  # the style id (None: the default style), no lookup
    info = styles.get(key)
    if info is None:
        info = styles[key] = _style_info(paragraph.style)
    if info.name_level:
        return info.name_level, False
    own = _outline_level(paragraph._p)
    if own or info.outline_level:
        return own or info.outline_level, False
    if (len(text) <= _BOLD_HEADING_MAX_CHARS and not text.endswith(_SENTENCE_END)
            and len(text.split()) <= _BOLD_HEADING_MAX_WORDS and _all_bold(paragraph, info.bold)):
        return _BOLD_HEADING_LEVEL, True
    return None, False


def _style_info(style: Any) -> _StyleInfo:
    first, seen = style, 0
    while style is not None and seen < 10:  # a style chain, guarded against cycles
        match = _HEADING_STYLE_RE.match(style.name or "")
        if match:
            return _StyleInfo(int(match.group(1)), None, False)
        style, seen = style.base_style, seen + 1
    element = getattr(first, "element", None)
    bold = bool(first is not None and first.font.bold)
    return _StyleInfo(None, _outline_level(element) if element is not None else None, bold)


def _outline_level(element: Any) -> int | None:
    ppr = element.pPr
    outline = ppr.find(_w("outlineLvl")) if ppr is not None else None
    if outline is None:
        return None
    try:
        value = int(outline.get(_w("val")))
    except (TypeError, ValueError):
        return None
    return value + 1 if 0 <= value <= 5 else None  # 9 is "body text"; markdown has 6 levels


def _all_bold(paragraph: Any, style_bold: bool) -> bool:
    runs = [r for r in paragraph.runs if r.text.strip()]
    if not runs:
        return False
    return all(r.bold or (r.bold is None and style_bold) for r in runs)


def _table_markdown(table: Any, budget: Budget) -> str:
    """One line per row, its cells' text (a cell spanning several columns once; a table in a
    cell as its text)."""
    rows = []
    for row in table.iterchildren(_w("tr")):
        budget.paragraph()
        cells = [" ".join(_cell_text(cell, budget).split())
                 for cell in row.iterchildren(_w("tc"))]
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)


def _cell_text(cell: Any, budget: Budget) -> str:
    return " ".join(_table_markdown(block, budget) if block.tag == _w("tbl") else _text(block)
                    for block in _blocks(cell))


def _modified(document: Any) -> Any:
    try:
        return document.core_properties.modified
    except Exception:  # a malformed date field must not fail the document
        return None
