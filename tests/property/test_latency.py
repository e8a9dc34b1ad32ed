"""Latency metrics: the defining properties, and worked examples computed by hand from the published
definitions and from SimulEval 1.1's scorers (transcribed below as reference loops; simuleval itself pins
an old tqdm, so it is not a dependency)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specbench.metrics.latency import (
    average_lagging, average_proportion, consecutive_wait, differentiable_average_lagging,
    length_adaptive_average_lagging,
)

pytestmark = pytest.mark.unit


def simuleval_al(delays: list[int], source_length: int, target_length: int) -> float:
    """SimulEval's ALScorer.compute loop (target_length: the reference length with use_ref_len=True)."""
    if delays[0] > source_length:
        return delays[0]
    al, gamma, tau = 0.0, target_length / source_length, 0
    for t_minus_1, d in enumerate(delays):
        if d > source_length:
            break
        al += d - t_minus_1 / gamma
        tau = t_minus_1 + 1
        if d >= source_length:
            break
    return al / tau


def simuleval_dal(delays: list[int], source_length: int) -> float:
    """SimulEval's DALScorer.compute loop."""
    dal, target_length = 0.0, len(delays)
    gamma, g_prime_last = target_length / source_length, 0.0
    for i_minus_1, g in enumerate(delays):
        g_prime = g if i_minus_1 == 0 else max(g, g_prime_last + 1 / gamma)
        dal += g_prime - i_minus_1 / gamma
        g_prime_last = g_prime
    return dal / target_length


def wait_k_delays(k: int, source_len: int, target_len: int) -> list[int]:
    return [min(k + i, source_len) for i in range(target_len)]


@given(st.integers(1, 30), st.integers(1, 30))
def test_wait_k_with_equal_lengths_lags_k(n: int, k: int) -> None:
    k = min(k, n)
    delays = wait_k_delays(k, n, n)
    assert average_lagging(delays, n) == pytest.approx(k)
    assert differentiable_average_lagging(delays, n) == pytest.approx(k)
    assert length_adaptive_average_lagging(delays, n, n) == pytest.approx(k)


@given(st.integers(1, 30), st.integers(1, 30))
def test_reading_everything_first_lags_the_source_length(n: int, m: int) -> None:
    delays = [n] * m
    assert average_lagging(delays, n) == pytest.approx(n)
    assert average_proportion(delays, n) == pytest.approx(1.0)
    assert consecutive_wait(delays, n) == pytest.approx(n)


@given(st.integers(1, 20), st.lists(st.integers(0, 20), min_size=1, max_size=25), st.integers(1, 30))
def test_matches_simuleval_loops(n: int, raw: list[int], ref: int) -> None:
    delays = sorted(min(max(d, 1), n) for d in raw)
    assert average_lagging(delays, n, ref) == pytest.approx(simuleval_al(delays, n, ref))
    assert average_lagging(delays, n) == pytest.approx(simuleval_al(delays, n, len(delays)))
    assert differentiable_average_lagging(delays, n) == pytest.approx(simuleval_dal(delays, n))
    assert length_adaptive_average_lagging(delays, n, ref) == pytest.approx(
        simuleval_al(delays, n, max(len(delays), ref)))


def test_worked_example() -> None:
    # |x| = 4, |y| = 6: delays 2 2 3 4 4 4. r = 1.5.
    d = [2, 2, 3, 4, 4, 4]
    # AL: tau = 4 (first delay reaching 4); (2 - 0) + (2 - 2/3) + (3 - 4/3) + (4 - 2) = 7 -> 7/4
    assert average_lagging(d, 4) == pytest.approx(7 / 4)
    # SimulEval with a 5-token reference: r = 1.25: (2) + (2 - .8) + (3 - 1.6) + (4 - 2.4) = 6.2 -> 1.55
    assert average_lagging(d, 4, 5) == pytest.approx(6.2 / 4)
    # LAAL with the same reference: max(6, 5) = 6 -> the STACL value
    assert length_adaptive_average_lagging(d, 4, 5) == pytest.approx(7 / 4)
    # DAL: gamma 1.5, g' = 2, 2.667, 3.333, 4, 4.667, 5.333; minus (i-1)/gamma = 0 .667 1.333 2 2.667 3.333
    assert differentiable_average_lagging(d, 4) == pytest.approx((2 + 2 + 2 + 2 + 2 + 2) / 6)
    # AP: 19 / (4 * 6); SimulEval divides by the reference length: 19 / (4 * 5)
    assert average_proportion(d, 4) == pytest.approx(19 / 24)
    assert average_proportion(d, 4, 5) == pytest.approx(19 / 20)
    # CW: reads of 2, 1, 1 before writes -> 4 / 3
    assert consecutive_wait(d, 4) == pytest.approx(4 / 3)


def test_empty_hypothesis_and_bad_delays() -> None:
    assert average_lagging([], 5) == 0.0 and consecutive_wait([], 5) == 0.0
    with pytest.raises(ValueError, match="non-decreasing"):
        average_lagging([3, 2], 5)
    with pytest.raises(ValueError, match="source_len"):
        average_lagging([6], 5)
    with pytest.raises(ValueError, match="positive"):
        average_proportion([1], 0)
