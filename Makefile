# `make run`: set up, then run the quick suite on the embedded default (local Ray, MLflow in SQLite).
# `make test`: set up, then run every test (unit + integration).
# Setting up: install the Debian packages that are missing (scripts/ensure_system_packages.sh: as root, or
# through sudo -n, else it prints the command to run), create .venv and install specbench, build KenLM's lmplz
# and query into .specbench/bin (scripts/build_kenlm.py). Each step is a no-op once done.
# `make gpu-check OUT=DIR`: on the H200 machine (no .venv, no install; run `python scripts/gpu_carry.py` here
# first and send .specbench/gpu-carry along): GPU tests, the decoder, completion and acoustic benchmarks, JSON
# into OUT.
PYTHON ?= python3
export PYTHONUTF8 := 1
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.specbench-installed

.PHONY: run test test-unit test-integration bench gpu-check clean setup system-packages kenlm

$(STAMP): pyproject.toml
	$(BIN)/python -m pip --version >/dev/null 2>&1 || { rm -rf $(VENV) && $(PYTHON) -m venv $(VENV); }
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e .
	touch $(STAMP)

system-packages:
	@bash scripts/ensure_system_packages.sh

kenlm: system-packages $(STAMP)
	@$(BIN)/python scripts/build_kenlm.py

setup: system-packages $(STAMP) kenlm

run: setup
	$(BIN)/specbench data check
	$(BIN)/specbench run jobs/quick.toml

test: setup
	bash scripts/test_all.sh $(BIN)

test-unit: setup
	$(BIN)/python -m pytest tests -m "unit"

test-integration: setup
	$(BIN)/python -m pytest tests -m "integration"

bench: setup
	$(BIN)/specbench bench graph --rebuild --output benchmarks/results/graph_cpu.json

# Python 3.12 with numpy, pyarrow, cupy, torch and pytest; kaldifst, kaldi-decoder and kaldiio from the carried wheels.
# scripts/gpu_check.sh runs each step under its own time limit and logs to OUT/gpu_check.log.
GPU_PYTHON ?= python3
OUT ?= benchmarks/results/gpu
UTTS ?= 1000
# `specbench bench decoder` options: the GPU configurations and the CPU baselines they are measured against
# (the CPU-only backends, twin, cpu_numpy and the partial-posterior cost, are measured on the CPU machines,
# benchmarks/results/decoder_cpu*.json; here they would add three minutes); the fastest configuration
# measured: --gpu-lanes 2048 --gpu-decoders 4 --gpu-cuda-graphs --graph-copies 1 (docs/operations.md)
DECODER_ARGS ?= --backends kaldi,cpu,cpu_lattice,gpu,gpu_lattice,cpu_scaling --ratio-rounds 1

gpu-check:
	OUT=$(OUT) GPU_PYTHON=$(GPU_PYTHON) UTTS=$(UTTS) DECODER_ARGS="$(DECODER_ARGS)" bash scripts/gpu_check.sh

clean:  # .venv and every cache that can be rebuilt; the MLflow store and unsent journals stay
	rm -rf $(VENV)
	find .specbench -mindepth 1 -maxdepth 1 ! -name mlflow.db ! -name mlartifacts ! -name journal \
		-exec rm -rf {} + 2>/dev/null || true
