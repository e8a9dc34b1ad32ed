"""Prefetch policy and its metrics for predictive ASR: act on at most one (or up to K) predictions per
utterance when a confidence score passes a threshold, and count successes, failures and the time gained.

Inputs are two tables (pyarrow `Table` or polars `DataFrame`):

- predictions, one row per prediction: `request_id: str`, `partial_index: int` (0, 1, 2.. in time order
  within a request), `partial_time_ms: float` (time of the last frame used for the partial, milliseconds),
  `prediction_words: list<str>` (the whole predicted utterance), `added_words: int` (words added beyond the
  partial), `source: str` ("lm", "personal" or "both": from the LM's n-best, the user's history, or both),
  `lm_log_prob: float`, `correct: bool` (prediction equals the final hypothesis). Other columns are ignored.
- requests, one row per request: `request_id: str` (unique), `end_of_speech_ms: float`. A request without
  any prediction still counts (outcome "none").

Only predictions with `added_words >= 1` are prefetch candidates. At each partial the best candidate is the
one with the highest score; ties go to the higher `lm_log_prob`, then to a candidate in the user's history
(source "personal" or "both"), then to the lexicographically smaller word sequence, then to the earlier table
row. Words are normalized (no spaces inside a word), so word sequences compare as their space-joined text.

Outcome tables (`first_prefetch`, `multi_prefetch`) are polars DataFrames, one row per (threshold, request),
ordered by threshold and then by the requests table's order, with columns `threshold: f64`,
`request_id: str`, `outcome: str` (an `Outcome` value), `attempts: i32` (prefetches made), `failed_attempts:
i32` (wrong prefetches, each one discarded response), `partial_index: i32` and `partial_time_ms: f64` (the
deciding attempt: the successful one, else the last failed one; null for "none"), `gain_ms: f64` (ΔT =
end_of_speech_ms - partial_time_ms, milliseconds, negative when the partial came after the end of speech;
success only, else null) and `gain_words: i32` (added words of the successful prediction; else null).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa

from specbench.errors import ConfigError, DataError

POLICY_COLUMNS = ("request_id", "partial_index", "partial_time_ms", "prediction_words", "added_words",
                  "source", "lm_log_prob", "correct")
REQUEST_COLUMNS = ("request_id", "end_of_speech_ms")
SWEEP_COLUMNS = ("threshold", "requests", "success", "failure", "none", "failed_attempts", "success_rate",
                 "failed_rate", "gain_ms_success", "gain_ms_all", "gain_words_success")


class Outcome(StrEnum):
    """What happened to one request at one threshold."""

    NONE = "none"  # no prediction passed the threshold: no prefetch
    SUCCESS = "success"  # a prefetched prediction matched the final hypothesis
    FAILURE = "failure"  # every prefetch made was wrong


_CODE_NAMES = (Outcome.NONE.value, Outcome.SUCCESS.value, Outcome.FAILURE.value)
_NONE, _SUCCESS, _FAILURE = 0, 1, 2


def as_polars(table: Any, what: str) -> pl.DataFrame:
    """A pyarrow Table or polars DataFrame as a polars DataFrame (no copy where possible)."""
    if isinstance(table, pl.DataFrame):
        return table
    if isinstance(table, pa.Table):
        frame = pl.from_arrow(table)
        assert isinstance(frame, pl.DataFrame)
        return frame
    raise TypeError(f"{what} must be a pyarrow.Table or polars.DataFrame, got {type(table).__name__}")


def require_columns(frame: pl.DataFrame, columns: Sequence[str], what: str) -> None:
    """Raise `DataError` naming the first missing column, or a column holding nulls."""
    for name in columns:
        if name not in frame.columns:
            raise DataError(f"{what} table has no column {name!r} (columns: {', '.join(frame.columns)}). "
                            f"Fix: write the {what} table with the column {name!r}.")
        nulls = frame.get_column(name).null_count()
        if nulls:
            raise DataError(f"{what} table column {name!r} holds {nulls} null value(s). Fix: fill them in "
                            f"or drop those rows when writing the {what} table.")


def validate_thresholds(thresholds: Sequence[float] | np.ndarray) -> tuple[float, ...]:
    """The thresholds as a tuple of floats; `ConfigError` unless non-empty, finite and strictly increasing."""
    try:
        values = tuple(float(t) for t in thresholds)
    except (TypeError, ValueError) as err:
        raise ConfigError(f"thresholds must be a list of numbers, got {thresholds!r}. "
                          "Fix: list numbers such as [0.5, 0.7, 0.9].") from err
    if not values:
        raise ConfigError("thresholds must list at least one value. Fix: list numbers such as [0.5, 0.7, 0.9].")
    for i, value in enumerate(values):
        if not math.isfinite(value):
            raise ConfigError(f"thresholds[{i}] = {value} is not finite. Fix: use finite numbers.")
        if i and value <= values[i - 1]:
            raise ConfigError(f"thresholds must be strictly increasing, but thresholds[{i}] = {value} follows "
                              f"{values[i - 1]}. Fix: sort the thresholds and drop duplicates.")
    return values


@dataclass(frozen=True)
class _Best:
    """The best candidate of every (request, partial) that has one, sorted by request then partial.

    Arrays (B,): `req` int64 request position, `partial_index` int64, `time_ms` float64, `score` float64,
    `correct` bool, `added` int64, `words` str (space-joined), `cummax` float64 (running maximum of `score`
    within the request), `prev_cummax` float64 (the same before this row, -inf at a request's first row),
    `prev_same` float64 (highest score of an earlier row of the request with the same words, else -inf).
    """

    request_ids: list[str]
    end_ms: np.ndarray
    req: np.ndarray
    partial_index: np.ndarray
    time_ms: np.ndarray
    score: np.ndarray
    correct: np.ndarray
    added: np.ndarray
    cummax: np.ndarray
    prev_cummax: np.ndarray
    prev_same: np.ndarray


def requests_frame(requests: Any) -> pl.DataFrame:
    """The requests table checked (its columns, one row per request, finite ends of speech) as `request_id`
    (string), `end_of_speech_ms` (float) and `_req`, the row index; `DataError` naming what is wrong."""
    req = as_polars(requests, "requests")
    require_columns(req, REQUEST_COLUMNS, "requests")
    if req.height == 0:
        raise DataError("requests table is empty. Fix: evaluate at least one request.")
    dup = req.get_column("request_id").is_duplicated()
    if dup.any():
        first = req.get_column("request_id").filter(dup)[0]
        raise DataError(f"requests table lists request_id {first!r} more than once. Fix: one row per request.")
    end = req.get_column("end_of_speech_ms").cast(pl.Float64).to_numpy()
    if not np.isfinite(end).all():
        raise DataError("requests table column 'end_of_speech_ms' holds a non-finite value. "
                        "Fix: give every request its end of speech in milliseconds.")
    return req.select(pl.col("request_id").cast(pl.String),
                      pl.col("end_of_speech_ms").cast(pl.Float64)).with_row_index("_req")


def _check_scores(scores: Any, rows: int) -> np.ndarray:
    values = np.asarray(scores, dtype=np.float64)
    if values.shape != (rows,):
        raise DataError(f"scores has shape {values.shape}, expected ({rows},): one score per predictions row. "
                        "Fix: score the same predictions table that is evaluated.")
    if np.isnan(values).any():
        raise DataError(f"scores hold {int(np.isnan(values).sum())} NaN value(s). "
                        "Fix: check the confidence model's inputs for non-finite features.")
    return values


def check_known_requests(pred: pl.DataFrame, req: pl.DataFrame) -> None:
    """`DataError` naming the first request of `pred` that `req` lacks (both with string `request_id`s)."""
    unknown = pred.select("request_id").join(req.select("request_id"), on="request_id", how="anti")
    if unknown.height:
        raise DataError(f"predictions table names request_id {unknown.get_column('request_id')[0]!r}, which the "
                        "requests table lacks. Fix: list every predicted request in the requests table.")


def _candidates(scores: Any, predictions: Any, req: pl.DataFrame) -> pl.DataFrame:
    """Candidate rows (added_words >= 1) with `_req`, `_score`, `_words`, sorted best-first per partial."""
    pred = as_polars(predictions, "predictions")
    require_columns(pred, POLICY_COLUMNS, "predictions")
    score = _check_scores(scores, pred.height)
    frame = pred.select(
        pl.col("request_id").cast(pl.String), pl.col("partial_index").cast(pl.Int64),
        pl.col("partial_time_ms").cast(pl.Float64), pl.col("prediction_words").list.join(" ").alias("_words"),
        pl.col("added_words").cast(pl.Int64), pl.col("source").is_in(["personal", "both"]).alias("_personal"),
        pl.col("lm_log_prob").cast(pl.Float64), pl.col("correct").cast(pl.Boolean),
    ).with_columns(pl.Series("_score", score)).with_row_index("_row")
    check_known_requests(frame, req)
    frame = frame.join(req.select("request_id", "_req"), on="request_id", how="left")
    if frame.get_column("lm_log_prob").is_nan().any():
        raise DataError("predictions table column 'lm_log_prob' holds NaN. Fix: write finite log probabilities.")
    keys = ["_req", "partial_index", "_score", "lm_log_prob", "_personal", "_words", "_row"]
    return frame.filter(pl.col("added_words") >= 1).sort(
        keys, descending=[False, False, True, True, True, False, False])


def _best_per_partial(scores: Any, predictions: Any, requests: Any) -> _Best:
    req = requests_frame(requests)
    best = _candidates(scores, predictions, req).unique(
        subset=["_req", "partial_index"], keep="first", maintain_order=True)
    best = best.with_columns(
        pl.col("_score").cum_max().over("_req").alias("_cummax"),
        pl.col("_score").shift(1).cum_max().over(["_req", "_words"]).fill_null(-math.inf).alias("_prev_same"),
    ).with_columns(pl.col("_cummax").shift(1).over("_req").fill_null(-math.inf).alias("_prev_cummax"))

    def col(name: str, dtype: Any) -> np.ndarray:
        return best.get_column(name).to_numpy().astype(dtype, copy=False)

    return _Best(
        request_ids=req.get_column("request_id").to_list(),
        end_ms=req.get_column("end_of_speech_ms").to_numpy(),
        req=col("_req", np.int64), partial_index=col("partial_index", np.int64),
        time_ms=col("partial_time_ms", np.float64), score=col("_score", np.float64),
        correct=col("correct", bool), added=col("added_words", np.int64), cummax=col("_cummax", np.float64),
        prev_cummax=col("_prev_cummax", np.float64), prev_same=col("_prev_same", np.float64),
    )


class _Grid:
    """Per (threshold, request) result arrays, flattened as threshold * requests + request."""

    def __init__(self, best: _Best, thresholds: tuple[float, ...]) -> None:
        self.best = best
        self.thresholds = thresholds
        self.n_req = len(best.request_ids)
        size = len(thresholds) * self.n_req
        self.outcome = np.zeros(size, dtype=np.int8)
        self.attempts = np.zeros(size, dtype=np.int32)
        self.failed = np.zeros(size, dtype=np.int32)
        self.row = np.full(size, -1, dtype=np.int64)  # index into best of the deciding attempt

    def set(self, thr: np.ndarray, rows: np.ndarray, outcome: int, attempts: np.ndarray,
            failed: np.ndarray) -> None:
        """Record outcomes at threshold positions `thr` for best rows `rows` (their requests)."""
        flat = thr * self.n_req + self.best.req[rows]
        self.outcome[flat] = outcome
        self.attempts[flat] = attempts
        self.failed[flat] = failed
        self.row[flat] = rows

    def frame(self) -> pl.DataFrame:
        best, rows = self.best, self.row
        has = rows >= 0

        def take(values: np.ndarray) -> np.ndarray:
            out = np.zeros(rows.size, dtype=values.dtype)
            out[has] = values[rows[has]]
            return out

        req = np.tile(np.arange(self.n_req), len(self.thresholds))
        time_ms = take(best.time_ms)
        return pl.DataFrame({
            "threshold": np.repeat(np.asarray(self.thresholds, dtype=np.float64), self.n_req),
            "request_id": pl.Series(best.request_ids, dtype=pl.String).gather(req),
            "outcome": pl.Series(_CODE_NAMES, dtype=pl.String).gather(self.outcome.astype(np.int64)),
            "attempts": self.attempts,
            "failed_attempts": self.failed,
            "partial_index": pl.Series(take(best.partial_index), dtype=pl.Int32),
            "partial_time_ms": time_ms,
            "gain_ms": best.end_ms[req] - time_ms,
            "gain_words": pl.Series(take(best.added), dtype=pl.Int32),
            "_has": has, "_success": self.outcome == _SUCCESS,
        }).with_columns(
            pl.when("_has").then(pl.col("partial_index", "partial_time_ms")),
            pl.when("_success").then(pl.col("gain_ms", "gain_words")),
        ).drop("_has", "_success")


def first_prefetch(scores: Any, predictions: Any, requests: Any,
                   thresholds: Sequence[float] | np.ndarray) -> pl.DataFrame:
    """The paper's single attempt: per request and threshold, prefetch at the first partial whose best
    candidate scores >= threshold; success if that candidate is correct, else failure.

    `scores: (N,)` float, one per predictions row (any scale; NaN rejected). Returns the outcome table
    described in the module docstring. Vectorized: the first partial whose running maximum of best scores
    reaches a threshold is found for all thresholds at once by a search in the threshold grid.
    """
    thr = validate_thresholds(thresholds)
    best = _best_per_partial(scores, predictions, requests)
    grid = _Grid(best, thr)
    grid_values = np.asarray(thr)
    # A row where the running maximum rises is the first passing partial for thresholds in (prev, cummax].
    record = np.flatnonzero(best.cummax > best.prev_cummax)
    lo = np.searchsorted(grid_values, best.prev_cummax[record], side="right")
    hi = np.searchsorted(grid_values, best.cummax[record], side="right")
    counts = hi - lo
    rows = np.repeat(record, counts)
    starts = np.repeat(np.cumsum(counts) - counts, counts)
    thr_pos = np.repeat(lo, counts) + (np.arange(rows.size) - starts)
    ok = best.correct[rows]
    one = np.ones(rows.size, dtype=np.int32)
    grid.set(thr_pos[ok], rows[ok], _SUCCESS, one[ok], np.zeros(int(ok.sum()), dtype=np.int32))
    grid.set(thr_pos[~ok], rows[~ok], _FAILURE, one[~ok], one[~ok])
    return grid.frame()


def _segment_first(keys: np.ndarray) -> np.ndarray:
    """Positions of the first element of each run of equal values in sorted `keys`."""
    if keys.size == 0:
        return np.zeros(0, dtype=np.int64)
    return np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])


def multi_prefetch(scores: Any, predictions: Any, requests: Any, thresholds: Sequence[float] | np.ndarray,
                   max_attempts: int = 2) -> pl.DataFrame:
    """Up to `max_attempts` prefetches per request: walk the partials in order and attempt at each partial
    whose best candidate passes the threshold and differs (in words) from all earlier attempts of the
    request; stop at the first correct attempt (success, gain from that attempt's partial) or after
    `max_attempts` attempts (failure). `failed_attempts` counts the wrong attempts made.
    `max_attempts=1` gives exactly `first_prefetch`. Returns the outcome table of the module docstring.
    """
    if isinstance(max_attempts, bool) or not isinstance(max_attempts, (int, np.integer)) or max_attempts < 1:
        raise ConfigError(f"max_attempts must be an integer >= 1, got {max_attempts!r}. "
                          "Fix: use 1 for the single-attempt policy or a small count such as 2 or 3.")
    thr = validate_thresholds(thresholds)
    best = _best_per_partial(scores, predictions, requests)
    grid = _Grid(best, thr)
    for k, t in enumerate(thr):
        # Passing partials whose words no earlier passing partial of the request had: the attempts.
        rows = np.flatnonzero((best.score >= t) & (best.prev_same < t))
        req = best.req[rows]
        rank = np.arange(rows.size) - np.searchsorted(req, req, side="left")
        keep = rank < max_attempts
        rows, req, rank = rows[keep], req[keep], rank[keep]
        hit = np.flatnonzero(best.correct[rows])
        first_hit = hit[_segment_first(req[hit])]
        won = np.zeros(grid.n_req, dtype=bool)
        won[req[first_hit]] = True
        last = np.r_[_segment_first(req)[1:] - 1, rows.size - 1] if rows.size else np.zeros(0, dtype=np.int64)
        lost = last[~won[req[last]]]
        pos = np.full(rows.size, k, dtype=np.int64)
        grid.set(pos[lost], rows[lost], _FAILURE, (rank[lost] + 1).astype(np.int32),
                 (rank[lost] + 1).astype(np.int32))
        grid.set(pos[first_hit], rows[first_hit], _SUCCESS, (rank[first_hit] + 1).astype(np.int32),
                 rank[first_hit].astype(np.int32))
    return grid.frame()


def summarize(outcomes: pl.DataFrame) -> pl.DataFrame:
    """One row per threshold of an outcome table (`first_prefetch`/`multi_prefetch`), columns
    `SWEEP_COLUMNS`: counts, `success_rate` and `failed_rate` (failed attempts / requests), `gain_ms_success`
    (mean ΔT over successes, ms; NaN without success), `gain_ms_all` (ΔT summed over successes / requests,
    ms) and `gain_words_success` (mean added words over successes; NaN without success)."""
    success = pl.col("outcome") == Outcome.SUCCESS.value
    out = outcomes.group_by("threshold", maintain_order=True).agg(
        pl.len().cast(pl.Int64).alias("requests"),
        success.sum().cast(pl.Int64).alias("success"),
        (pl.col("outcome") == Outcome.FAILURE.value).sum().cast(pl.Int64).alias("failure"),
        (pl.col("outcome") == Outcome.NONE.value).sum().cast(pl.Int64).alias("none"),
        pl.col("failed_attempts").sum().cast(pl.Int64).alias("failed_attempts"),
        pl.col("gain_ms").sum().alias("_gain_sum"),
        pl.col("gain_ms").mean().alias("gain_ms_success"),
        pl.col("gain_words").cast(pl.Float64).mean().alias("gain_words_success"),
    ).with_columns(
        (pl.col("success") / pl.col("requests")).alias("success_rate"),
        (pl.col("failed_attempts") / pl.col("requests")).alias("failed_rate"),
        (pl.col("_gain_sum") / pl.col("requests")).alias("gain_ms_all"),
        pl.col("gain_ms_success", "gain_words_success").fill_null(math.nan),
    ).select(SWEEP_COLUMNS).sort("threshold")
    total = out.get_column("none") + out.get_column("success") + out.get_column("failure")
    if not (total == out.get_column("requests")).all():
        raise AssertionError("an outcome table counts a request in more or fewer than one outcome")
    return out


def sweep(scores: Any, predictions: Any, requests: Any, thresholds: Sequence[float] | np.ndarray,
          max_attempts: int = 1) -> pl.DataFrame:
    """Metrics per threshold (see `summarize`): the single-attempt policy for `max_attempts=1`, else
    `multi_prefetch` with that many attempts."""
    if max_attempts == 1:
        outcomes = first_prefetch(scores, predictions, requests, thresholds)
    else:
        outcomes = multi_prefetch(scores, predictions, requests, thresholds, max_attempts)
    return summarize(outcomes)


def _oracle_hits(predictions: Any, requests: Any) -> tuple[int, np.ndarray]:
    """(requests, ΔT in ms of the first correct candidate of each request that has one)."""
    req = requests_frame(requests)
    pred = as_polars(predictions, "predictions")
    require_columns(pred, ("request_id", "partial_index", "partial_time_ms", "added_words", "correct"),
                    "predictions")
    pred = pred.with_columns(pl.col("request_id").cast(pl.String))  # as the requests' ids (any type given)
    check_known_requests(pred, req)
    hits = (pred.filter((pl.col("added_words") >= 1) & pl.col("correct"))
            .group_by("request_id")
            .agg(pl.col("partial_time_ms").sort_by("partial_index").first())
            .join(req, on="request_id", how="inner"))
    gains = (hits.get_column("end_of_speech_ms") - hits.get_column("partial_time_ms").cast(pl.Float64))
    return req.height, gains.to_numpy()


def oracle_rate(predictions: Any, requests: Any) -> float:
    """Upper bound of predictable requests: the fraction with a correct candidate (added_words >= 1) at
    any partial, i.e. accepting the first prediction that matches the final recognition."""
    total, gains = _oracle_hits(predictions, requests)
    return gains.size / total


def oracle_gain_ms(predictions: Any, requests: Any) -> float:
    """Mean ΔT (ms) of the first correct candidate over the requests the oracle predicts; NaN if none."""
    _, gains = _oracle_hits(predictions, requests)
    return float(gains.mean()) if gains.size else math.nan


def operating_point(sweep_df: pl.DataFrame, max_failed_rate: float = 0.10) -> dict[str, float | None]:
    """Metrics at the most permissive (lowest) threshold whose `failed_rate <= max_failed_rate`: keys
    `threshold`, `success_rate`, `failed_rate`, `gain_ms_all`, `gain_ms_success`, `gain_words_success`.
    When no threshold qualifies the metrics are NaN and `threshold` is None."""
    if not (isinstance(max_failed_rate, (int, float)) and 0.0 <= max_failed_rate <= 1.0):
        raise ConfigError(f"max_failed_rate must be a number from 0 to 1, got {max_failed_rate!r}. "
                          "Fix: give the largest tolerated share of failed prefetches, such as 0.1.")
    require_columns(sweep_df, ("threshold", "failed_rate"), "sweep")
    keys = ("success_rate", "failed_rate", "gain_ms_all", "gain_ms_success", "gain_words_success")
    ok = sweep_df.filter(pl.col("failed_rate") <= max_failed_rate).sort("threshold")
    if ok.height == 0:
        return {"threshold": None, **{k: math.nan for k in keys}}
    row = ok.row(0, named=True)
    return {"threshold": float(row["threshold"]), **{k: float(row[k]) for k in keys}}
