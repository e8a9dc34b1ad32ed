"""WER: properties (identity, symmetry of the distance, bounds) and worked examples."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specbench.metrics.wer import edit_distance, error_rate, wer

pytestmark = pytest.mark.unit
words = st.lists(st.sampled_from(["a", "b", "c", "d"]), max_size=12)


@given(words)
def test_wer_of_identity_is_zero(x: list[str]) -> None:
    assert wer([x], [x]) == 0.0


@given(words, words)
def test_distance_is_symmetric_and_bounded(x: list[str], y: list[str]) -> None:
    d = edit_distance(x, y)
    assert d == edit_distance(y, x)
    assert abs(len(x) - len(y)) <= d <= max(len(x), len(y))


@given(words, words, words)
def test_triangle_inequality(x: list[str], y: list[str], z: list[str]) -> None:
    assert edit_distance(x, z) <= edit_distance(x, y) + edit_distance(y, z)


def test_worked_examples() -> None:
    assert edit_distance("kitten", "sitting") == 3
    assert wer([["set", "an", "alarm"]], [["set", "alarm", "now"]]) == pytest.approx(2 / 3)
    assert error_rate([(["a"], ["b"]), (["a", "b", "c"], ["a", "b", "c"])]) == pytest.approx(1 / 4)
    with pytest.raises(ValueError):
        wer([["a"]], [])
