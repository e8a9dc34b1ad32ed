"""Per-source offsets by hand: an offset that is not a finite number is refused rather than turning every
LM-only candidate's score into infinity or NaN, and an offset whose threshold sweep never reaches the failed
budget (NaN devel success) loses even to an offset that reaches it with no success at all."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest

from specbench.errors import ConfigError
from specbench.prediction.by_source import choose_offset, offset_scores

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("offset", [math.inf, math.nan])
def test_an_offset_that_is_not_finite_is_refused(offset: float) -> None:
    preds = pl.DataFrame({"in_lm": [True, True, False], "in_personal": [False, True, True]})
    scores = np.array([0.2, 0.5, 0.9])
    with pytest.raises(ConfigError, match="finite"):
        offset_scores(scores, preds, offset)
    assert offset_scores(scores, preds, 0.3).tolist() == pytest.approx([0.5, 0.5, 0.9])


def test_an_offset_that_reaches_the_budget_with_zero_success_beats_one_that_never_reaches_it() -> None:
    figures = {0.0: math.nan, 0.2: 0.0, 0.4: math.nan}
    best, rows = choose_offset([0.4, 0.2, 0.0], figures.__getitem__)
    assert best == 0.2  # 0.0 is a figure; NaN is none, though 0.0 is the smaller offset
    assert [r["offset"] for r in rows] == [0.0, 0.2, 0.4] and math.isnan(rows[0]["devel_success"])
