"""The prefetch policy (`prediction/prefetch.py`) at its edges: a repeated wrong
prediction whose score equals the threshold, the oracle's first correct candidate, `sweep` with K = 2, the
one-outcome-per-request check and the input checks. Every expected figure is worked out by hand."""

from __future__ import annotations

import math

import polars as pl
import pytest

from specbench.errors import DataError
from specbench.prediction.prefetch import multi_prefetch, oracle_gain_ms, oracle_rate, summarize, sweep

pytestmark = pytest.mark.unit


def tables(rows: list[tuple[str, int, float, str, str, bool]], requests: dict[str, float]
           ) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(predictions, requests) from rows (request, partial_index, time_ms, partial, prediction, correct)."""
    pred = pl.DataFrame({
        "request_id": [r[0] for r in rows],
        "partial_index": pl.Series([r[1] for r in rows], dtype=pl.Int32),
        "partial_time_ms": pl.Series([r[2] for r in rows], dtype=pl.Float64),
        "prediction_words": pl.Series([r[4].split() for r in rows], dtype=pl.List(pl.String)),
        "added_words": pl.Series([len(r[4].split()) - len(r[3].split()) for r in rows], dtype=pl.Int32),
        "source": ["lm"] * len(rows),
        "lm_log_prob": [-1.0] * len(rows),
        "correct": pl.Series([r[5] for r in rows], dtype=pl.Boolean),
    })
    req = pl.DataFrame({"request_id": list(requests), "end_of_speech_ms": list(requests.values())})
    return pred, req


# "play rock" (wrong) is the best candidate at partials 0 and 1, the right "play the news" at partial 2; every
# score is exactly the threshold 0.5, so every partial passes.
REPEAT = [("a", 0, 120.0, "play", "play rock", False), ("a", 1, 240.0, "play", "play rock", False),
          ("a", 2, 360.0, "play the", "play the news", True)]


def test_an_earlier_attempt_whose_score_equals_the_threshold_still_blocks_a_repeat() -> None:
    """K = 2: attempt 1 is "play rock" at partial 0; partial 1 repeats its words and is no new attempt even
    though the earlier score is exactly the threshold; attempt 2 is the right one at partial 2."""
    pred, req = tables(REPEAT, {"a": 1000.0})
    got = multi_prefetch([0.5, 0.5, 0.5], pred, req, [0.5], max_attempts=2).row(0, named=True)
    assert (got["outcome"], got["attempts"], got["failed_attempts"]) == ("success", 2, 1)
    assert (got["partial_index"], got["gain_ms"], got["gain_words"]) == (2, 1000.0 - 360.0, 1)


def test_sweep_with_two_attempts_is_the_two_attempt_policy() -> None:
    """The same request: one attempt fails (1 failed prefetch), two succeed after one discarded response."""
    pred, req = tables(REPEAT, {"a": 1000.0, "b": 800.0})  # b: no prediction, outcome none
    one = sweep([0.5] * 3, pred, req, [0.5], max_attempts=1).row(0, named=True)
    two = sweep([0.5] * 3, pred, req, [0.5], max_attempts=2).row(0, named=True)
    assert (one["success"], one["failure"], one["none"], one["failed_attempts"]) == (0, 1, 1, 1)
    assert (two["success"], two["failure"], two["none"], two["failed_attempts"]) == (1, 0, 1, 1)
    assert two["success_rate"] == 0.5 and two["failed_rate"] == 0.5
    assert two["gain_ms_success"] == 640.0 and two["gain_ms_all"] == 320.0


def test_oracle_gain_is_that_of_the_earliest_correct_candidate() -> None:
    """Two correct candidates that add words, listed latest first: the oracle takes partial 0's (ΔT 880 ms),
    not partial 1's (760 ms)."""
    rows = [("a", 1, 240.0, "set an", "set an alarm", True), ("a", 0, 120.0, "set", "set an alarm", True),
            ("b", 0, 120.0, "play", "play rock", False)]
    pred, req = tables(rows, {"a": 1000.0, "b": 700.0})
    assert oracle_rate(pred, req) == 0.5
    assert oracle_gain_ms(pred, req) == 880.0
    numbered = {k: t.with_columns(pl.col("request_id").replace_strict({"a": 1, "b": 2})) for k, t in
                (("pred", pred), ("req", req))}  # integer request ids, as sweep takes them
    assert (oracle_rate(numbered["pred"], numbered["req"]), oracle_gain_ms(numbered["pred"], numbered["req"])) == (
        0.5, 880.0)


def test_summarize_refuses_an_outcome_table_that_counts_a_request_nowhere() -> None:
    pred, req = tables(REPEAT, {"a": 1000.0})
    outcomes = multi_prefetch([0.5] * 3, pred, req, [0.5], max_attempts=2)
    assert summarize(outcomes)["success"].to_list() == [1]
    with pytest.raises(AssertionError, match="one outcome"):
        summarize(outcomes.with_columns(pl.lit("prefetched").alias("outcome")))


def test_bad_inputs_are_refused_with_the_column_named() -> None:
    pred, req = tables(REPEAT, {"a": 1000.0})
    with pytest.raises(DataError, match="end_of_speech_ms"):
        sweep([0.5] * 3, pred, req.with_columns(pl.lit(math.inf).alias("end_of_speech_ms")), [0.5])
    with pytest.raises(DataError, match="'correct'.*null"):
        sweep([0.5] * 3, pred.with_columns(pl.lit(None, dtype=pl.Boolean).alias("correct")), req, [0.5])
    with pytest.raises(DataError, match="lm_log_prob"):
        sweep([0.5] * 3, pred.with_columns(pl.lit(math.nan).alias("lm_log_prob")), req, [0.5])
    with pytest.raises(DataError, match="empty"):
        sweep([], pred.clear(), req.clear(), [0.5])
