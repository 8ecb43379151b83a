"""The core never imports a framework, and its public surface is pinned."""

from __future__ import annotations

import subprocess
import sys

import kb_retriever


def test_importing_core_loads_no_framework():
    code = (
        "import sys, kb_retriever, kb_retriever.cli, kb_retriever.prompt.compose, kb_retriever.ranking,"
        " kb_retriever.interop;"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('langchain', 'langchain_core', 'llama_index'));"
        "print(','.join(bad))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_public_surface_is_pinned():
    assert sorted(kb_retriever.__all__) == sorted([
        "Candidate", "ChunkRecord", "ConfigError", "DocumentRecord", "DocumentRef", "Embedder",
        "EmbeddingError", "FilterError",
        "HashingEmbedder", "Hit", "IngestError", "IngestInterruptedError", "IngestReport", "InputError",
        "KbError",
        "KnowledgeBase", "MiniLMEmbedder", "Origin", "PromptTemplate", "QueryTimeoutError",
        "ReembedReport",
        "ScoreBreakdown",
        "SchemaError", "SearchFilters", "SearchMeta", "SearchResult", "Settings", "StoreError",
        "StoredChunk",
        "StoredDocument", "UnavailableError", "WriteError", "compose_prompt", "load_settings",
        "__version__",
    ])
    for name in kb_retriever.__all__:
        assert hasattr(kb_retriever, name)


def _imports(path, module: str, modules: set[str]) -> set[str]:
    """The package modules ``module`` imports (at any depth of its code, TYPE_CHECKING aside)."""
    import ast

    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    found: set[str] = set()

    class Visitor(ast.NodeVisitor):
        def visit_If(self, node: ast.If) -> None:
            if not (isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"):
                self.generic_visit(node)

        def visit_Import(self, node: ast.Import) -> None:
            found.update(a.name for a in node.names)

        def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
            base = package
            for _ in range(max(node.level - 1, 0)):
                base = base.rsplit(".", 1)[0]
            target = (f"{base}.{node.module}" if node.module else base) if node.level \
                else node.module or ""
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                found.add(sub if sub in modules else target)

    Visitor().visit(ast.parse(path.read_text(encoding="utf-8")))
    return {m for m in found if m in modules and m != module}


def test_no_import_cycles_in_the_core():
    from pathlib import Path

    root = Path(kb_retriever.__file__).parent
    paths = {}
    for path in root.rglob("*.py"):
        parts = path.relative_to(root.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        paths[name] = path
    graph = {m: _imports(p, m, set(paths)) for m, p in paths.items()}

    def reaches(start: str, goal: str) -> bool:
        seen, todo = set(), [start]
        while todo:
            m = todo.pop()
            if m == goal:
                return True
            if m not in seen:
                seen.add(m)
                todo.extend(graph[m])
        return False

    cycles = sorted((a, b) for a, deps in graph.items() for b in deps
                    if not b.startswith(a + ".") and not a.startswith(b + ".")
                    and b != "kb_retriever" and reaches(b, a))
    assert cycles == []
