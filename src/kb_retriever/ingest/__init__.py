"""Ingest: read source files into frozen drafts (frontmatter, chunks, edges); no database here.

Example::

    from pathlib import Path
    from kb_retriever import Settings
    from kb_retriever.ingest import parse_document

    draft = parse_document(Path("kb/auth.md"), root=Path("kb"), settings=Settings())
"""

from kb_retriever.ingest.chunking import chunk_markdown
from kb_retriever.ingest.frontmatter import FrontmatterResult, parse_frontmatter
from kb_retriever.ingest.loaders import SUPPORTED_SUFFIXES, parse_document

__all__ = [
    "SUPPORTED_SUFFIXES",
    "FrontmatterResult",
    "chunk_markdown",
    "parse_document",
    "parse_frontmatter",
]
