# `make run`: set up .venv and run the quick suite on the embedded default (local Ray, MLflow in SQLite).
# `make test`: set up .venv and run every test (unit + integration).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.specbench-installed

.PHONY: run test test-unit test-integration bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e .
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/specbench data check
	$(BIN)/specbench run jobs/quick.toml

test: $(STAMP)
	$(BIN)/python -m pytest tests -m "not gpu"

test-unit: $(STAMP)
	$(BIN)/python -m pytest tests -m "unit"

test-integration: $(STAMP)
	$(BIN)/python -m pytest tests -m "integration"

bench: $(STAMP)
	$(BIN)/specbench bench graph --output benchmarks/results/graph.json

clean:
	rm -rf $(VENV) .specbench
