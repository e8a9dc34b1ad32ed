"""`specbench bench graph`: graph build time, and CSR load of the full TLG against kaldifst arc iteration.

Both loaders read the same file in the same process, one after the other, so the ratio holds on a noisy
shared machine where absolute times do not.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import kaldifst
import numpy as np

from specbench.config import GraphConfig
from specbench.hardware import describe
from specbench.pipelines.graph import run_graph
from specbench.tracking.runs import TrackedRun
from specbench.wfst.graph import read_graph


def walk_with_kaldifst(path: Path) -> tuple[int, float]:
    """Read `path` with kaldifst and visit every arc with its iterators: (arcs seen, checksum of weights)."""
    fst = kaldifst.StdConstFst.read(str(path))
    arcs, total = 0, 0.0
    for state in kaldifst.StateIterator(fst):
        for arc in kaldifst.ArcIterator(fst, state):
            arcs += 1
            total += arc.weight.value
    return arcs, total


def _timed(fn: Any, repeats: int) -> tuple[float, Any]:
    times, result = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), result


def bench_graph(config: GraphConfig, rebuild: bool, repeats: int = 5) -> dict[str, Any]:
    """Measure; returns the JSON-able result (times in seconds)."""
    art = run_graph(config, None, force=rebuild)
    csr_const_s, csr = _timed(lambda: read_graph(art.tlg), repeats)
    with tempfile.TemporaryDirectory() as tmp:
        vector = Path(tmp) / "TLG.vector.fst"
        kaldifst.StdVectorFst(kaldifst.StdConstFst.read(str(art.tlg))).write(str(vector))
        csr_vector_s, _ = _timed(lambda: read_graph(vector), repeats)
    walk_s, (walked, checksum) = _timed(lambda: walk_with_kaldifst(art.tlg), 1)
    ours = float(np.sum(csr.emitting.weight, dtype=np.float64) + np.sum(csr.epsilon.weight, dtype=np.float64))
    if walked != csr.num_arcs or abs(ours - checksum) > 1e-3 * max(1.0, abs(checksum)):
        raise AssertionError(f"CSR and kaldifst disagree: {csr.num_arcs} vs {walked} arcs")
    return {
        "bench": "graph",
        "hardware": describe(),
        "graph_states": csr.num_states,
        "graph_arcs": csr.num_arcs,
        "build_seconds": art.stats.build_seconds if not art.reused else None,
        "build_reused": art.reused,
        "csr_load_const_seconds": csr_const_s,
        "csr_load_vector_seconds": csr_vector_s,
        "kaldifst_arc_iteration_seconds": walk_s,
        "speedup_csr_const_vs_kaldifst": walk_s / csr_const_s,
        "speedup_csr_vector_vs_kaldifst": walk_s / csr_vector_s,
    }


def log_bench(result: dict[str, Any], tracking_uri: str | None) -> str:
    """Log a benchmark result to the `bench` experiment; returns the run id. Numeric values are logged as
    `bench.<bench>.<key>`, except keys already named `<bench>.<metric>` (DESIGN.md's names, such as
    `decoder.rtfx`), which keep their name."""
    bench = result["bench"]
    with TrackedRun("bench", f"bench-{bench}", tracking_uri, {"kind": "bench"}) as run:
        run.log_metrics({k if k.startswith(f"{bench}.") else f"bench.{bench}.{k}": float(v)
                         for k, v in result.items() if isinstance(v, (int, float)) and not isinstance(v, bool)})
        run.log_dict(result, f"bench_{result['bench']}.json")
        return run.run_id
