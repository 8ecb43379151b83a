"""The house rules of decision 0011, checked on the code itself."""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "src" / "kb_retriever"
SOURCES = sorted(p for p in PACKAGE.rglob("*.py"))
ADAPTERS = sorted((ROOT / "integrations").rglob("*.py"))


def _imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split(".")[0])
    return names


def test_only_the_store_imports_the_driver():
    outside = [p.relative_to(PACKAGE).as_posix() for p in SOURCES
               if p.relative_to(PACKAGE).parts[0] != "store" and "psycopg" in _imports(p)]
    assert outside == []


def test_a_root_of_a_few_doors_and_no_two_modules_alike():
    root = [p.name for p in PACKAGE.glob("*.py")]
    assert len(root) <= 12, root
    names = Counter(p.stem for p in SOURCES if p.stem != "__init__")
    assert [n for n, c in names.items() if c > 1] == []


def test_small_files_and_functions():
    for path in SOURCES + ADAPTERS:
        source = path.read_text(encoding="utf-8")
        assert len(source.splitlines()) <= 400, path
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                assert node.end_lineno - node.lineno < 80, f"{path}:{node.name}"


#: Any room may import these (the exception tree and the shared words).
FOUNDATION = {"errors", "vocabulary"}
#: room -> the rooms it may import (decision 0011's table); the root's doors import anything.
ALLOWED = {
    "errors": set(), "vocabulary": set(), "settings": {"errors", "vocabulary", "settings_checks"},
    "settings_checks": {"settings"},  # the settings' own checks (its type, for type hints)
    "checks": {"errors"}, "models": {"vocabulary"}, "ranking": {"models", "settings"},
    "filters": {"models", "checks", "errors"}, "embedding": {"errors"},
    "ingest": {"errors", "models", "ranking", "settings"},
    "store": {"errors", "filters", "models", "ranking", "settings"},
    "search": {"checks", "errors", "filters", "models", "ranking", "settings", "store"},
    "write": {"checks", "embedding", "errors", "ingest", "models", "ranking", "settings",
              "store", "vocabulary"},
    "prompt": {"errors", "models", "ranking"},
    "interop": {"errors", "models", "ranking", "settings", "vocabulary"},
}


def _rooms_imported(path: Path) -> set[str]:
    rel = path.relative_to(PACKAGE)
    package = list(rel.parts[:-1])
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.ImportFrom):
            continue
        if node.level:
            base = package[:len(package) - node.level + 1]
            target = base + (node.module.split(".") if node.module else [node.names[0].name])
        elif node.module and node.module.startswith("kb_retriever."):
            target = node.module.split(".")[1:]
        else:
            continue
        out.add(target[0])
    return out


def test_each_room_imports_only_the_rooms_below_it():
    for path in SOURCES:
        room = path.relative_to(PACKAGE).parts[0].removesuffix(".py")
        if room in ALLOWED:
            extra = _rooms_imported(path) - ALLOWED[room] - FOUNDATION - {room}
            assert not extra, f"{path.relative_to(PACKAGE)} imports {sorted(extra)}"
