#!/usr/bin/env bash
# `make test`: the unit and property tests in a second pytest process beside the integration tests, which run
# alone and in order (one local Ray and one test at a time on the shared caches); both must pass. The unit
# tests' report follows the integration tests'. Usage: bash scripts/test_all.sh [VENV_BIN]
set -u
bin=${1:-.venv/bin}
log=$(mktemp)
"$bin/python" -m pytest tests/unit tests/property -m "not gpu" -p no:cacheprovider --durations=10 > "$log" 2>&1 &
unit=$!
"$bin/python" -m pytest tests/integration -m "not gpu" --durations=30
integration=$?
wait "$unit"
units=$?
echo "---- unit and property tests (run beside the integration tests): exit status $units ----"
cat "$log"
rm -f "$log"
[ "$integration" -eq 0 ] && [ "$units" -eq 0 ]
