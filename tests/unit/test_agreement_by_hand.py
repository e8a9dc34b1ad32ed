"""Decoder benchmark figures by hand: speed ratios, lattice densities, 1-best agreement shares, failure counts,
lane occupancy, CPU scaling efficiency and core counts."""

from __future__ import annotations

import os

import pytest

from specbench.benchmarks.decoder import agreement as ag
from specbench.benchmarks.decoder.cpu_scaling import core_counts, scaling_metrics
from specbench.decoder.result import DecodeResult, DecodeStats

pytestmark = pytest.mark.unit
OK = ag.Outcome(True, (1, 2), 10.0, 0, None, 40)
B = OK._replace(max_active_binds=2)
FAIL = ag.Outcome(False, (), float("inf"), 0, None, 40)
REF = [OK, B, OK, B]  # the CPU backend's: b and d bound, 160 frames


def _t(seconds: float, outcomes: list[ag.Outcome], fps: float = 0.0, same: float | None = None) -> ag.Timed:
    return ag.Timed(seconds, outcomes, {"stream": {"frames_per_second": fps, "repeat_identical": same}})


def test_summary_metrics_by_hand() -> None:
    lat = [o._replace(lattice_arcs=80) for o in REF]  # 320 arcs / 160 frames
    runs = {"kaldi": _t(8.0, [OK._replace(total_cost=11.0), B._replace(word_ids=(1,)), OK, FAIL]),
            "cpu": _t(4.0, REF), "twin": _t(20.0, REF),
            "cpu_numpy": _t(16.0, [OK, B._replace(word_ids=(2,)), OK._replace(total_cost=10.5), B]),
            # b has no lattice: (200 + 100 + 60) arcs / 120 frames; c's words differ
            "cpu_lattice": _t(10.0, [OK._replace(lattice_arcs=200), B, OK._replace(lattice_arcs=100, word_ids=(9,)),
                                     B._replace(lattice_arcs=60)])}
    gpu = {"gpu1": _t(1.0, REF, 1000.0), "gpu2": _t(0.5, [OK, B, OK, FAIL], 4000.0, 0.9),
           "gpu1_lattice": _t(1.6, lat), "gpu2_lattice": _t(2.0, lat)}
    out = ag.summary_metrics(runs, gpu, list("abcd"), 6.4)
    # 6.4 s / 1.6 s (gpu1_lattice, the fastest), 8 / 1.6, 10 / 4; 8 / 16, 16 / 4
    expected = {"decoder.lattice_rtfx": 4.0, "decoder.lattice_speedup_vs_kaldi": 5.0, "cpu_lattice_overhead": 2.5,
                "decoder.cpu_numpy_vs_kaldi": 0.5, "cpu_vs_cpu_numpy": 4.0,
                "cpu_lattice_density": 3.0, "decoder.lattice_density": 2.0,
                "decoder.max_active_bound_utterances": 2, "decoder.max_active_free_utterances": 2,
                # words only: a (cost 11) agrees, b and d do not
                "decoder.cpu_kaldi_identical": 0.5, "decoder.cpu_kaldi_identical_max_active_free": 1.0,
                # gpu2's (d failed), not cpu_numpy's 0.5
                "decoder.onebest_identical": 0.75, "cpu_numpy_onebest_identical": 0.5,
                "cpu_lattice_onebest_identical": 0.75, "kaldi_failed_utterances": 1, "gpu2_failed_utterances": 1}
    assert {k: out[k] for k in expected} == pytest.approx(expected)
    no_gpu = ag.summary_metrics(runs, {}, list("abcd"), 6.4)  # 6.4 s / 10 s
    assert no_gpu["decoder.lattice_rtfx"] == pytest.approx(0.64) and no_gpu["decoder.lattice_density"] == 3.0
    numpy_only = ag.summary_metrics({k: runs[k] for k in ("cpu_numpy", "twin")}, {}, list("abcd"), 6.4)
    assert numpy_only["decoder.onebest_identical"] == 0.5


def test_agreement_lanes_and_outcomes() -> None:
    assert ag.agree(OK._replace(total_cost=0.0), OK._replace(total_cost=0.001))  # at the tolerance
    assert not ag.agree(OK._replace(total_cost=0.0), OK._replace(total_cost=0.0011))
    ids = [f"u{i:02d}" for i in range(25)]
    assert ag.agreement([OK] * 25, [FAIL] * 25, ids, [False] * 25) == {
        "all": 0.0, "bound": None, "free": 0.0, "mismatches": ids[:20]}
    assert ag.lane_use(10, 30, 4)["occupancy"] == 0.75 and ag.lane_use(0, 0, 4)["occupancy"] is None
    result = DecodeResult("u", "ok", (3, 4), 1.5, 2.0, 7, (2, 6), DecodeStats(max_active_binds=3))
    assert ag.outcome_of(result, 7) == ag.Outcome(True, (3, 4), 3.5, 3, None, 7)


def test_cpu_scaling_efficiency_and_core_counts() -> None:
    runs = {f"cpu_x{n}": ag.Timed(s, [], {}) for n, s in ((1, 8.0), (2, 5.0), (16, 1.0))}
    out = scaling_metrics(runs)  # 16 cores: 8 / (16 x 1)
    assert out["decoder.cpu_cores"] == 16.0 and out["decoder.cpu_scaling_efficiency"] == 0.5
    assert scaling_metrics({"cpu_x2": runs["cpu_x2"]}) == {}
    cores = len(os.sched_getaffinity(0))
    assert core_counts([1, cores + 1]) == sorted({1, cores}) and core_counts([cores + 5]) == [cores]
