"""Bad input gets a typed error with a clear message (DESIGN.md §5), never a traceback at the
CLI and never a silently wrong result; nothing is half-written."""

from __future__ import annotations

import math
import subprocess
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from kb_retriever import HashingEmbedder, KnowledgeBase, Settings
from kb_retriever.cli import main
from kb_retriever.errors import (
    EmbeddingError,
    FilterError,
    InputError,
    SchemaError,
    StoreError,
)
from kb_retriever.filters.dimensions import VALID_KEYS

from ._util import PYTHON, snapshot

pytestmark = pytest.mark.db

BAD_URL = "postgresql://u:s3cret@127.0.0.1:1/db"
GOOD_MD = "---\nslug: ok\ntype: decision\nstatus: accepted\n---\n# Ok\n\nRedis cache decision.\n"


class Poisoned(HashingEmbedder):
    """A hashing embedder whose output is spoiled in one way, at ingest or at query time."""

    def __init__(self, dim: int, how: str, when: str) -> None:
        super().__init__(dim)
        self.how, self.when = how, when

    def _spoil(self, vec: list[float]) -> Any:
        if self.how == "nan":
            return [math.nan, *vec[1:]]
        if self.how == "inf":
            return [math.inf, *vec[1:]]
        if self.how == "short":
            return vec[:-1]
        if self.how == "zero":
            return [0.0] * len(vec)
        if self.how == "text":
            return ["x", *vec[1:]]
        if self.how == "none":
            return None
        raise RuntimeError("model server went away")

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        vecs = super().embed_documents(texts)
        return [self._spoil(v) for v in vecs] if self.when == "ingest" else vecs

    def embed_query(self, text: str) -> list[float]:
        vec = super().embed_query(text)
        return self._spoil(vec) if self.when == "query" else vec


HOWS = ["nan", "inf", "short", "zero", "text", "none", "raise"]


@pytest.fixture(scope="module")
def db64(new_database: Callable[[], str], tmp_path_factory: pytest.TempPathFactory) -> str:
    """A database of 64-d hashing vectors holding one document; tests open their own KBs."""
    return _one_document_db(new_database(), tmp_path_factory.mktemp("db64"), dimension=64)


def _one_document_db(url: str, folder: Path, *, dimension: int) -> str:
    """``url`` with GOOD_MD ingested by a ``dimension``-d hashing embedder."""
    (folder / "a.md").write_text(GOOD_MD)
    with KnowledgeBase(Settings(), embedder=HashingEmbedder(dimension), database_url=url) as kb:
        assert kb.ingest([folder]).added
    return url


@pytest.fixture(scope="module")
def kb64(db64: str) -> Iterator[KnowledgeBase]:
    with KnowledgeBase(Settings(max_query_chars=50), embedder=HashingEmbedder(64),
                       database_url=db64) as kb:
        yield kb


@pytest.mark.parametrize("how", HOWS)
def test_bad_vectors_at_ingest(db64: str, tmp_path: Path, how: str) -> None:
    # New text each time: cached embeddings would never reach the embedder.
    (tmp_path / "b.md").write_text(f"# B\n\nredis cache {how} {tmp_path.name}\n")
    before = snapshot(db64)
    with KnowledgeBase(Settings(), embedder=Poisoned(64, how, "ingest"),
                       database_url=db64) as kb, pytest.raises(EmbeddingError):
        kb.ingest([tmp_path])
    assert snapshot(db64) == before  # nothing half-written


@pytest.mark.parametrize("how", HOWS)
def test_bad_vectors_at_query(db64: str, how: str) -> None:
    import asyncio

    kb = KnowledgeBase(Settings(), embedder=Poisoned(64, how, "query"), database_url=db64)

    async def go() -> None:
        async with kb:
            await kb.asearch("redis cache")

    with kb, pytest.raises(EmbeddingError):
        kb.search("redis cache")
    with pytest.raises(EmbeddingError):
        asyncio.run(go())


@pytest.mark.parametrize("vector", [
    [0.1] * 63, [0.1] * 65, [], [math.nan] + [0.1] * 63, [math.inf] * 64, [0.0] * 64,
    ["a"] * 64, [None] * 64, [[0.1]] * 64, "0.1" * 64, [1e300] * 64, [10**400] * 64, 0.1,
], ids=["short", "long", "empty", "nan", "inf", "zero", "text", "none", "nested", "string",
        "beyond-float32", "beyond-float64", "scalar"])
def test_bad_query_embedding_argument(kb64: KnowledgeBase, vector: list[Any]) -> None:
    with pytest.raises(EmbeddingError):
        kb64.search("redis", query_embedding=vector)


