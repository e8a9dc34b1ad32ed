"""VTLN by hand: warp grids may start or end at 1; confidences equal to 9 decimals tie (nearest 1 wins); a
factor under which no phone wins ranks last."""

from __future__ import annotations

import numpy as np
import pytest

from specbench.acoustic.vtln import NoPhoneFrames, choose_warp, warp_grid

pytestmark = pytest.mark.unit


def test_grid_may_start_or_end_at_the_identity() -> None:
    assert warp_grid(1.0, 1.1, 0.05) == (1.0, 1.05, 1.1)
    assert warp_grid(0.9, 1.0, 0.05) == (0.9, 0.95, 1.0)


def test_confidences_equal_to_nine_decimals_tie() -> None:
    def score(feats_list, factor):  # one phone frame, log-posterior log(0.5), 1e-12 higher at 1.1
        return [np.array([[-9.0, np.log(0.5) + (1e-12 if factor == 1.1 else 0.0)]])]

    choice = choose_warp(score, [np.zeros((4, 80))], (0.9, 1.0, 1.1))
    assert choice.factor == 1.0 and choice.confidence[1.1] > choice.confidence[1.0]


def test_a_factor_under_which_no_phone_wins_ranks_last_instead_of_ending_the_search() -> None:
    """Short noisy adaptation audio: under warp 0.9 the blank wins every frame, under 1.0 and 1.1 a phone
    wins one frame (log 0.6 and log 0.8). The search keeps 1.1; only when no factor hears a phone is there
    nothing to choose by."""
    def score(feats_list, factor):
        phone = {0.9: 0.0, 1.0: 0.6, 1.1: 0.8}[factor]
        return [np.log(np.array([[0.9, 0.1], [1 - phone, phone] if phone else [0.9, 0.1]]))]

    choice = choose_warp(score, [np.zeros((8, 80))], (0.9, 1.0, 1.1))
    assert choice.factor == 1.1 and choice.confidence[0.9] == -np.inf
    assert choice.confidence[1.0] == pytest.approx(np.log(0.6))
    with pytest.raises(NoPhoneFrames, match="under any warp from 0.9 to 1.1"):
        choose_warp(lambda fl, f: [np.log(np.array([[0.9, 0.1]]))], [np.zeros((4, 80))], (0.9, 1.0, 1.1))
