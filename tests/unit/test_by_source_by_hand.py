"""Per-source offsets by hand: an offset that is not a finite number is refused rather than turning every
LM-only candidate's score into infinity or NaN."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest

from specbench.errors import ConfigError
from specbench.prediction.by_source import offset_scores

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("offset", [math.inf, math.nan])
def test_an_offset_that_is_not_finite_is_refused(offset: float) -> None:
    preds = pl.DataFrame({"in_lm": [True, True, False], "in_personal": [False, True, True]})
    scores = np.array([0.2, 0.5, 0.9])
    with pytest.raises(ConfigError, match="finite"):
        offset_scores(scores, preds, offset)
    assert offset_scores(scores, preds, 0.3).tolist() == pytest.approx([0.5, 0.5, 0.9])
