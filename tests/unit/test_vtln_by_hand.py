"""VTLN by hand: warp grids may start or end at 1; confidences equal to 9 decimals tie (nearest 1 wins)."""

from __future__ import annotations

import numpy as np
import pytest

from specbench.acoustic.vtln import choose_warp, warp_grid

pytestmark = pytest.mark.unit


def test_grid_may_start_or_end_at_the_identity() -> None:
    assert warp_grid(1.0, 1.1, 0.05) == (1.0, 1.05, 1.1)
    assert warp_grid(0.9, 1.0, 0.05) == (0.9, 0.95, 1.0)


def test_confidences_equal_to_nine_decimals_tie() -> None:
    def score(feats_list, factor):  # one phone frame, log-posterior log(0.5), 1e-12 higher at 1.1
        return [np.array([[-9.0, np.log(0.5) + (1e-12 if factor == 1.1 else 0.0)]])]

    choice = choose_warp(score, [np.zeros((4, 80))], (0.9, 1.0, 1.1))
    assert choice.factor == 1.0 and choice.confidence[1.1] > choice.confidence[1.0]
