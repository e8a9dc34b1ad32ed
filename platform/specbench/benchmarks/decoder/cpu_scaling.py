"""The compiled CPU backend beyond one core, and its start-up.

- `time_cpu_cores`: the workload split over 1, 2, ... and all cores: one `CompiledCpuDecoder` per process
  (spawned, each an equal strided shard, timed from a barrier all pass once warm until the last one ends:
  the process harness of `gpu_processes.py`), as runs cpu_x1, cpu_x2, ...; the scaling efficiency is the
  throughput on n cores over n times the throughput on one, the median over rounds, each of which runs every
  core count in turn (as many rounds as the Kaldi ratio's; the throughputs recorded are the first round's).
- `startup_seconds`: a fresh Python process importing the backend and decoding one utterance, with an
  empty numba cache (compiling) and again with the cache it left (loading): what a new worker pays before
  its first result; reading and preparing the graph (the epsilon closure, the same for the numpy backend)
  is reported apart.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from specbench.benchmarks.decoder.agreement import Timed
from specbench.benchmarks.decoder.gpu_processes import run_gpu_processes
from specbench.benchmarks.decoder.workloads import Workload
from specbench.decoder.options import SearchOptions

COMPILED = "specbench.decoder.cpu_compiled:CompiledCpuDecoder"
CPU_MEASUREMENTS = ("cpu_scaling", "cpu_startup")
_STARTUP = """
import sys, time
import numpy as np
from specbench.wfst.graph import read_graph
graph = read_graph(sys.argv[1])
scores = np.load(sys.argv[2])
start = time.perf_counter()
from specbench.decoder.cpu_compiled import CompiledCpuDecoder
loaded = time.perf_counter()
decoder = CompiledCpuDecoder(graph)
prepared = time.perf_counter()
decoder.decode(scores, "startup")
print(loaded - start + time.perf_counter() - prepared, prepared - loaded)
"""


def _require_compiled() -> None:
    """ImportError when the compiled backend cannot be imported here (no numba)."""
    import specbench.decoder.cpu_compiled  # noqa: F401


def core_counts(requested: Sequence[int]) -> list[int]:
    """The requested process counts that fit this machine's cores, and all its cores, ascending."""
    available = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return sorted({n for n in requested if n <= available} | {available})


def time_cpu_cores(workload: Workload, options: SearchOptions, cores: Sequence[int],
                   rounds: int = 1) -> tuple[dict[str, Timed], dict[str, list[float]]]:
    """Runs `cpu_x<n>` for every n of `core_counts(cores)` (1-best), `rounds` times, every core count in
    turn within each round so that a busy machine slows them alike: the first round's Timed per run
    and every round's seconds per run. ImportError (the benchmark reports the measurement unavailable) where
    numba is missing, before any process starts."""
    _require_compiled()
    out: dict[str, Timed] = {}
    seconds: dict[str, list[float]] = {}
    for _ in range(max(rounds, 1)):
        for n in core_counts(cores):
            timed = run_gpu_processes(workload.graph_path, list(workload.items), options, n, [("cpu", None)],
                                      decoder=COMPILED)["cpu"]
            out.setdefault(f"cpu_x{n}", timed)
            seconds.setdefault(f"cpu_x{n}", []).append(timed.seconds)
    return out, seconds


def scaling_metrics(runs: dict[str, Timed], seconds: dict[str, list[float]] | None = None) -> dict[str, object]:
    """cpu_x<n>_efficiency for every n, and decoder.cpu_scaling_efficiency on all cores (the largest n); with
    `seconds` (every round's seconds per run), the efficiencies are the medians of the per-round ones, which
    are kept as cpu_x<n>_efficiency_rounds."""
    one = runs.get("cpu_x1")
    if one is None:
        return {}
    seconds = seconds or {key: [timed.seconds] for key, timed in runs.items()}
    out: dict[str, object] = {}
    for key in runs:
        n = int(key.removeprefix("cpu_x"))
        per_round = [a / (n * b) for a, b in zip(seconds["cpu_x1"], seconds[key], strict=True)]
        out[f"{key}_efficiency"] = statistics.median(per_round)
        if len(per_round) > 1:
            out[f"{key}_efficiency_rounds"] = per_round
    largest = max(runs, key=lambda k: int(k.removeprefix("cpu_x")))
    out["decoder.cpu_cores"] = float(int(largest.removeprefix("cpu_x")))
    out["decoder.cpu_scaling_efficiency"] = out[f"{largest}_efficiency"]
    return out


def startup_seconds(graph_path: Path, loglikes: np.ndarray) -> dict[str, float]:
    """cpu_startup_cold_seconds, cpu_startup_cached_seconds and cpu_graph_preparation_seconds (see the module
    docstring)."""
    _require_compiled()
    with tempfile.TemporaryDirectory(prefix="specbench-numba-") as cache:
        scores = Path(cache) / "scores.npy"
        np.save(scores, loglikes)
        env = dict(os.environ, NUMBA_CACHE_DIR=str(Path(cache) / "numba"),
                   PYTHONPATH=os.pathsep.join(filter(None, [str(Path(__file__).parents[3]),
                                                            os.environ.get("PYTHONPATH")])))
        times, preparation = [], 0.0
        for _ in range(2):
            proc = subprocess.run([sys.executable, "-c", _STARTUP, str(graph_path), str(scores)], env=env,
                                  capture_output=True, text=True, timeout=600, check=False)
            if proc.returncode:
                raise RuntimeError(f"the start-up probe failed:\n{proc.stderr[-2000:]}")
            seconds, preparation = (float(x) for x in proc.stdout.strip().splitlines()[-1].split())
            times.append(seconds)
    return {"cpu_startup_cold_seconds": times[0], "cpu_startup_cached_seconds": times[1],
            "cpu_graph_preparation_seconds": preparation}
