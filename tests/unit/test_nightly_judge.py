"""The nightly's verdict on one metric (`nightly.judge`): each bound of a `[[tolerance]]` rule holds at its
edge and fails just past it, a value that is not finite fails whatever the rule, and without a finite
baseline only the absolute bounds are judged. Values are binary fractions, so the edges are exact."""

from __future__ import annotations

import math

import pytest

from specbench.config import ToleranceRule
from specbench.experiments.nightly import judge

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("rule, at_edge, past_edge, why", [
    (ToleranceRule("m", min=0.5), 0.5, 0.4375, "below the minimum"),
    (ToleranceRule("m", max=0.5), 0.5, 0.5625, "above the maximum"),
    (ToleranceRule("m", max_drop=0.25), 0.75, 0.6875, "fell by"),  # baseline 1.0
    (ToleranceRule("m", max_rise=0.25), 1.25, 1.3125, "rose by"),
])
def test_each_bound_holds_at_its_edge_and_fails_past_it(rule: ToleranceRule, at_edge: float, past_edge: float,
                                                        why: str) -> None:
    assert judge(rule, at_edge, 1.0) is None
    assert why in judge(rule, past_edge, 1.0)


def test_a_value_that_is_not_finite_fails_whatever_the_rule() -> None:
    for new in (math.nan, math.inf, -math.inf):
        assert "not finite" in judge(ToleranceRule("m", max_drop=10.0), new, 1.0)
        assert "not finite" in judge(ToleranceRule("m", max=1e9), new, None)


def test_without_a_finite_baseline_only_the_absolute_bounds_are_judged() -> None:
    relative = ToleranceRule("m", max_drop=0.0, max_rise=0.0)
    for baseline in (None, math.nan, math.inf):
        assert judge(relative, 5.0, baseline) is None
        assert "above the maximum" in judge(ToleranceRule("m", max=1.0, max_drop=0.0), 2.0, baseline)
    assert "fell by" in judge(relative, 0.5, 1.0) and "rose by" in judge(relative, 1.5, 1.0)


@pytest.mark.parametrize("baseline, new, rule", [
    (0.05, 0.02, ToleranceRule("m", max_drop=0.03)),  # 0.05 - 0.02 computes as 0.030000000000000002
    (0.06, 0.07, ToleranceRule("m", max_rise=0.01)),  # 0.07 - 0.06 computes as 0.010000000000000009
    (0.7, 0.6, ToleranceRule("m", max_drop=0.1)),
])
def test_a_decimal_move_exactly_at_the_tolerance_passes(baseline: float, new: float,
                                                        rule: ToleranceRule) -> None:
    assert judge(rule, new, baseline) is None
    past = new - 1e-6 if rule.max_drop is not None else new + 1e-6
    assert judge(rule, past, baseline) is not None


def test_a_zero_tolerance_still_flags_a_change_of_one_in_a_large_count() -> None:
    assert "rose by" in judge(ToleranceRule("m", max_drop=0.0, max_rise=0.0), 16_514_211.0, 16_514_210.0)
    assert "fell by" in judge(ToleranceRule("m", max_drop=0.0, max_rise=0.0), 2e-12, 3e-12)


def test_a_regression_gives_its_move_to_the_digits_that_show_it_past_the_allowance() -> None:
    assert judge(ToleranceRule("m", max_rise=0.5), 300.6238, 300.1236).startswith(
        "rose by 0.5002 from 300.124 to 300.624 (allowed")
    assert judge(ToleranceRule("m", max_drop=0.5), 1.0, 1.5000001).startswith("fell by 0.5000001 from")


def test_an_absolute_bound_allows_float_rounding_and_a_failure_never_reads_as_equal_numbers() -> None:
    """0.1 + 0.2 is 0.30000000000000004: at the maximum 0.3, not above it, as for the relative bounds; where a
    value is past a bound or its baseline by less than six digits show, more digits are printed."""
    assert judge(ToleranceRule("m", max=0.3), 0.1 + 0.2, None) is None
    assert judge(ToleranceRule("m", min=0.3), 0.29999999999999993, None) is None
    assert judge(ToleranceRule("m", min=1.0), 0.9999996, None) == "0.9999996 is below the minimum 1"
    assert judge(ToleranceRule("m", max_drop=0.0), 31.2345649, 31.2345651) == (
        "fell by 2e-07 from 31.23457 to 31.23456 (allowed drop 0)")
