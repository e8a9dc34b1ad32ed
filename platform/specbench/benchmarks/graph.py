"""`specbench bench graph` (`kind = "bench_graph"`): graph build time, and CSR load of the full TLG against kaldifst arc iteration.

Both loaders read the same file in the same process, alternating in `rounds` rounds (CSR from the const file,
CSR from a vector copy, kaldifst), so that a busy machine slows them alike: every round's seconds are kept
(`seconds_rounds`), the times are medians over rounds and each speedup the median of its per-round ratios
(`*_rounds`). `profile_seconds` says where the benchmark's time went, stage by stage.
"""

from __future__ import annotations

import itertools
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import kaldifst
import numpy as np

from specbench.benchmarks.harness import runner, timed
from specbench.config import BenchGraphConfig, GraphConfig
from specbench.errors import DataError
from specbench.experiments.graph import run_graph
from specbench.experiments.job_refs import referenced_job
from specbench.hardware import describe
from specbench.wfst.graph import CsrGraph, read_graph


def walk_with_kaldifst(path: Path) -> tuple[int, float, float]:
    """Read `path` with kaldifst and visit every arc with its iterators: (arcs seen, checksum of weights,
    seconds of the read alone)."""
    start = time.perf_counter()
    fst = kaldifst.StdConstFst.read(str(path))
    read_s = time.perf_counter() - start
    arcs, total = 0, 0.0
    for state in kaldifst.StateIterator(fst):
        for arc in kaldifst.ArcIterator(fst, state):
            arcs += 1
            total += arc.weight.value
    return arcs, total, read_s


def check_same_graph(path: Path, csr: CsrGraph) -> None:
    """A DataError naming the first state and arc where `csr` and kaldifst read `path` otherwise."""
    fst = kaldifst.StdConstFst.read(str(path))
    for s in range(max(csr.num_states, fst.num_states)):
        theirs = sorted((a.ilabel, a.olabel, a.nextstate, a.weight.value)
                        for a in (kaldifst.ArcIterator(fst, s) if s < fst.num_states else ()))
        ours = sorted(arc for a in (csr.epsilon, csr.emitting) if s < csr.num_states for arc in zip(
            *(x[a.state_arcs(s)].tolist() for x in (a.ilabel, a.olabel, a.dest, a.weight)), strict=True))
        if diff := next((p for p in itertools.zip_longest(ours, theirs) if p[0] != p[1]), None):
            raise DataError(f"{path}: our CSR reader and kaldifst differ at state {s}: its arc (ilabel, "
                            f"olabel, next state, weight) {diff[0]} vs {diff[1]}. "
                            "Fix: rebuild it (`specbench graph build JOB --force`, JOB: the graph_job).")


def compare_loaders(path: Path, rounds: int = 3) -> dict[str, Any]:
    """CSR loading of the const OpenFst file `path` (and of a vector copy) against kaldifst arc iteration,
    alternating in `rounds` rounds; checks that both see the same arcs and weights."""
    if rounds < 1:
        raise DataError(f"--rounds must be >= 1, got {rounds}")
    profile: dict[str, float] = {}
    seconds: dict[str, list[float]] = {name: [] for name in
                                       ("csr_load_const", "csr_load_vector", "kaldifst_arc_iteration")}
    reads: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        vector = Path(tmp) / "TLG.vector.fst"
        profile["vector_copy_write"], _ = timed(
            lambda: kaldifst.StdVectorFst(kaldifst.StdConstFst.read(str(path))).write(str(vector)))
        for _ in range(rounds):
            took, csr = timed(lambda: read_graph(path))
            seconds["csr_load_const"].append(took)
            seconds["csr_load_vector"].append(timed(lambda: read_graph(vector))[0])
            took, (walked, checksum, read_s) = timed(lambda: walk_with_kaldifst(path))
            seconds["kaldifst_arc_iteration"].append(took)
            reads.append(read_s)
    ours = float(np.sum(csr.emitting.weight, dtype=np.float64) + np.sum(csr.epsilon.weight, dtype=np.float64))
    if walked != csr.num_arcs or abs(ours - checksum) > 1e-3 * max(1.0, abs(checksum)):
        check_same_graph(path, csr)
    walk = seconds["kaldifst_arc_iteration"]
    median = statistics.median
    result: dict[str, Any] = {"graph_states": csr.num_states, "graph_arcs": csr.num_arcs, "rounds": rounds,
                              **{f"{name}_seconds": median(values) for name, values in seconds.items()}}
    for form in ("const", "vector"):
        ratios = [w / c for w, c in zip(walk, seconds[f"csr_load_{form}"], strict=True)]
        result[f"speedup_csr_{form}_vs_kaldifst"] = median(ratios)
        result[f"speedup_csr_{form}_vs_kaldifst_rounds"] = ratios
    profile.update({f"{name}_all_rounds": sum(values) for name, values in seconds.items()})
    profile["kaldifst_read_all_rounds"] = sum(reads)  # of kaldifst_arc_iteration_all_rounds; the rest: arcs
    result.update(seconds_rounds=seconds, profile_seconds=profile)
    return result


def bench_graph(config: GraphConfig, rebuild: bool, rounds: int = 3) -> dict[str, Any]:
    """Measure; returns the JSON-able result (times in seconds)."""
    build_s, art = timed(lambda: run_graph(config, None, force=rebuild))
    loaders = compare_loaders(art.tlg, rounds)
    loaders["profile_seconds"] = {"build_or_reuse": build_s, **loaders["profile_seconds"]}
    return {
        "bench": "graph",
        "hardware": describe(),
        "build_seconds": art.stats.build_seconds if not art.reused else None,
        "build_reused": art.reused,
        **loaders,
    }


def measure(config: BenchGraphConfig, job_path: Path) -> dict[str, Any]:
    """The benchmark of a `bench_graph` config (see `benchmarks.harness`)."""
    return bench_graph(referenced_job(job_path, "graph_job", config.graph_job, GraphConfig), config.rebuild,
                       config.rounds)


def summary(result: dict[str, Any]) -> list[str]:
    return [f"graph benchmark: {result['graph_states']:,} states, {result['graph_arcs']:,} arcs; CSR load "
            f"{result['speedup_csr_const_vs_kaldifst']:.1f}x kaldifst arc iteration (median of "
            f"{result['rounds']} rounds)"]


execute = runner(measure, summary)
