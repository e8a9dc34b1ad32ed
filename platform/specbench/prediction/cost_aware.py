"""Cost-aware prefetching: prefetch when the expected net benefit is positive.

The threshold policy prefetches the first prediction whose confidence passes a threshold, whatever it would
save. The cost-aware policy weighs both sides at every partial: a prediction is worth

    P(success) * E[gain in ms] - lambda * C

where P(success) is the confidence model's probability, E[gain] the latency a correct prefetch would save, and
C the cost of a discarded response. With C counted as 1 ms of saved latency, lambda is the exchange rate in
ms; the policy prefetches the first partial whose best prediction has ``P * E[gain] >= lambda`` (the best
prediction of a partial is the one with the largest expected benefit), and sweeping lambda traces its
trade-off between latency saved and responses wasted.

E[gain] cannot use the end of speech, which is not known at the partial. It is the predicted words still to
come times a speaking rate: ``added_words * ms_per_word``, with ``ms_per_word`` fitted on the devel users as
the least-squares ratio of the gains of their correct predictions to those predictions' added words
(`ms_per_added_word`), so nothing of the test users is used.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl

from specbench.prediction.prefetch import as_polars, require_columns


def ms_per_added_word(predictions: Any, requests: Any) -> float:
    """Least-squares ms of saved latency per added word over the correct predictions (added_words >= 1) of
    `predictions`: sum(gain * words) / sum(words**2), the gain being end of speech minus the partial's time.
    ValueError when there is no correct prediction to fit on."""
    pred = as_polars(predictions, "predictions")
    req = as_polars(requests, "requests")
    require_columns(pred, ("request_id", "partial_time_ms", "added_words", "correct"), "predictions")
    require_columns(req, ("request_id", "end_of_speech_ms"), "requests")
    hits = (pred.filter((pl.col("added_words") >= 1) & pl.col("correct"))
            .join(req.select(["request_id", "end_of_speech_ms"]), on="request_id", how="inner"))
    if hits.height == 0:
        raise ValueError("no correct prediction to fit the ms per added word on")
    words = hits["added_words"].cast(pl.Float64).to_numpy()
    gains = (hits["end_of_speech_ms"] - hits["partial_time_ms"].cast(pl.Float64)).to_numpy()
    return float(np.dot(gains, words) / np.dot(words, words))


def expected_benefit(probabilities: np.ndarray, predictions: Any, ms_per_word: float) -> np.ndarray:
    """P(success) * E[gain] in ms for every prediction row (-inf where the probability is -inf, i.e. the
    row is no candidate)."""
    pred = as_polars(predictions, "predictions")
    require_columns(pred, ("added_words",), "predictions")
    probabilities = np.asarray(probabilities, dtype=np.float64)
    gain = pred["added_words"].cast(pl.Float64).to_numpy() * ms_per_word
    with np.errstate(invalid="ignore"):
        out = probabilities * gain
    return np.where(np.isneginf(probabilities), -np.inf, out)
