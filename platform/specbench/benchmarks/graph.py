"""`specbench bench graph` (`kind = "bench_graph"`): graph build time, and CSR load of the full TLG against kaldifst arc iteration.

Both loaders read the same file in the same process, one after the other, so the ratio holds on a noisy
shared machine where absolute times do not.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import kaldifst
import numpy as np

from specbench.benchmarks.harness import runner, timed
from specbench.config import BenchGraphConfig, GraphConfig
from specbench.experiments.graph import run_graph
from specbench.experiments.job_refs import referenced_job
from specbench.hardware import describe
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


def bench_graph(config: GraphConfig, rebuild: bool, repeats: int = 5) -> dict[str, Any]:
    """Measure; returns the JSON-able result (times in seconds)."""
    art = run_graph(config, None, force=rebuild)
    csr_const_s, csr = timed(lambda: read_graph(art.tlg), repeats)
    with tempfile.TemporaryDirectory() as tmp:
        vector = Path(tmp) / "TLG.vector.fst"
        kaldifst.StdVectorFst(kaldifst.StdConstFst.read(str(art.tlg))).write(str(vector))
        csr_vector_s, _ = timed(lambda: read_graph(vector), repeats)
    walk_s, (walked, checksum) = timed(lambda: walk_with_kaldifst(art.tlg), 1)
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


def measure(config: BenchGraphConfig, job_path: Path) -> dict[str, Any]:
    """The benchmark of a `bench_graph` config (see `benchmarks.harness`)."""
    return bench_graph(referenced_job(job_path, "graph_job", config.graph_job, GraphConfig), config.rebuild)


def summary(result: dict[str, Any]) -> list[str]:
    return [f"graph benchmark: {result['graph_states']:,} states, {result['graph_arcs']:,} arcs; CSR load "
            f"{result['speedup_csr_const_vs_kaldifst']:.1f}x kaldifst arc iteration"]


execute = runner(measure, summary)
