#!/usr/bin/env bash
# Start (or stop) a local multi-process Ray cluster on this machine: a head (Jobs API on 127.0.0.1:8265) and
# N worker processes as extra nodes, all bound to 127.0.0.1, with the project's environment on PATH so that
# submitted jobs run `python` from it. Usage: cluster/local_cluster.sh start [N] | stop
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
export PATH="$here/.venv/bin:$PATH" RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 RAY_AUTH_MODE=token PYTHONUTF8=1
temp="${SPECBENCH_CLUSTER_TMP:-/tmp/specbench-cluster}"
case "${1:-start}" in
  start)
    workers="${2:-2}"
    ray start --head --port 6380 --dashboard-host 127.0.0.1 --dashboard-port 8265 --num-cpus 1 \
      --temp-dir "$temp" --disable-usage-stats
    for i in $(seq 1 "$workers"); do
      ray start --address 127.0.0.1:6380 --num-cpus 1 --disable-usage-stats
    done
    echo "submit with: specbench submit JOB.toml --address http://127.0.0.1:8265"
    ;;
  stop)
    ray stop
    ;;
  *)
    echo "usage: $0 start [N] | stop" >&2
    exit 2
    ;;
esac
