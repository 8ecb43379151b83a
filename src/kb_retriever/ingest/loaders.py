"""Read one source file (.md, .markdown, .txt, .pdf, .docx) into a :class:`DocumentDraft`.

Every failure becomes ``IngestError("<relative path>: <reason>")``; nothing here touches a
database. Format libraries (pypdf, python-docx) raise a zoo of exception types on malformed
input, so their errors are translated here, at this one boundary.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import io
import logging
import re
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from types import MappingProxyType
from typing import Any

from kb_retriever.errors import IngestError
from kb_retriever.ingest.budget import Budget
from kb_retriever.ingest.chunking import (
    SECTION_AWARE,
    chunk_markdown,
    chunk_sections,
    extract_wikilinks,
    outside_code,
)
from kb_retriever.ingest.docx_text import docx_markdown
from kb_retriever.ingest.files import Listed, read_file
from kb_retriever.ingest.frontmatter import FrontmatterResult, parse_frontmatter, storable_date
from kb_retriever.ingest.language import with_language
from kb_retriever.models import ChunkDraft, DocumentDraft, EdgeDraft
from kb_retriever.settings import EDGE_TYPE_WEIGHTS, Settings

__all__ = ["MAX_FILE_BYTES", "PARSER_VERSION", "SUPPORTED_SUFFIXES", "build_edges", "chunking_version",
           "parse_document"]

logger = logging.getLogger(__name__)

SUPPORTED_SUFFIXES = (".md", ".markdown", ".txt", ".pdf", ".docx")
# Part of every content hash: bump it when parsing or chunking changes so files re-ingest.
# 2: titles from the first H1; 3: DOCX outline levels and bold headings, PDF hyphenation joined;
# 4: Polish and Czech detected and indexed by their words' prefixes (decision 0022), and the
# character pairs of decision 0019 reach the documents ingested before it; 5: Slovak detected
# and indexed so too, Ukrainian detected (it was read as Russian), slugs in any script; 6: Danish
# and Norwegian detected (they were read as Swedish); 7: Hungarian detected (it was read as
# Portuguese); 8: slugs whose letters carry combining marks (Devanagari, Thai, Tamil); 9:
# Romanian, Indonesian, Lithuanian, Greek, Arabic, Hindi, Nepali, Tamil, Armenian, Serbian
# detected; 10: Catalan detected; 11: Chinese, Japanese or Korean with Latin words: no language
# 12: DOCX text in insertions, content controls, fields and nested tables; names in frontmatter
# as written; 13: a heading longer than its path keeps its words, a key given twice refuses
# the frontmatter, a summary as written, ``[[target\|alias]]``; a PDF's or DOCX's hash names
# the library that read it (a new pypdf reads other text)
PARSER_VERSION = "kb-retriever-ingest/13"
# Larger files are exports or binaries mistaken for documents; they would also hold the
# embedder for minutes.
MAX_FILE_BYTES = 20 * 1024 * 1024

# A word broken across a PDF line: "connec-\ntion", "idle-in-\ntransaction" (soft hyphens too).
_LINE_HYPHEN_RE = re.compile(r"(?<![\w-])(\w[\w-]*)(?:-|\u00ad)[ \t]*\n[ \t]*([a-z\u00e0-\u00ff]\w*)")


def parse_document(path: Path, *, root: Path, settings: Settings,
                   listed: Listed | None = None) -> DocumentDraft:
    """Read ``path`` and return its draft: metadata, chunks and (canonical docs only) edges.

    The document's language is its frontmatter ``language``, else the one its words show
    (:func:`~kb_retriever.ingest.language.detect_language`), else None (the database's
    default full-text configuration). Raises :class:`~kb_retriever.errors.IngestError` naming
    the file relative to ``root``, also when the file is over a budget (``KB_INGEST_MAX_*``,
    ``KB_INGEST_FILE_TIMEOUT_S``: :class:`~kb_retriever.ingest.budget.Budget`) or is no
    longer the file ``listed`` (:func:`~kb_retriever.ingest.files.read_file`).

    Example::

        draft = parse_document(Path("kb/auth.md"), root=Path("kb"), settings=Settings())
        print(draft.source_path, draft.is_canonical, len(draft.chunks))
    """
    return with_language(_parse(path, root=root, settings=settings, listed=listed))


def _parse(path: Path, *, root: Path, settings: Settings, listed: Listed | None) -> DocumentDraft:
    rel = _relative_path(path, root)
    suffix = path.suffix.lower()
    if suffix not in SUPPORTED_SUFFIXES:
        raise IngestError(f"{rel}: unsupported file type {suffix or '(none)'!r}; "
                          f"supported: {', '.join(SUPPORTED_SUFFIXES)}")
    budget = Budget.start(rel, settings)
    raw = read_file(path, rel, MAX_FILE_BYTES, listed)
    version = f"{PARSER_VERSION};{chunking_version(settings)}{_reader_version(suffix)}"
    draft = DocumentDraft(
        source_path=rel, doc_key=path.stem, title=path.stem, source_type="markdown",
        content_hash=hashlib.sha256(version.encode() + b"\n" + raw).hexdigest(), chunks=(),
    )
    cap, overlap = settings.chunk_hard_cap_tokens, settings.chunk_overlap_tokens
    if suffix == ".pdf":
        chunks, doc_date = _pdf_chunks(raw, rel, path.name, cap, budget)
        return replace(draft, source_type="pdf", chunks=chunks, doc_date=doc_date)
    if suffix == ".docx":
        text, doc_date = _docx_markdown(raw, rel, budget)
        chunks = chunk_markdown(text, hard_cap_tokens=cap, overlap_tokens=overlap,
                                filename=path.name, check=budget.chunks)
        return replace(draft, source_type="docx", chunks=chunks, doc_date=doc_date)
    text = _decode(raw, rel)
    budget.text(len(text))
    if suffix == ".txt":
        # Reference: wrapped as `# {basename}`; the basename is the heading of every chunk,
        # even when the text itself has `# ` lines.
        chunks = chunk_sections([(path.name, text)], strategy=SECTION_AWARE, filename=path.name,
                                hard_cap_tokens=cap, overlap_tokens=overlap, check=budget.chunks)
        return replace(draft, source_type="text", chunks=chunks)
    fm = parse_frontmatter(text)
    chunks = chunk_markdown(text, hard_cap_tokens=cap, overlap_tokens=overlap, filename=path.name,
                            check=budget.chunks)
    return _markdown_draft(draft, fm, chunks, canonical_enabled=settings.canonical_enabled)


def chunking_version(settings: Settings) -> str:
    """The settings that change a text's chunks, for the content hash: changing them must
    chunk unchanged files and records again."""
    return (f"cap={settings.chunk_hard_cap_tokens};overlap={settings.chunk_overlap_tokens};"
            f"canonical={settings.canonical_enabled}")


@functools.cache
def _reader_version(suffix: str) -> str:
    """The library that reads a PDF or a DOCX, and its version, for the content hash."""
    reader = {".pdf": "pypdf", ".docx": "python-docx"}.get(suffix)
    return f";{reader}={importlib.metadata.version(reader)}" if reader else ""


def build_edges(fm: FrontmatterResult, wikilinks: Sequence[str] = ()) -> tuple[EdgeDraft, ...]:
    """Graph edges of a canonical document (reference §2.4 plus typed lists); none otherwise.

    Order: related, supersedes, superseded_by, typed lists, body wikilinks; the first edge for
    a ``(to_slug, edge_type)`` pair wins; self-links and empty targets are skipped.
    """
    if not fm.is_canonical or not fm.slug:
        return ()
    sources: list[tuple[Sequence[str], str, str]] = [
        (fm.related, "related_to", "frontmatter_related"),
        (fm.supersedes, "supersedes", "frontmatter_supersedes"),
        (fm.superseded_by, "invalidated_by", "frontmatter_superseded_by"),
        *((slugs, edge_type, "frontmatter_typed") for edge_type, slugs in fm.typed_edges),
        (wikilinks, "related_to", "wikilink"),
    ]
    seen: set[tuple[str, str]] = set()
    edges: list[EdgeDraft] = []
    for slugs, edge_type, provenance in sources:
        for slug in slugs:
            if not slug or slug == fm.slug or (slug, edge_type) in seen:
                continue
            seen.add((slug, edge_type))
            edges.append(EdgeDraft(slug, edge_type, EDGE_TYPE_WEIGHTS[edge_type], provenance))
    return tuple(edges)


_H1 = re.compile(r"^#[ \t]+(.+)$", re.MULTILINE)  # its closing #s stripped in code: linear


def _first_h1(body: str) -> str | None:
    """The first level-1 heading outside fenced code, as a title (the reference used the file
    name, which reads poorly in prompts and citations: ``rej-memcached-2023`` vs its real
    title; a shell block's ``# restart the service`` is no heading)."""
    prose = outside_code(body)
    match = _H1.search(prose)
    return (match.group(1).rstrip(" \t#").strip()[:300] or None) if match else None


def _markdown_draft(draft: DocumentDraft, fm: FrontmatterResult, chunks: tuple[ChunkDraft, ...],
                    *, canonical_enabled: bool) -> DocumentDraft:
    canonical = fm.is_canonical and canonical_enabled
    warnings = fm.warnings
    if fm.is_canonical and not canonical_enabled:
        warnings += ("canonical frontmatter ignored: canonical_enabled is False",)
    if warnings:
        logger.info("%s: %s", draft.source_path, "; ".join(warnings))
    frontmatter: dict[str, Any] = {}
    if fm.data:
        derived = {"related_slugs": list(fm.related), "supersedes_slugs": list(fm.supersedes),
                   "superseded_by_slugs": list(fm.superseded_by), "tags": list(fm.tags),
                   "owners": list(fm.owners), "summary": fm.summary}
        frontmatter = {**fm.data, "_derived": derived}  # reference frontmatter_json shape
    title = fm.title or _first_h1(fm.body) or draft.title
    if canonical and not chunks:  # a record of frontmatter and a title: its words, searchable
        words = "\n\n".join(w for w in (title, fm.summary) if w)
        chunks = chunk_sections([("", words)], strategy=SECTION_AWARE,
                                filename=Path(draft.source_path).name)
    # Descriptive fields apply to every document; the canonical ones only when canonical.
    return replace(
        draft, source_type="markdown", chunks=chunks, title=title,
        tags=fm.tags, owners=fm.owners, summary=fm.summary, language=fm.language,
        doc_date=fm.doc_date, generation_source=fm.generation_source,
        evidence_tier=fm.evidence_tier, frontmatter=MappingProxyType(frontmatter),
        canonical_warnings=warnings, is_canonical=canonical,
        doc_id=fm.doc_id if canonical else None, slug=fm.slug if canonical else None,
        canonical_type=fm.canonical_type if canonical else None,
        canonical_status=fm.canonical_status if canonical else None,
        retrieval_priority=fm.retrieval_priority if canonical else 50,
        edges=build_edges(fm, extract_wikilinks(fm.body)) if canonical else (),
    )


def _relative_path(path: Path, root: Path) -> str:
    for candidate, base in ((path, root), (path.resolve(), root.resolve())):
        try:
            rel = candidate.relative_to(base).as_posix()
        except ValueError:
            continue
        return path.name if rel == "." else rel
    raise IngestError(f"{path.name}: not inside the ingest root")


def _decode(raw: bytes, rel: str) -> str:
    # UTF-16 with its byte order mark (Windows' "Unicode"; its line breaks and spaces hold
    # NUL bytes: "\xff\xfe" before bytes that are no UTF-8 is not reason enough), else UTF-8
    utf16 = raw[:2] in (b"\xff\xfe", b"\xfe\xff") and b"\x00" in raw
    codec = "utf-16" if utf16 else "utf-8-sig"
    if codec != "utf-16" and b"\x00" in raw:
        raise IngestError(f"{rel}: looks like a binary file (contains NUL bytes)")
    try:
        text = raw.decode(codec)  # utf-8-sig also accepts plain UTF-8; a BOM is dropped
    except UnicodeDecodeError as exc:
        raise IngestError(
            f"{rel}: not valid {'UTF-16' if codec == 'utf-16' else 'UTF-8'} text (byte "
            f"0x{raw[exc.start]:02x} at offset "
            f"{exc.start}); re-save it as UTF-8"
        ) from None
    if "\x00" in text:  # (a UTF-16 file's NUL characters: PostgreSQL stores none)
        raise IngestError(f"{rel}: looks like a binary file (contains NUL characters)")
    # Windows (\r\n) and old Mac (\r) line ends as \n, before the frontmatter and the title
    # are read (an \r-only file was one line: its title held the whole text).
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _pdf_chunks(raw: bytes, rel: str, filename: str, hard_cap: int,
                budget: Budget) -> tuple[tuple[ChunkDraft, ...], datetime | None]:
    """One chunk per page with text (heading ``Page N``); oversize pages split, no overlap.

    The declared page count is checked before the first page, each page's unpacked content
    before its text is extracted, the deadline at each operator, the characters after it."""
    from pypdf import PdfReader  # the format libraries load only when such a file shows up

    try:
        reader = PdfReader(io.BytesIO(raw))
        if reader.is_encrypted and not reader.decrypt(""):
            raise IngestError(f"{rel}: the PDF is encrypted")
        trailer: Any = reader.trailer
        declared = _safe(lambda: int(trailer["/Root"]["/Pages"]["/Count"]))
        if isinstance(declared, int):
            budget.pages(declared)
        pages = []
        for n, page in enumerate(reader.pages, start=1):
            budget.pages(n)
            budget.unpack(_safe(lambda p=page: len(p.get_contents().get_data())) or 0, "page contents")
            text = page.extract_text(visitor_operand_before=budget.ticker(f"page {n}"))
            pages.append((n, text or ""))
            budget.text(len(pages[-1][1]))
    except IngestError:
        raise
    except Exception as exc:  # pypdf has no single error base for bad input
        raise IngestError(f"{rel}: not a readable PDF ({_describe(exc)})") from exc
    sections = [(f"Page {n}", join_hyphenation(text.replace("\x00", "")))
                for n, text in pages if text.strip()]
    chunks = chunk_sections(sections, strategy="pdf_page", filename=filename,
                            hard_cap_tokens=hard_cap, overlap_tokens=0, check=budget.chunks)
    return chunks, _aware(_safe(lambda: reader.metadata and reader.metadata.modification_date))


def _docx_markdown(raw: bytes, rel: str, budget: Budget) -> tuple[str, datetime | None]:
    """The document as markdown (``docx_text.docx_markdown``) and its modification date."""
    try:
        text, modified = docx_markdown(raw, budget)
    except IngestError:
        raise
    except Exception as exc:  # python-docx, lxml and zipfile share no base
        raise IngestError(f"{rel}: not a readable DOCX ({_describe(exc)})") from exc
    return text, _aware(modified)


def join_hyphenation(text: str) -> str:
    """Join words that a PDF broke across lines at a hyphen.

    The hyphen stays when the word is a compound (its first part already holds a hyphen, or the
    text spells it hyphenated elsewhere) and goes otherwise, unless the text spells the joined
    word nowhere and the hyphenated one somewhere.

    >>> join_hyphenation("sessions idle-in-\\ntransaction for hours; the connec-\\ntion pool")
    'sessions idle-in-transaction for hours; the connection pool'
    >>> join_hyphenation("a well-known fix; well-\\nknown")
    'a well-known fix; well-known'
    """
    lowered = text.lower()

    def join(m: re.Match[str]) -> str:
        left, right = m.group(1), m.group(2)
        hyphenated, solid = f"{left}-{right}", f"{left}{right}"
        if "-" in left or hyphenated.lower() in lowered:
            return hyphenated
        return solid

    return _LINE_HYPHEN_RE.sub(join, text)


def _safe(get: Any) -> Any:
    try:
        return get()
    except Exception:  # a malformed date field must not fail the document
        return None


def _aware(value: Any) -> datetime | None:
    if not isinstance(value, datetime):
        return None
    return storable_date(value)


def _describe(exc: Exception) -> str:
    message = " ".join(str(exc).split())[:200]
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__
