"""Latency metrics at their edges, as the module's docstring states them: an empty hypothesis has latency 0
under every metric, and every metric rejects delays outside [0, |x|] or decreasing."""

from __future__ import annotations

import pytest

from specbench.metrics.latency import (
    average_lagging,
    average_proportion,
    consecutive_wait,
    differentiable_average_lagging,
    length_adaptive_average_lagging,
)

pytestmark = pytest.mark.unit

METRICS = [
    pytest.param(average_lagging, id="al"),
    pytest.param(lambda d, n: length_adaptive_average_lagging(d, n, 3), id="laal"),
    pytest.param(differentiable_average_lagging, id="dal"),
    pytest.param(average_proportion, id="ap"),
    pytest.param(lambda d, n: average_proportion(d, n, 3), id="ap_ref"),
    pytest.param(consecutive_wait, id="cw"),
]


@pytest.mark.parametrize("metric", METRICS)
def test_an_empty_hypothesis_has_latency_zero(metric) -> None:
    assert metric([], 5) == 0.0


@pytest.mark.parametrize("metric", METRICS)
@pytest.mark.parametrize("delays", [[-1, 2], [2, 5.5], [3, 2], [2, float("nan")], [float("inf")]])
def test_delays_outside_the_source_or_decreasing_are_an_error(metric, delays: list[float]) -> None:
    with pytest.raises(ValueError, match="non-decreasing and within"):
        metric(delays, 5)


@pytest.mark.parametrize("metric", [average_lagging, average_proportion])
def test_a_reference_length_of_zero_is_an_error_not_a_division_by_zero(metric) -> None:
    with pytest.raises(ValueError, match="target_len must be positive"):
        metric([1, 2], 2, 0)
    assert metric([], 2, 0) == 0.0  # an empty hypothesis still has latency 0
