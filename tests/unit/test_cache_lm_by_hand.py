"""The cache model's weight by hand: a weight whose devel figure is undefined (NaN: no threshold reaches the
failed budget) is never chosen over one with a devel figure, and when every figure is undefined the smallest
weight is."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest

from specbench.prediction.cache_lm import choose_weight

pytestmark = pytest.mark.unit


def _devel() -> pl.DataFrame:
    return pl.DataFrame({"request_id": ["r1", "r1"], "partial_index": [0, 0], "lm_log_prob": [-1.0, -2.0],
                         "personal_log_freq": [0.0, -10.0], "in_personal": [True, False]})


def test_an_undefined_devel_figure_never_wins() -> None:
    figures = {0.0: math.nan, 0.5: 0.20, 1.0: math.nan}

    def success(scores: np.ndarray) -> float:
        # the first row (cache share 1, LM probability e^-1) scores log(w + (1 - w) e^-1): it names the weight
        return figures[round((math.exp(scores[0]) - math.exp(-1.0)) / (1.0 - math.exp(-1.0)), 6)]

    weight, rows = choose_weight([1.0, 0.5, 0.0], success, _devel())
    assert weight == 0.5 and [r["weight"] for r in rows] == [0.0, 0.5, 1.0]
    assert choose_weight([1.0, 0.5], lambda _: math.nan, _devel())[0] == 0.5
