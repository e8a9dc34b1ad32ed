#!/usr/bin/env bash
# `make gpu-check OUT=DIR` on the H200 machine (no .venv, no install there: the image's python3 with numpy,
# pyarrow, cupy, torch and pytest, plus the carried kaldi wheels). Run `python scripts/gpu_carry.py` here first
# and send .specbench/gpu-carry along.
#
# The steps run in the order of what they prove: the card, the GPU tests (parity with the CPU backend), the
# decoder benchmark, then the completion and acoustic benchmarks. Each step has its own time limit, so a hang
# in one cannot eat the others' time, and its output goes to DIR/gpu_check.log as it runs (kept when a later
# step is stopped). DIR gets at most seven files: gpu_check.log, nvidia_smi.txt, gpu_tests.xml, gpu_parity.json
# and the three benchmarks' JSON. Exit status: the GPU tests' (5, none collected, counts as 0), else the
# benchmarks' (1 if any failed).
#
# Environment: OUT (required), GPU_PYTHON (python3), UTTS (1000), DECODER_ARGS (more `bench decoder` options),
# TESTS_LIMIT, DECODER_LIMIT, COMPLETION_LIMIT, ACOUSTIC_LIMIT (seconds per step), STOP_ON_FAILED_TESTS=1 (no
# benchmarks after a failed GPU test: a short first try).
set -u
out=${OUT:?set OUT to the folder for the results}
py=${GPU_PYTHON:-python3}
carry=.specbench/gpu-carry
if [ ! -f "$carry/manifest.json" ]; then
    echo "$carry is missing: run 'python scripts/gpu_carry.py' first" >&2
    exit 2
fi
mkdir -p "$out"
log=$out/gpu_check.log
export PYTHONPATH=platform:$carry/site PYTHONUNBUFFERED=1

# step NAME LIMIT_S COMMAND...: run it under its limit, its output appended to the log and the exit status
# and seconds written after it
step() {
    local name=$1 limit=$2 start rc
    shift 2
    start=$(date +%s)
    echo "==== $name (limit ${limit} s): $*" >> "$log"
    timeout --kill-after=10 "$limit" "$@" >> "$log" 2>&1
    rc=$?
    echo "==== $name: exit $rc after $(( $(date +%s) - start )) s$([ "$rc" -eq 124 ] && echo ', stopped at its limit')" \
        | tee -a "$log"
    return "$rc"
}

: > "$log"
nvidia-smi > "$out/nvidia_smi.txt" 2>&1 || echo "nvidia-smi failed (see nvidia_smi.txt)" | tee -a "$log"
if [ ! -d "$carry/site/kaldi_decoder" ] && ! "$py" -c "import kaldifst, kaldi_decoder, kaldiio" 2>/dev/null; then
    step wheels 120 "$py" -m pip install --quiet --no-index --no-deps --target "$carry/site" "$carry"/wheels/*.whl
fi
SPECBENCH_GPU_OUT=$out step gpu-tests "${TESTS_LIMIT:-240}" "$py" -m pytest tests/gpu -m gpu -q -rfE \
    -p no:cacheprovider --durations=20 --junitxml="$out/gpu_tests.xml"
tests=$?
if [ "${STOP_ON_FAILED_TESTS:-0}" = 1 ] && [ "$tests" -ne 0 ]; then
    echo "the GPU tests failed (exit $tests): the benchmarks are not run (STOP_ON_FAILED_TESTS=1)" | tee -a "$log"
    exit "$tests"
fi
bench=0
# shellcheck disable=SC2086 # DECODER_ARGS holds several options
step decoder-bench "${DECODER_LIMIT:-420}" "$py" -m specbench bench decoder --graph "$carry/TLG.fst" \
    --scores "$carry/scores_test.npz" --utterances "${UTTS:-1000}" --no-mlflow \
    --output "$out/decoder_h200.json" ${DECODER_ARGS:-} || bench=1
SPECBENCH_DATA=$carry/data step completion-bench "${COMPLETION_LIMIT:-120}" "$py" -m specbench bench completion \
    --device cuda --no-mlflow --output "$out/completion_h200.json" || bench=1
step acoustic-bench "${ACOUSTIC_LIMIT:-120}" "$py" -m specbench bench acoustic --audio "$carry/audio" \
    --utterances 100 --no-mlflow --output "$out/acoustic_h200.json" || bench=1
grep '^==== .*: exit' "$log"
[ "$tests" -eq 0 ] || exit "$tests"  # pytest's 5, no GPU test collected, fails too
exit "$bench"
