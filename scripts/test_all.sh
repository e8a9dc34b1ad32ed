#!/usr/bin/env bash
# `make test`: the unit, property and `isolated` tests in a second pytest beside the other integration tests,
# which run alone and in order (one local Ray, one test at a time on the shared caches). Both must pass.
set -u
bin=${1:-.venv/bin}
log=$(mktemp)
"$bin/python" -m pytest tests/unit tests/property tests/integration -m "not gpu and (not integration or isolated)" \
    -p no:cacheprovider --durations=10 > "$log" 2>&1 &
unit=$!
trap 'kill "$unit" 2>/dev/null; rm -f "$log"' EXIT  # Ctrl-C or a kill stops the pytest beside too
trap 'exit 130' INT TERM
"$bin/python" -m pytest tests/integration -m "not gpu and not isolated" --durations=30
integration=$?
wait "$unit"
units=$?
echo "---- unit, property and isolated integration tests (run beside the others): exit status $units ----"
cat "$log"
rm -f "$log"
[ "$integration" -eq 0 ] && [ "$units" -eq 0 ]
