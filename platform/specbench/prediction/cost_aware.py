"""Cost-aware prefetching: prefetch when the expected net benefit is positive.

The threshold policy prefetches the first prediction whose confidence passes a threshold, whatever it would
save. The net-benefit policy weighs both sides at every partial: prefetching a prediction is worth

    P * E[gain in ms] - (1 - P) * lambda

where P is the confidence model's probability that the prediction is the final hypothesis, E[gain] the
latency a correct prefetch saves, and lambda the cost, in ms of saved latency, of one discarded response:
the response computed ahead is wasted only when the prediction is wrong (a correct one replaces the response
that would have been computed after the end of speech), so the cost is weighted by 1 - P. The policy
prefetches at the first partial where some prediction's net benefit is >= 0, the one with the largest net
benefit at that lambda; sweeping lambda traces its trade-off between latency saved and responses wasted
(a larger lambda asks for a larger P: P >= lambda / (E[gain] + lambda)).

E[gain] cannot use the end of speech, which is not known at the partial. It is the predicted words still to
come times a speaking rate: ``added_words * ms_per_word``, with ``ms_per_word`` fitted on the devel users as
the least-squares ratio of the gains of their correct predictions to those predictions' added words
(`ms_per_added_word`), so nothing of the test users is used.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import polars as pl

from specbench.errors import ConfigError
from specbench.prediction.prefetch import (
    as_polars,
    check_known_requests,
    first_prefetch,
    requests_frame,
    require_columns,
    summarize,
)


def ms_per_added_word(predictions: Any, requests: Any) -> float:
    """Least-squares ms of saved latency per added word over the correct predictions (added_words >= 1) of
    `predictions`: sum(gain * words) / sum(words**2), the gain being end of speech minus the partial's time.
    The requests are checked as the policies check them (one finite end of speech per request, every predicted
    request listed); ValueError when there is no correct prediction to fit on."""
    pred = as_polars(predictions, "predictions")
    require_columns(pred, ("request_id", "partial_time_ms", "added_words", "correct"), "predictions")
    pred = pred.with_columns(pl.col("request_id").cast(pl.String))
    req = requests_frame(requests)
    check_known_requests(pred, req)
    hits = (pred.filter((pl.col("added_words") >= 1) & pl.col("correct"))
            .join(req.select(["request_id", "end_of_speech_ms"]), on="request_id", how="inner",
                  maintain_order="left"))
    if hits.height == 0:
        raise ValueError("no correct prediction to fit the ms per added word on")
    words = hits["added_words"].cast(pl.Float64).to_numpy()
    gains = (hits["end_of_speech_ms"] - hits["partial_time_ms"].cast(pl.Float64)).to_numpy()
    return float(np.dot(gains, words) / np.dot(words, words))


def net_benefit(probabilities: np.ndarray, predictions: Any, ms_per_word: float, cost_ms: float) -> np.ndarray:
    """P * E[gain] - (1 - P) * cost_ms in ms for every prediction row (-inf where the probability is -inf,
    i.e. the row is no candidate)."""
    pred = as_polars(predictions, "predictions")
    require_columns(pred, ("added_words",), "predictions")
    probabilities = np.asarray(probabilities, dtype=np.float64)
    gain = pred["added_words"].cast(pl.Float64).to_numpy() * ms_per_word
    with np.errstate(invalid="ignore"):
        out = probabilities * gain - (1.0 - probabilities) * cost_ms
    return np.where(np.isneginf(probabilities), -np.inf, out)


def net_benefit_sweep(probabilities: np.ndarray, predictions: Any, requests: Any, ms_per_word: float,
                      costs_ms: Sequence[float]) -> pl.DataFrame:
    """The net-benefit policy at every cost in `costs_ms`: a sweep table (`prefetch.summarize`) whose
    `threshold` column holds the cost lambda, so that `operating_point` picks the smallest lambda within a
    failed budget, as it picks the most permissive threshold."""
    if not costs_ms:
        raise ConfigError("cost_lambdas_ms must list at least one cost. Fix: list costs such as [0, 500, 2000].")
    tables = []
    for cost in sorted(float(c) for c in costs_ms):
        outcomes = first_prefetch(net_benefit(probabilities, predictions, ms_per_word, cost), predictions,
                                  requests, [0.0])
        tables.append(outcomes.with_columns(pl.lit(cost).alias("threshold")))
    return summarize(pl.concat(tables))
