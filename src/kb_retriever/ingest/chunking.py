"""Heading-aware markdown chunker (reference §2.2).

One deliberate change from the reference (§24.17): a paragraph larger than the hard cap is split
at sentence boundaries, then line breaks, then whitespace, then by characters, so no chunk
exceeds the cap (plus the overlap prefix). A fenced code block counts as one paragraph and is
split at line breaks first.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from types import MappingProxyType

from kb_retriever.ingest.frontmatter import as_slug, link_target, without_block
from kb_retriever.models import ChunkDraft
from kb_retriever.ranking.text import MAX_HEADING_CHARS, clip_words

__all__ = [
    "PARAGRAPH_SPLIT",
    "SECTION_AWARE",
    "chunk_markdown",
    "chunk_sections",
    "estimate_tokens",
    "extract_wikilinks",
    "split_sections",
]

SECTION_AWARE = "section_aware"
PARAGRAPH_SPLIT = "paragraph_split"
BYTES_PER_TOKEN = 4  # the reference estimate: ceil(utf-8 bytes / 4)
_JOINER = "\n\n"

_HEADING_RE = re.compile(r"^(#{1,6})\s+(.*)$")  # the title stripped in code: linear
_FENCE_RE = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")
_WIKILINK_RE = re.compile(r"\[\[([^\[\]]+)\]\]")
_INLINE_CODE_RE = re.compile(r"`[^`]*`")
_SENTENCE_RE = re.compile(r"(?<=[.!?])\s+")
_LINE_RE = re.compile(r"\n+")
_SPACE_RE = re.compile(r"\s+")
# Split levels for an oversize paragraph, coarsest first. Code has no sentences.
_PROSE_LEVELS = (_SENTENCE_RE, _LINE_RE, _SPACE_RE)
_CODE_LEVELS = (_LINE_RE, _SPACE_RE)


def estimate_tokens(text: str) -> int:
    """The reference token estimate: ``ceil(len(utf-8 bytes) / 4)``."""
    return -(-_nbytes(text) // BYTES_PER_TOKEN)


def chunk_markdown(
    body: str, *, hard_cap_tokens: int = 1024, overlap_tokens: int = 64, filename: str = "",
    check: Callable[[int], None] | None = None,
) -> tuple[ChunkDraft, ...]:
    """Split markdown into chunks along its headings (a leading frontmatter block is ignored).

    ``check`` is called with the number of chunks made so far after each section, so that a
    caller can stop a file that makes too many (it raises) before they all exist.

    Example::

        chunks = chunk_markdown("# Auth\\n\\nUse OAuth.\\n\\n## Tokens\\n\\nRotate daily.")
        assert [c.heading_path for c in chunks] == ["Auth", "Auth > Tokens"]
    """
    body = _normalize_newlines(without_block(body))
    if not body.strip():
        return ()
    strategy, sections = _sections(body)
    return chunk_sections(
        sections, strategy=strategy, filename=filename,
        hard_cap_tokens=hard_cap_tokens, overlap_tokens=overlap_tokens, check=check,
    )


def split_sections(body: str) -> tuple[str, list[tuple[str, str]]]:
    """Return ``(strategy, [(heading_path, text), ...])`` for a markdown body without frontmatter.

    ``section_aware`` when a heading exists outside fenced code, else ``paragraph_split`` with
    one section per paragraph and an empty heading path.
    """
    strategy, sections = _sections(body)
    return strategy, list(sections)


def _sections(body: str) -> tuple[str, Iterator[tuple[str, str]]]:
    """:func:`split_sections` with the sections made as they are read (a file of a million
    headings is stopped by its chunks' count before it has them all)."""
    lines = _normalize_newlines(body).split("\n")
    code = _code_mask(lines)
    if not any(not c and _HEADING_RE.match(line) for line, c in zip(lines, code, strict=True)):
        return PARAGRAPH_SPLIT, (("", p) for p in _paragraphs(lines, code))
    return SECTION_AWARE, _headed(lines, code)


def _headed(lines: list[str], code: list[bool]) -> Iterator[tuple[str, str]]:
    stack = [""] * 6
    path = ""
    buffer: list[str] = []
    for line, is_code in zip(lines, code, strict=True):
        match = None if is_code else _HEADING_RE.match(line)
        if match is None:
            buffer.append(line)
            continue
        yield from _flushed(path, buffer)  # heading-only sections vanish here (blank buffer)
        level = len(match.group(1))
        title = _title(match.group(2))
        stack[level - 1] = clip_words(title, MAX_HEADING_CHARS)
        stack[level:] = [""] * (6 - level)
        path = " > ".join(h for h in stack if h)
        # A title longer than the path may hold opens its section's text whole: its words past
        # the cut were in no chunk.
        buffer = [title] if stack[level - 1] != title else []
    yield from _flushed(path, buffer)


def chunk_sections(
    sections: Iterable[tuple[str, str]], *, strategy: str, filename: str = "",
    hard_cap_tokens: int = 1024, overlap_tokens: int = 64,
    check: Callable[[int], None] | None = None,
) -> tuple[ChunkDraft, ...]:
    """Turn ``(heading_path, text)`` sections into chunks with a running ``order``.

    Sections over ``hard_cap_tokens`` are packed paragraph by paragraph; each piece after the
    first is prefixed with the trailing whole paragraphs of the previous piece, within
    ``overlap_tokens`` (joiner included), so no chunk exceeds ``hard_cap + overlap`` tokens.
    ``check`` is called with the chunks' count after each section (:func:`chunk_markdown`).
    """
    if hard_cap_tokens < 1:
        raise ValueError(f"hard_cap_tokens must be >= 1, got {hard_cap_tokens}")
    if overlap_tokens < 0:
        raise ValueError(f"overlap_tokens must be >= 0, got {overlap_tokens}")
    chunks: list[ChunkDraft] = []
    for heading_path, text in sections:
        for piece in _split_section(_normalize_newlines(text), hard_cap_tokens, overlap_tokens):
            piece = piece.strip()
            if not piece:
                continue
            order = len(chunks)
            metadata = {"filename": filename, "strategy": strategy, "order": order,
                        "wikilinks": extract_wikilinks(piece)}
            chunks.append(ChunkDraft(order, piece, heading_path, MappingProxyType(metadata)))
        if check is not None:
            check(len(chunks))
    return tuple(chunks)


def outside_code(text: str) -> str:
    """``text`` with the lines of fenced code blank (a ``#`` there is a comment, not a
    heading).

    >>> outside_code("```sh\\n# a comment\\n```\\n# Title")
    '\\n\\n\\n# Title'
    """
    lines = _normalize_newlines(text).split("\n")
    return "\n".join("" if c else ln for ln, c in zip(lines, _code_mask(lines), strict=True))


def extract_wikilinks(text: str) -> tuple[str, ...]:
    """Valid ``[[slug]]`` targets outside fenced code and inline code, deduplicated, in order."""
    lines = _normalize_newlines(text).split("\n")
    prose = "\n".join(ln for ln, c in zip(lines, _code_mask(lines), strict=True) if not c)
    found: dict[str, None] = {}  # insertion-ordered set
    for match in _WIKILINK_RE.finditer(_INLINE_CODE_RE.sub("", prose)):
        if (target := as_slug(link_target(match.group(1)))) is not None:
            found.setdefault(target)
    return tuple(found)


# --------------------------------------------------------------------------------------------


def _nbytes(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def _normalize_newlines(text: str) -> str:
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _code_mask(lines: list[str]) -> list[bool]:
    """True for fence lines and the lines between them (CommonMark fence matching)."""
    mask: list[bool] = []
    fence: tuple[str, int] | None = None  # (fence char, length) of the open fence
    for line in lines:
        match = _FENCE_RE.match(line)
        if fence is None:
            # A backtick fence's info string cannot contain backticks (```a``` is inline code).
            opens = match is not None and not (
                match.group(1)[0] == "`" and "`" in match.group(2)
            )
            if match is not None and opens:
                fence = (match.group(1)[0], len(match.group(1)))
            mask.append(opens)
            continue
        if (match is not None and match.group(1)[0] == fence[0]
                and len(match.group(1)) >= fence[1] and not match.group(2).strip()):
            fence = None
        mask.append(True)
    return mask


def _title(text: str) -> str:
    """A heading's title: without the closing ``#`` sequence markdown allows (``# Setup ##``).

    >>> _title(" Setup ## "), _title("C#"), _title("###")
    ('Setup', 'C#', '')
    """
    words = text.strip()
    bare = words.rstrip("#")
    return words if bare and not bare[-1].isspace() else bare.strip()


def _flushed(path: str, buffer: list[str]) -> Iterator[tuple[str, str]]:
    text = "\n".join(buffer).strip()
    if text:
        yield path, text


def _paragraphs(lines: list[str], code: list[bool]) -> list[str]:
    """Blank-line separated blocks; blank lines inside fenced code do not separate."""
    paragraphs: list[str] = []
    current: list[str] = []
    for line, is_code in zip(lines, code, strict=True):
        if is_code or line.strip():
            current.append(line)
        elif current:
            paragraphs.append("\n".join(current).rstrip())
            current = []
    if current:
        paragraphs.append("\n".join(current).rstrip())
    return paragraphs


def _split_section(text: str, hard_cap: int, overlap: int) -> list[str]:
    limit = hard_cap * BYTES_PER_TOKEN
    if _nbytes(text) <= limit:
        return [text]
    lines = text.split("\n")
    pieces: list[list[str]] = []
    current: list[str] = []
    size = 0  # bytes of _JOINER.join(current)
    for para in _paragraphs(lines, _code_mask(lines)):
        n = _nbytes(para)
        if current and (n > limit or size + len(_JOINER) + n > limit):
            pieces.append(current)
            current, size = [], 0
        if n > limit:
            pieces.extend([part] for part in _split_oversize(para, limit))
            continue
        size = n if not current else size + len(_JOINER) + n
        current.append(para)
    if current:
        pieces.append(current)
    out = []
    for i, piece in enumerate(pieces):
        prefix = _overlap_tail(pieces[i - 1], overlap * BYTES_PER_TOKEN) if i else []
        out.append(_JOINER.join(prefix + piece))
    return out


def _overlap_tail(previous: list[str], budget: int) -> list[str]:
    """Trailing whole paragraphs of ``previous`` whose bytes, plus the joiner, fit ``budget``."""
    tail: list[str] = []
    used = len(_JOINER)  # the joiner between the prefix and the piece
    for para in reversed(previous):
        cost = _nbytes(para) + (len(_JOINER) if tail else 0)
        if used + cost > budget:
            break
        tail.insert(0, para)
        used += cost
    return tail


def _split_oversize(paragraph: str, limit: int) -> list[str]:
    levels = _CODE_LEVELS if _FENCE_RE.match(paragraph) else _PROSE_LEVELS
    return [p for p in _split_at(paragraph.strip(), limit, levels) if p]


def _split_at(text: str, limit: int, levels: tuple[re.Pattern[str], ...]) -> list[str]:
    """Greedy packing of ``text``'s segments at the first level that splits it at all."""
    if _nbytes(text) <= limit:
        return [text]
    if not levels:
        return _hard_split(text, limit)
    segments = _segments(text, levels[0])
    if len(segments) == 1:
        return _split_at(text, limit, levels[1:])
    out: list[str] = []
    current: list[str] = []
    size = 0  # counts trailing separators too, so the stripped piece is never larger
    for segment in segments:
        n = _nbytes(segment)
        if size + n <= limit:
            current.append(segment)
            size += n
            continue
        if current:
            out.append("".join(current).strip())
            current, size = [], 0
        if n <= limit:
            current, size = [segment], n
        else:
            out.extend(_split_at(segment.strip(), limit, levels[1:]))
    if current:
        out.append("".join(current).strip())
    return out


def _segments(text: str, separator: re.Pattern[str]) -> list[str]:
    """Pieces of ``text`` that concatenate back to it, each ending with its separator."""
    parts: list[str] = []
    start = 0
    for match in separator.finditer(text):
        parts.append(text[start:match.end()])
        start = match.end()
    if start < len(text):
        parts.append(text[start:])
    return parts


def _hard_split(text: str, limit: int) -> list[str]:
    """Last resort: cut every ``limit`` bytes, never inside a UTF-8 sequence (limit >= 4)."""
    data = text.encode("utf-8", "surrogatepass")
    out: list[str] = []
    start = 0
    while start < len(data):
        end = min(start + limit, len(data))
        while end < len(data) and data[end] & 0xC0 == 0x80:  # continuation byte
            end -= 1
        out.append(data[start:end].decode("utf-8", "surrogatepass").strip())
        start = end
    return out