def test_other_dimension_on_existing_database(db64: str, tmp_path: Path) -> None:
    """Several models share a database (issue 28): another dimension opens, but the project
    the 64-d model wrote refuses it, by name, and nothing is written."""
    (tmp_path / "b.md").write_text("# B\n\nredis cache other model\n")
    before = snapshot(db64)
    with KnowledgeBase(Settings(), embedder=HashingEmbedder(32), database_url=db64) as other:
        with pytest.raises(SchemaError, match="64-d"):
            other.search("redis cache")
        with pytest.raises(SchemaError, match="64-d"):
            other.ingest([tmp_path])
    assert snapshot(db64) == before


@pytest.mark.parametrize("query", ["", "   ", "\n\t ", "x" * 51, 42, None, b"bytes"])
def test_bad_queries(kb64: KnowledgeBase, query: Any) -> None:
    with pytest.raises(InputError):
        kb64.search(query)


@pytest.mark.parametrize("limit", [0, -1, -(2**63), 201, 10**12, True, 2.5, "5", math.nan])
def test_bad_limits(kb64: KnowledgeBase, limit: Any) -> None:
    with pytest.raises(InputError, match="limit"):
        kb64.search("redis", limit=limit)


def test_unknown_filter_key_names_the_valid_ones(kb64: KnowledgeBase) -> None:
    with pytest.raises(FilterError) as err:
        kb64.search("redis", filters={"tag": ["cache"]})
    assert "tag" in str(err.value) and all(k in str(err.value) for k in VALID_KEYS)
    with pytest.raises(FilterError, match=r"\$eq"):
        kb64.search("redis", filters={"metadata": {"k": {"$regex": ".*"}}})


def test_unreachable_database_is_a_redacted_store_error() -> None:
    kb = KnowledgeBase(Settings(), embedder=HashingEmbedder(64), database_url=BAD_URL)
    with pytest.raises(StoreError) as err:
        kb.open()
    assert "s3cret" not in str(err.value) and "127.0.0.1" in str(err.value)
    with pytest.raises(StoreError, match="not open"):
        kb.search("redis")


# --- frontmatter and files --------------------------------------------------------------

