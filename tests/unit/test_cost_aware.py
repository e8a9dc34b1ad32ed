"""The cost-aware prefetch policy: the speaking-rate fit, the expected benefit, and its decisions checked
by hand on a small table."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from specbench.prediction.cost_aware import expected_benefit, ms_per_added_word
from specbench.prediction.prefetch import first_prefetch

pytestmark = pytest.mark.unit


def tables() -> tuple[pl.DataFrame, pl.DataFrame]:
    requests = pl.DataFrame({"request_id": ["a", "b"], "end_of_speech_ms": [1000.0, 2000.0]})
    predictions = pl.DataFrame({
        "request_id": ["a", "a", "b", "b", "b"],
        "partial_index": [0, 1, 0, 0, 1],
        "partial_time_ms": [200, 600, 400, 400, 1000],
        "added_words": [4, 1, 2, 6, 3],
        "correct": [True, False, False, True, True],
        "prediction_words": [["x"], ["y"], ["z"], ["w"], ["w"]],
        "source": ["lm"] * 5,
        "lm_log_prob": [-1.0] * 5,
    })
    return requests, predictions


def test_ms_per_added_word_is_the_least_squares_ratio() -> None:
    requests, predictions = tables()
    # correct rows: a (4 words, 800 ms), b0 (6 words, 1600 ms), b1 (3 words, 1000 ms)
    expected = (4 * 800 + 6 * 1600 + 3 * 1000) / (16 + 36 + 9)
    assert ms_per_added_word(predictions, requests) == pytest.approx(expected)
    with pytest.raises(ValueError, match="no correct prediction"):
        ms_per_added_word(predictions.with_columns(correct=pl.lit(False)), requests)


def test_expected_benefit_and_decisions_by_hand() -> None:
    requests, predictions = tables()
    p = np.array([0.5, 0.9, 0.8, 0.3, -np.inf])
    benefit = expected_benefit(p, predictions, 100.0)
    assert benefit.tolist() == [200.0, 90.0, 160.0, 180.0, -np.inf]
    out = first_prefetch(benefit, predictions, requests, [100.0, 190.0]).sort(["threshold", "request_id"])
    # lambda 100: a prefetches its first partial (200 > 100, correct); b's first partial's best is the
    # 6-word prediction (180 > 160), correct. lambda 190: a still (200); b never (180, then -inf).
    assert out["outcome"].to_list() == ["success", "success", "success", "none"]
