"""Heading-aware markdown chunking (reference §2.2) and the oversize-paragraph fix (§24.17)."""

from __future__ import annotations

import math
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kb_retriever.ingest import chunk_markdown
from kb_retriever.ingest.chunking import (
    PARAGRAPH_SPLIT,
    SECTION_AWARE,
    chunk_sections,
    estimate_tokens,
    extract_wikilinks,
)
from kb_retriever.models import ChunkDraft


def paths(chunks: tuple[ChunkDraft, ...]) -> list[str]:
    return [c.heading_path for c in chunks]


def texts(chunks: tuple[ChunkDraft, ...]) -> list[str]:
    return [c.text for c in chunks]


def para(n_bytes: int, word: str = "word") -> str:
    """A paragraph of ``word``s, about ``n_bytes`` long, without sentence punctuation."""
    return " ".join([word] * max(1, n_bytes // (len(word) + 1)))


def block(tag: str, n_bytes: int) -> str:
    """A paragraph of exactly ``n_bytes`` ASCII bytes starting with ``tag``."""
    return f"{tag} " + "w" * (n_bytes - len(tag) - 1)


# --- token estimate -------------------------------------------------------------------------


@pytest.mark.parametrize("text,tokens", [("", 0), ("a", 1), ("abcd", 1), ("abcde", 2),
                                         ("é", 1), ("日本語", 3), ("😀😀", 2)])
def test_estimate_tokens_is_ceil_of_utf8_bytes_over_four(text: str, tokens: int) -> None:
    assert estimate_tokens(text) == tokens == math.ceil(len(text.encode()) / 4)


# --- modes and headings ---------------------------------------------------------------------


@pytest.mark.parametrize("body", ["", "   \n\n  \t\n", "---\nslug: a\n---\n\n"])
def test_empty_body_has_no_chunks(body: str) -> None:
    assert chunk_markdown(body) == ()


def test_section_aware_breadcrumbs_and_heading_lines_excluded() -> None:
    body = (
        "Preamble text.\n\n"
        "# Guide\nIntro.\n"
        "## Install\nRun it.\n"
        "### Linux\nUse apt.\n"
        "#### Debian\nUse apt-get.\n"
        "##### Old\nSqueeze.\n"
        "###### Ancient\nPotato.\n"
        "## Configure\nEdit the file.\n"
        "# Appendix\nMore.\n"
    )
    chunks = chunk_markdown(body, filename="guide.md")
    assert paths(chunks) == [
        "", "Guide", "Guide > Install", "Guide > Install > Linux",
        "Guide > Install > Linux > Debian", "Guide > Install > Linux > Debian > Old",
        "Guide > Install > Linux > Debian > Old > Ancient",
        "Guide > Configure",  # a level-2 heading clears levels 3..6
        "Appendix",
    ]
    assert texts(chunks)[:3] == ["Preamble text.", "Intro.", "Run it."]
    assert all(not c.text.startswith("#") for c in chunks)
    assert {c.metadata["strategy"] for c in chunks} == {SECTION_AWARE}
    assert [c.order for c in chunks] == list(range(len(chunks)))
    assert [c.metadata["order"] for c in chunks] == list(range(len(chunks)))
    assert {c.metadata["filename"] for c in chunks} == {"guide.md"}


def test_heading_only_sections_vanish_but_stay_in_breadcrumbs() -> None:
    chunks = chunk_markdown("# A\n\n## B\n\n\n### C\ntext under C\n## D\n   \n")
    assert paths(chunks) == ["A > B > C"]
    assert texts(chunks) == ["text under C"]


def test_skipped_levels_and_empty_heading_text() -> None:
    chunks = chunk_markdown("# Top\n### Deep\nx\n## \ny\n")
    assert paths(chunks) == ["Top > Deep", "Top"]


@pytest.mark.parametrize("line", ["#hashtag", "####### seven", " # indented", "#"])
def test_not_headings(line: str) -> None:
    chunks = chunk_markdown(f"{line}\n\nbody")
    assert chunks[0].metadata["strategy"] == PARAGRAPH_SPLIT
    assert chunks[0].text == line.strip()


def test_paragraph_split_mode_one_chunk_per_paragraph() -> None:
    chunks = chunk_markdown("First para\nstill first.\n\n\n\nSecond para.\n \nThird.")
    assert texts(chunks) == ["First para\nstill first.", "Second para.", "Third."]
    assert paths(chunks) == ["", "", ""]
    assert {c.metadata["strategy"] for c in chunks} == {PARAGRAPH_SPLIT}


@pytest.mark.parametrize("fence", ["```", "~~~", "````", "```bash", "   ```"])
def test_hash_lines_inside_fenced_code_are_not_headings(fence: str) -> None:
    close = fence.strip().split("bash")[0]
    body = f"Run this:\n\n{fence}\n# install deps\n\n## also not a heading\n{close}\n\nDone."
    chunks = chunk_markdown(body)
    assert {c.metadata["strategy"] for c in chunks} == {PARAGRAPH_SPLIT}
    # The fenced block, blank line included, is one paragraph.
    assert texts(chunks) == ["Run this:", f"{fence.strip()}\n# install deps\n\n## also not a "
                             f"heading\n{close}", "Done."]


def test_fenced_code_inside_a_section() -> None:
    body = "# Setup\n```sh\n# comment\n```\n## Next\ntext"
    chunks = chunk_markdown(body)
    assert paths(chunks) == ["Setup", "Setup > Next"]
    assert chunks[0].text == "```sh\n# comment\n```"


def test_mismatched_fence_does_not_close() -> None:
    # A ~~~ line does not close a ``` fence, so the heading below is still code.
    chunks = chunk_markdown("```\n~~~\n# not heading\n```\n# Real\nx")
    assert paths(chunks) == ["", "Real"]


def test_unclosed_fence_runs_to_the_end() -> None:
    chunks = chunk_markdown("# A\ntext\n```\n# B\n")
    assert paths(chunks) == ["A"]
    assert chunks[0].text == "text\n```\n# B"


def test_frontmatter_is_stripped() -> None:
    chunks = chunk_markdown("---\nslug: a\ntitle: T\n---\n# H\nBody")
    assert texts(chunks) == ["Body"]


def test_crlf_line_endings() -> None:
    chunks = chunk_markdown("---\r\nslug: a\r\n---\r\n# H\r\nline one\r\n\r\nline two\r\n")
    assert paths(chunks) == ["H"]
    assert chunks[0].text == "line one\n\nline two"


# --- hard cap, packing, overlap -------------------------------------------------------------


def test_section_under_the_cap_is_one_chunk() -> None:
    body = "# H\n\n" + "\n\n".join(para(40) for _ in range(3))
    chunks = chunk_markdown(body, hard_cap_tokens=64, overlap_tokens=0)
    assert len(chunks) == 1


def test_oversize_section_is_packed_greedily_by_paragraph() -> None:
    paragraphs = [f"p{i} " + para(100) for i in range(6)]  # ~26 tokens each
    chunks = chunk_markdown("# H\n\n" + "\n\n".join(paragraphs), hard_cap_tokens=64,
                            overlap_tokens=0)
    assert texts(chunks) == ["\n\n".join(paragraphs[i:i + 2]) for i in (0, 2, 4)]
    assert paths(chunks) == ["H"] * 3
    assert all(estimate_tokens(c.text) <= 64 for c in chunks)


def test_overlap_prepends_trailing_whole_paragraphs_of_the_previous_piece() -> None:
    small = [block("s1", 20), block("s2", 20)]
    big = [block(f"b{i}", 120) for i in range(4)]
    body = "# H\n\n" + "\n\n".join([big[0], *small, big[1], big[2], big[3]])
    # cap 64 tokens = 256 bytes: [b0 s1 s2] = 164 bytes, [b1 b2] = 242 bytes, [b3].
    chunks = chunk_markdown(body, hard_cap_tokens=64, overlap_tokens=16)
    # Piece 2 gets both small paragraphs (2 + 20 + 2 + 20 = 44 bytes <= 64, joiner included);
    # piece 3 gets nothing because b2 alone (2 + 120 bytes) exceeds the budget.
    assert texts(chunks) == [
        "\n\n".join([big[0], *small]),
        "\n\n".join([*small, big[1], big[2]]),
        big[3],
    ]
    assert all(estimate_tokens(c.text) <= 64 + 16 for c in chunks)


def test_overlap_stops_at_the_first_paragraph_that_does_not_fit() -> None:
    paragraphs = [block("a", 120), block("b", 44), block("c", 20), block("d", 120)]
    # The trailing heading-only section makes this section_aware (one section, packed).
    chunks = chunk_markdown("\n\n".join(paragraphs) + "\n# H\n", hard_cap_tokens=50,
                            overlap_tokens=16)
    # cap 200 bytes: [a b c] = 188, [d]; budget 64 bytes: c (2 + 20) fits, b (46 more) does not.
    assert texts(chunks) == ["\n\n".join(paragraphs[:3]), "\n\n".join(paragraphs[2:])]


def test_no_overlap_when_zero() -> None:
    paragraphs = [f"p{i} " + para(100) for i in range(4)]
    chunks = chunk_markdown("\n\n".join(paragraphs), hard_cap_tokens=64, overlap_tokens=0)
    assert "\n\n".join(texts(chunks)) == "\n\n".join(paragraphs)


def test_overlap_only_within_a_section() -> None:
    body = "# A\n\n" + "\n\n".join(["a1 " + para(100), "tail"]) + "\n# B\nshort"
    chunks = chunk_markdown(body, hard_cap_tokens=30, overlap_tokens=30)
    assert chunks[-1].text == "short"


def test_oversize_paragraph_is_split_at_sentences() -> None:
    sentences = [f"Sentence number {i} says something useful." for i in range(40)]
    paragraph = " ".join(sentences)
    chunks = chunk_markdown("# H\n\n" + paragraph, hard_cap_tokens=32, overlap_tokens=0)
    assert len(chunks) > 1
    assert all(estimate_tokens(c.text) <= 32 for c in chunks)
    assert all(c.text.endswith(".") for c in chunks)  # cut at sentence boundaries only
    assert " ".join(texts(chunks)) == paragraph
    assert paths(chunks) == ["H"] * len(chunks)


def test_oversize_paragraph_without_punctuation_is_split_at_whitespace() -> None:
    paragraph = para(2000, "alpha")
    chunks = chunk_markdown(paragraph, hard_cap_tokens=20, overlap_tokens=8)
    assert all(estimate_tokens(c.text) <= 20 + 8 for c in chunks)
    assert all(set(c.text.split()) == {"alpha"} for c in chunks)


def test_oversize_word_is_hard_split_without_breaking_characters() -> None:
    word = "日本語テキスト" * 400  # no whitespace at all, 3-byte characters
    chunks = chunk_markdown(word, hard_cap_tokens=16, overlap_tokens=0)
    assert all(estimate_tokens(c.text) <= 16 for c in chunks)
    assert "".join(texts(chunks)) == word


def test_oversize_fenced_block_is_split_at_lines() -> None:
    code = "```python\n" + "\n".join(f"value_{i} = compute({i}) + other_{i}" for i in range(80))
    code += "\n```"
    chunks = chunk_markdown("# Code\n\n" + code, hard_cap_tokens=64, overlap_tokens=0)
    assert len(chunks) > 1
    assert all(estimate_tokens(c.text) <= 64 for c in chunks)
    assert "\n".join(texts(chunks)) == code  # every cut is at a line break


def test_fenced_block_with_blank_lines_is_one_paragraph_when_packing() -> None:
    code = "```\nline one\n\n\nline two\n```"
    body = "# H\n\n" + para(200) + "\n\n" + code + "\n\n" + para(200)
    chunks = chunk_markdown(body, hard_cap_tokens=60, overlap_tokens=0)
    assert any(code in c.text for c in chunks)


def test_invalid_caps_are_rejected() -> None:
    with pytest.raises(ValueError, match="hard_cap_tokens"):
        chunk_markdown("x", hard_cap_tokens=0)
    with pytest.raises(ValueError, match="overlap_tokens"):
        chunk_markdown("x", overlap_tokens=-1)


def test_chunk_sections_running_order_and_custom_strategy() -> None:
    chunks = chunk_sections([("Page 1", "one"), ("Page 2", "  "), ("Page 3", "three")],
                            strategy="pdf_page", filename="f.pdf")
    assert [(c.order, c.heading_path, c.text) for c in chunks] == [
        (0, "Page 1", "one"), (1, "Page 3", "three")]
    assert chunks[1].metadata["strategy"] == "pdf_page"


# --- wikilinks ------------------------------------------------------------------------------


def test_wikilinks_in_code_are_ignored_and_invalid_slugs_dropped() -> None:
    body = (
        "# H\nSee [[auth-flow]], [[ token-store ]] and [[auth-flow]] again.\n"
        "Inline `[[in-code]]` is ignored, so are [[Bad Slug]], [[]] and [[-x]].\n"
        "```\n[[in-fence]]\n```\n"
        "~~~\n[[in-tilde-fence]]\n~~~\n"
        "Nested [[[inner]]] works."
    )
    chunks = chunk_markdown(body)
    assert chunks[0].metadata["wikilinks"] == ("auth-flow", "token-store", "inner")
    assert extract_wikilinks(body) == ("auth-flow", "token-store", "inner")


def test_a_wikilink_to_a_slug_in_another_script_is_kept() -> None:
    body = "Див. [[рішення-склад-v2]], [[rozhodnuti\u0301-pacs]] a [[缓存决策]]; ne [[Рішення]]."
    assert extract_wikilinks(body) == ("рішення-склад-v2", "rozhodnutí-pacs", "缓存决策")


def test_wikilinks_are_per_chunk() -> None:
    chunks = chunk_markdown("# A\n[[one]]\n# B\n[[two]] [[one]]")
    assert [c.metadata["wikilinks"] for c in chunks] == [("one",), ("two", "one")]


def test_metadata_is_read_only() -> None:
    chunk = chunk_markdown("text")[0]
    with pytest.raises(TypeError):
        chunk.metadata["order"] = 5  # type: ignore[index]


# --- properties -----------------------------------------------------------------------------

_FRAGMENTS = st.sampled_from([
    "", "", "", "# Title", "## Section", "### Sub", "###### Six", "#tag", "```", "```py", "~~~",
    "# inside maybe a fence", "[[a-slug]] and `[[code]]`", "- item", "    indented code",
    "Sentence one. Sentence two! Three?", "---", "| a | b |",
])
_WORDS = st.builds(
    lambda word, n: " ".join([word] * n),
    st.sampled_from(["word", "ünïcödé", "日本語", "x" * 70, "😀", "end."]),
    st.integers(min_value=1, max_value=150),
)
_LINE = st.one_of(_FRAGMENTS, _WORDS, st.text(max_size=120))
_MARKDOWN = st.lists(_LINE, max_size=40).map("\n".join)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(body=_MARKDOWN, cap=st.integers(min_value=1, max_value=96),
       overlap=st.integers(min_value=0, max_value=48))
def test_property_chunks_are_nonempty_ordered_and_bounded(body: str, cap: int,
                                                          overlap: int) -> None:
    chunks = chunk_markdown(body, hard_cap_tokens=cap, overlap_tokens=overlap)
    assert [c.order for c in chunks] == list(range(len(chunks)))
    for chunk in chunks:
        assert chunk.text and chunk.text == chunk.text.strip()
        assert chunk.metadata["order"] == chunk.order
        assert estimate_tokens(chunk.text) <= cap + overlap


@settings(max_examples=200, deadline=None)
@given(body=st.lists(st.one_of(_WORDS, st.text(alphabet=st.characters(
    blacklist_characters="#-`~", blacklist_categories=("Cs",)), max_size=120)),
    max_size=30).map("\n".join), cap=st.integers(min_value=1, max_value=64))
def test_property_without_headings_or_overlap_no_text_is_lost(body: str, cap: int) -> None:
    chunks = chunk_markdown(body, hard_cap_tokens=cap, overlap_tokens=0)
    squash = re.compile(r"\s+")
    assert squash.sub("", "".join(texts(chunks))) == squash.sub("", body)


def test_a_headings_closing_hashes_are_not_its_title() -> None:
    """``# Setup ##`` gave the path 'Setup ##' (the document's title strips the closing #s)."""
    chunks = chunk_markdown("# Setup ##\n\ntext one\n\n## C#\n\ntext two\n")
    assert paths(chunks) == ["Setup", "Setup > C#"]
    assert texts(chunks) == ["text one", "text two"]


def test_a_heading_longer_than_the_path_holds_keeps_its_words() -> None:
    """A title is cut to 200 characters in the heading path, and its heading line is in no
    chunk's text, so its words past the cut were in no chunk (a DOCX heading too)."""
    title = " ".join(f"word{i}" for i in range(100))
    chunks = chunk_markdown(f"# {title}\n\nbody\n\n## Short\n\nmore")
    assert chunks[0].text == f"{title}\n\nbody" and len(chunks[0].heading_path) <= 200
    assert (chunks[1].heading_path, chunks[1].text) == (f"{chunks[0].heading_path} > Short", "more")
    only = chunk_markdown(f"# {title}\n")  # a heading alone: its words are the section
    assert [c.text for c in only] == [title]