BILLION_LAUGHS = "\n".join(
    ["---", 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    + [f"{chr(98 + i)}: &{chr(98 + i)} [{','.join(['*' + chr(97 + i)] * 9)}]" for i in range(8)]
    + ["slug: bomb", "type: decision", "status: accepted", "---", "# Bomb", "", "redis cache"]
)


def _minimal_pdf_header() -> bytes:
    return b"%PDF-1.7\n1 0 obj << /Type /Catalog /Pages 2 0 R >> endobj\ntrailer <<>>\n%%EOF"


BAD_FILES: dict[str, tuple[bytes, str]] = {
    # name: (content, expected outcome: "warning" = ingested non-canonical with a warning)
    "tags-not-list.md": (b"---\nslug: t\ntype: decision\nstatus: accepted\ntags: 5\n---\nredis\n",
                         "ingested"),
    "huge-frontmatter.md": (b"---\nslug: h\nsummary: \"" + b"x" * (10 * 1024 * 1024)
                            + b"\"\n---\n# Huge\n\nredis cache\n", "warning"),
    "bomb.md": (BILLION_LAUGHS.encode(), "warning"),
    "not-yaml.md": (b"---\n{[: :\n---\nredis\n", "warning"),
    "python-tag.md": (b"---\nx: !!python/object/apply:os.system [\"echo pwned\"]\n---\nredis\n",
                      "warning"),
    "deep.md": (b"---\nx: " + b"[" * 5000 + b"]" * 5000 + b"\n---\nredis\n", "warning"),
    "binary.md": (bytes(range(256)) * 40, "failed"),
    "latin1.txt": ("caf\u00e9 na\u00efve r\u00e9sum\u00e9 ".encode("latin-1") * 10, "failed"),
    "broken.pdf": (_minimal_pdf_header(), "failed"),
    "garbage.pdf": (b"%PDF-1.4\n" + bytes(range(256)) * 50, "failed"),
    "broken.docx": (b"PK\x03\x04 not really a zip", "failed"),
}


def test_malformed_files_are_reported_not_raised(make_kb: Callable[..., KnowledgeBase],
                                                 tmp_path: Path) -> None:
    kb = make_kb(embedder=HashingEmbedder(64))
    for name, (content, _) in BAD_FILES.items():
        (tmp_path / name).write_bytes(content)
    (tmp_path / "good.md").write_text(GOOD_MD)
    report = kb.ingest([tmp_path])
    failed = {path for path, _ in report.failed}
    warned = {path for path, _ in report.warnings}
    ingested = set(report.added)
    for name, (_, outcome) in BAD_FILES.items():
        if outcome == "failed":
            assert name in failed, (name, report)
        else:
            assert name in ingested, (name, report)
        if outcome == "warning":
            assert name in warned, (name, report.warnings)
    assert "good.md" in ingested
    for _, message in report.failed:
        assert message and "Traceback" not in message
    # A file that failed left nothing behind.
    with kb._pools.sync().connection() as conn:  # read-only peek at what was stored
        stored = {r[0] for r in conn.execute("SELECT source_path FROM kb_documents")}
    assert stored == ingested
    # The bomb's frontmatter was refused, so it is not canonical; the file is still searchable.
    result = kb.search("redis cache", limit=20)
    bomb = [h for h in result.primary if h.document.source_path == "bomb.md"]
    assert bomb and not bomb[0].document.is_canonical


# --- the CLI ---------------------------------------------------------------------------

def _cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(argv)
    err = capsys.readouterr().err
    return code, err


@pytest.fixture(scope="module")
def cli_url(new_database: Callable[[], str], tmp_path_factory: pytest.TempPathFactory) -> str:
    return _one_document_db(new_database(), tmp_path_factory.mktemp("cli"), dimension=4096)


@pytest.fixture
def cli_db(cli_url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("KB_EMBEDDER", "hashing")  # 4096-d, like cli_url
    monkeypatch.setenv("KB_MAX_QUERY_CHARS", "100")
    return cli_url


CLI_CASES = {
    "empty query": ["search", ""],
    "blank query": ["search", "   "],
    "long query": ["search", "x" * 101],
    "zero limit": ["search", "redis", "--limit", "0"],
    "negative limit": ["search", "redis", "--limit", "-5"],
    "huge limit": ["search", "redis", "--limit", "999999999999"],
    "word limit": ["search", "redis", "--limit", "ten"],
    "unknown filter": ["search", "redis", "--filters", '{"tag": ["x"]}'],
    "filters not json": ["search", "redis", "--filters", "{tags: [x"],
    "filters not object": ["search", "redis", "--filters", "[1, 2]"],
    "bad metadata op": ["search", "redis", "--filters", '{"metadata": {"k": {"$where": 1}}}'],
    "bad date": ["search", "redis", "--filters", '{"date_from": "yesterday"}'],
    "nul tenant": ["search", "redis", "--tenant", "a\x00b"],
    "long project": ["prompt", "redis", "--project", "p" * 500],
    "prompt empty": ["prompt", " "],
    "negative max chars": ["prompt", "redis", "--max-chars", "-5"],
    "word max chars": ["prompt", "redis", "--max-chars", "NaN"],
    "spaced tenant": ["search", "redis", "--tenant", " acme "],
    "surrogate query": ["search", "redis \udcff"],
    "missing path": ["ingest", "/nonexistent/kb-retriever/path"],
    "no command": [],
    "unknown command": ["explode"],
}


@pytest.mark.parametrize("case", list(CLI_CASES))
def test_cli_bad_input_exits_2_with_one_line(cli_db: str, case: str,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    argv = CLI_CASES[case]
    try:
        code, err = _cli(["--database-url", cli_db, *argv], capsys)
    except SystemExit as exc:  # argparse's own usage errors
        code, err = int(exc.code or 0), capsys.readouterr().err
    assert code == 2, (code, err)
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1 and err.startswith("kb-retriever: "), err


def test_cli_unreachable_database(capsys: pytest.CaptureFixture[str],
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KB_EMBEDDER", "hashing")
    for argv in (["search", "redis"], ["prompt", "redis"], ["ingest", "."]):
        code, err = _cli(["--database-url", BAD_URL, *argv], capsys)
        assert code == 2 and len(err.strip().splitlines()) == 1, err
        assert "s3cret" not in err and "Traceback" not in err


@pytest.mark.slow
def test_cli_subprocess_unreachable_database(tmp_path: Path) -> None:
    """The real entry point, with the real interpreter: exit 2, one line, no password."""
    proc = subprocess.run(
        [PYTHON, "-m", "kb_retriever", "--database-url", BAD_URL, "search", "redis"],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "KB_EMBEDDER": "hashing"},
    )
    assert proc.returncode == 2, proc
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "s3cret" not in proc.stderr + proc.stdout and "Traceback" not in proc.stderr


def test_metadata_past_the_size_of_a_file_is_an_input_error(kb64: KnowledgeBase) -> None:
    """Only the metadata's depth was checked: 50 MB of it was stored, and served back whole."""
    from kb_retriever import InputError
    from kb_retriever.ingest.loaders import MAX_FILE_BYTES

    with pytest.raises(InputError, match="metadata is larger than"):
        kb64.add_documents([{"id": "big", "text": "x", "metadata": {"k": "A" * MAX_FILE_BYTES}}])
    assert kb64.get_by_ids(["big"]) == []
