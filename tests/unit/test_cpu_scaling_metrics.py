"""The decoder benchmark's scaling efficiency: throughput on n cores over n times that on one, per round of
alternating core counts, and its median."""

from __future__ import annotations

import pytest

from specbench.benchmarks.decoder.agreement import Timed
from specbench.benchmarks.decoder.cpu_scaling import scaling_metrics


def _runs(seconds: dict[str, list[float]]) -> dict[str, Timed]:
    return {key: Timed(values[0], [], {}) for key, values in seconds.items()}


def test_efficiency_is_the_median_of_the_rounds() -> None:
    seconds = {"cpu_x1": [4.0, 4.0, 6.0], "cpu_x2": [2.0, 2.5, 3.0]}
    out = scaling_metrics(_runs(seconds), seconds)
    assert out["cpu_x2_efficiency_rounds"] == pytest.approx([1.0, 0.8, 1.0])
    assert out["cpu_x2_efficiency"] == out["decoder.cpu_scaling_efficiency"] == pytest.approx(1.0)
    assert out["cpu_x1_efficiency"] == 1.0 and out["decoder.cpu_cores"] == 2.0


def test_one_round_without_the_per_round_seconds() -> None:
    out = scaling_metrics(_runs({"cpu_x1": [3.0], "cpu_x4": [1.0]}))
    assert out["decoder.cpu_scaling_efficiency"] == pytest.approx(0.75) and out["decoder.cpu_cores"] == 4.0
    assert "cpu_x4_efficiency_rounds" not in out
    assert scaling_metrics({}) == {}
