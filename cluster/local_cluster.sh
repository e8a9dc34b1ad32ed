#!/usr/bin/env bash
# Start (or stop) a local multi-process Ray cluster on this machine: a head (Jobs API on 127.0.0.1:8265) and
# N worker processes as extra nodes, all bound to 127.0.0.1, with the project's environment on PATH so that
# submitted jobs run `python` from it. Usage: cluster/local_cluster.sh start [N] | stop
# Token auth is on (RAY_AUTH_MODE=token unless you export another mode): the token is this machine's
# ~/.ray/auth_token (or $RAY_AUTH_TOKEN / $RAY_AUTH_TOKEN_PATH), generated here when there is none, since
# `ray start` does not generate one. Clients on this machine find it; others need it (`ray get-auth-token`).
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
export PATH="$here/.venv/bin:$PATH" RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 PYTHONUTF8=1
export RAY_AUTH_MODE="${RAY_AUTH_MODE:-token}"
temp="${SPECBENCH_CLUSTER_TMP:-/tmp/specbench-cluster}"
case "${1:-start}" in
  start)
    workers="${2:-2}"
    if [ "$RAY_AUTH_MODE" = token ]; then
      if ! ray get-auth-token --help >/dev/null 2>&1; then
        echo "$0: this Ray ($(ray --version 2>&1)) has no \`ray get-auth-token\`, so no token can be made:" \
          "install the project's pinned Ray (make run), or start with RAY_AUTH_MODE=disabled" >&2
        exit 2
      fi
      ray get-auth-token --generate >/dev/null  # prints the token: kept out of the terminal and logs
    fi
    ray start --head --port 6380 --dashboard-host 127.0.0.1 --dashboard-port 8265 --num-cpus 1 \
      --temp-dir "$temp" --disable-usage-stats
    for i in $(seq 1 "$workers"); do
      ray start --address 127.0.0.1:6380 --num-cpus 1 --disable-usage-stats
    done
    echo "submit with: specbench submit JOB.toml --address http://127.0.0.1:8265"
    if [ "$RAY_AUTH_MODE" = token ]; then
      echo "token auth is on: clients on this machine use ~/.ray/auth_token; elsewhere export" \
        "RAY_AUTH_MODE=token RAY_AUTH_TOKEN=\$(ray get-auth-token) (run here)"
    fi
    ;;
  stop)
    ray stop
    ;;
  *)
    echo "usage: $0 start [N] | stop" >&2
    exit 2
    ;;
esac
