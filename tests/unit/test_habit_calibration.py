"""The habit sweep's calibration: the routine share whose devel oracle meets the target, by interpolation
between the sweep's points, and a clear error naming the nearest reachable oracle otherwise."""

from __future__ import annotations

import pytest

from specbench.config import AsrSection, HabitSection, PredictiveAsrConfig
from specbench.errors import DataError
from specbench.experiments.predictive_asr.habit import calibrate, knob_users, knob_variants

pytestmark = pytest.mark.unit


def rows(points: list[tuple[float, float]]) -> list[dict[str, float]]:
    return [{"routine_share": s, "devel_oracle_rate": o} for s, o in points]


def test_interpolates_between_the_bracketing_points() -> None:
    sweep = rows([(0.9, 0.85), (0.2, 0.35), (0.5, 0.55), (0.65, 0.65)])  # any order
    assert calibrate(sweep, 0.57) == pytest.approx(0.53)  # 0.5 + 0.02 / 0.10 * 0.15
    assert calibrate(sweep, 0.55) == 0.5
    assert calibrate(sweep, 0.35) == 0.2 and calibrate(sweep, 0.85) == 0.9


def test_brute_force_on_a_fine_grid() -> None:
    """On a linear oracle curve the interpolated share gives the target back (to the 0.01 rounding)."""
    sweep = rows([(s / 10, 0.3 + 0.6 * s / 10) for s in range(0, 11, 2)])
    for target in (0.31, 0.45, 0.57, 0.8, 0.89):
        share = calibrate(sweep, target)
        assert abs(0.3 + 0.6 * share - target) <= 0.6 * 0.005 + 1e-9


def test_an_unreachable_target_names_the_nearest_reachable_value() -> None:
    sweep = rows([(0.2, 0.40), (0.9, 0.80)])
    with pytest.raises(DataError, match=r"target_oracle = 0.9.*nearest: 0.800, at routine share 0.9"):
        calibrate(sweep, 0.9)
    with pytest.raises(DataError, match=r"nearest: 0.400, at routine share 0.2"):
        calibrate(sweep, 0.1)


def test_knob_variants_change_one_setting_each() -> None:
    config = PredictiveAsrConfig(habit=HabitSection(rate_ranges=((0.95, 1.05),), snr_db_ranges=((5.0, 25.0),),
                                                    pitch_cents=(20.0, 200.0)))
    variants = knob_variants(config)
    assert [(k, s) for k, s, _ in variants] == [("reference", "headline"), ("rate_range", "0.95-1.05"),
                                                ("snr_db_range", "5-25"), ("pitch_cents", "20"), ("pitch_cents", "200")]
    base = AsrSection()
    assert variants[0][2] == base
    for knob, _, asr in variants[1:]:
        changed = [f for f in ("rate_range", "snr_db_range", "pitch_cents") if getattr(asr, f) != getattr(base, f)]
        assert changed == [knob]


def test_the_sweep_needs_two_shares_and_ordered_ranges() -> None:
    with pytest.raises(ValueError, match="routine_shares"):
        HabitSection(routine_shares=(0.5, 0.5))
    with pytest.raises(ValueError, match="snr_db_ranges"):
        HabitSection(snr_db_ranges=((30.0, 10.0),))


def test_knob_users_take_the_smaller_population() -> None:
    assert knob_users(0, 0) == 0 and knob_users(0, 12) == 12 and knob_users(8, 0) == 8
    assert knob_users(8, 12) == 8 and knob_users(61, 12) == 12
