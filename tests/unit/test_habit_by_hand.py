"""The habit sweep by hand: the calibrated share meets the target on the piecewise-linear devel oracle curve
whatever its shape, every sweep point is evaluated at its own routine share in increasing order, a point's
row reads the figures at the devel-chosen thresholds and the devel oracle it is given, and the share a
confidence model was trained at is read from its card."""

from __future__ import annotations

import dataclasses
from itertools import pairwise
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from specbench.config import HabitSection, PredictiveAsrConfig
from specbench.experiments.predictive_asr.habit import (
    CURVES,
    POINT_KEYS,
    calibrate,
    confidence_share,
    point_row,
    sweep_routine_shares,
)

pytestmark = pytest.mark.unit


def rows(points: list[tuple[float, float]]) -> list[dict[str, float]]:
    return [{"routine_share": s, "devel_oracle_rate": o} for s, o in points]


def interpolated(points: list[tuple[float, float]], share: float) -> float:
    """The devel oracle at `share` on the straight lines between the sorted sweep points."""
    shares, oracles = zip(*sorted(points))
    return float(np.interp(share, shares, oracles))


def test_a_falling_oracle_curve_is_interpolated_too() -> None:
    """0.8 at share 0.2 and 0.4 at share 0.9: the oracle 0.6 lies halfway, at share 0.55."""
    assert calibrate(rows([(0.2, 0.8), (0.9, 0.4)]), 0.6) == pytest.approx(0.55)
    assert calibrate(rows([(0.2, 0.9), (0.5, 0.7), (0.9, 0.3)]), 0.5) == pytest.approx(0.7)
    # a share off the 0.01 grid at the edge: rounding may not leave the swept pair (0.125 would round to 0.12)
    assert calibrate(rows([(0.125, 0.5), (0.9, 0.6)]), 0.5) == 0.125


@settings(max_examples=150, deadline=None)
@given(oracles=st.lists(st.integers(0, 100), min_size=2, max_size=6), where=st.floats(0.0, 1.0))
@example(oracles=[6, 57], where=1.0)  # 0.06 + 0.51 is 0.5700000000000001: the top of the range, not past it
def test_the_calibrated_share_meets_the_target_on_any_curve(oracles: list[int], where: float) -> None:
    """On sweeps of any shape (rising, falling, bumpy, flat), the curve through the points at the returned
    share is the target, up to the rounding of the share to 0.01."""
    shares = [0.1 + 0.15 * i for i in range(len(oracles))]
    points = [(s, o / 100) for s, o in zip(shares, oracles)]
    lo, hi = min(o for _, o in points), max(o for _, o in points)
    target = lo + where * (hi - lo)
    share = calibrate(rows(points[::-1]), target)
    assert shares[0] - 1e-9 <= share <= shares[-1] + 1e-9
    steepest = max(abs(b - a) / 0.15 for (_, a), (_, b) in pairwise(points))
    assert abs(interpolated(points, share) - target) <= steepest * 0.005 + 1e-9


def test_each_point_is_simulated_at_its_own_share_in_increasing_order() -> None:
    config = PredictiveAsrConfig(habit=HabitSection(routine_shares=(0.8, 0.2, 0.5)))
    seen: list[tuple[Any, Any]] = []

    def evaluate_at(usage: Any, asr: Any) -> dict[str, float]:
        seen.append((usage, asr))
        return {"share_seen": usage.routine_share}

    got = sweep_routine_shares(config, evaluate_at)
    assert got == [{"routine_share": s, "share_seen": s} for s in (0.2, 0.5, 0.8)]
    # nothing but the routine share changes, and the [asr] section is the job's own
    assert [u for u, _ in seen] == [dataclasses.replace(config.usage, routine_share=s) for s in (0.2, 0.5, 0.8)]
    assert all(a == config.asr for _, a in seen)


def _metrics() -> dict[str, float]:
    """A point's headline metrics where the test curve read at 10% failed differs from the figures at the
    devel-chosen threshold, and the test oracle differs from the devel one."""
    m = {"prefetch.repeat_rate": 0.47, "prefetch.requests": 900.0, "prefetch.asr_wer": 0.083,
         "prefetch.asr.repeat_final_differs_share": 0.3}
    for i, source in enumerate(("lm", "personal", "lm_personal")):
        m[f"prefetch.{source}.oracle_rate"] = 0.1 * (i + 1)
        m[f"prefetch.{source}.oracle_gain_ms"] = 100.0 * (i + 1)
    for j, name in enumerate(CURVES.values()):
        for k, key in enumerate(POINT_KEYS):
            m[f"prefetch.{name}.{key}_at_fail10"] = 1000.0 + 10 * j + k
            m[f"prefetch.{name}.{key}_curve_at_fail10"] = -1.0
    return m


def test_a_point_reads_the_devel_thresholds_figures_and_the_devel_oracle() -> None:
    row = point_row(_metrics(), devel_oracle=0.571)
    assert row["devel_oracle_rate"] == 0.571  # the devel users' oracle, not the test users' (0.3)
    assert row["both.oracle_rate"] == pytest.approx(0.3) and row["lm.oracle_rate"] == pytest.approx(0.1)
    assert row["personal.oracle_gain_ms"] == 200.0 and row["cache_lm.oracle_gain_ms"] == 300.0
    for j, label in enumerate(CURVES):
        assert [row[f"{label}.{key}"] for key in POINT_KEYS] == [1000.0 + 10 * j + k for k in range(3)]
    assert (row["repeat_rate"], row["requests"], row["asr_wer"]) == (0.47, 900.0, 0.083)


def test_the_share_a_confidence_model_was_trained_at() -> None:
    card = SimpleNamespace(metadata={"train_config": {"usage": {"routine_share": 0.5}}})
    assert confidence_share(card) == 0.5
    assert confidence_share(SimpleNamespace(metadata={"train_config": {"usage": {}}})) is None
    assert confidence_share(SimpleNamespace(metadata={})) is None
