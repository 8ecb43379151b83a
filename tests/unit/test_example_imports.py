"""Every example imports only what the README's install line installs (issue 28: after it,
``examples/langchain_vectorstore.py`` failed on ``langchain_text_splitters``).

Read from the checkout and this environment's installed metadata, without a network: the
distributions the README's first install command names, their dependencies (no extras),
transitively, must provide every third-party module an example imports.
"""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]


def _install_line() -> list[Path]:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    block = readme.split("## Install", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    first = block.split("\n\n")[0].split("pip install", 2)[1]  # the first command
    return [ROOT / p for p in re.findall(r"-e\s+(\S+)", first.replace("\\\n", " "))]


def _closure(names: list[str]) -> set[str]:
    seen: set[str] = set()
    todo = [canonicalize_name(n) for n in names]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for spec in metadata.requires(name) or []:
            req = Requirement(spec)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(canonicalize_name(req.name))
    return seen


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.add(node.module.split(".")[0])
    return out


def test_the_install_line_installs_what_every_example_imports() -> None:
    dists = [tomllib.loads((p / "pyproject.toml").read_text())["project"]["name"]
             for p in _install_line()]
    assert "langchain-kb-retriever" in dists and "kb-retriever" in dists, dists
    installed = _closure(dists)
    providers = metadata.packages_distributions()
    local = {p.stem for p in (ROOT / "examples").glob("*.py")}
    missing = {}
    for example in sorted((ROOT / "examples").glob("*.py")):
        for module in _imports(example) - set(sys.stdlib_module_names) - local:
            found = {canonicalize_name(d) for d in providers.get(module, [])}
            if not found & installed:
                missing.setdefault(example.name, []).append(module)
    assert missing == {}, f"not installed by the README's install line: {missing}"
