"""A personal cache model over completions: the LM's probability of each completion of a partial
hypothesis interpolated with the user's own history, so that global and personal evidence meet in one
score instead of two candidate lists (the first of the seed's two next steps).

For a partial (word prefix) of a request, each candidate completion c (the union of the LM's n-best and
the user's earlier final recognitions that extend the prefix) gets

    P(c | prefix, user) = w * P_cache(c | prefix) + (1 - w) * P_LM(c | prefix)

where P_LM is the LM's probability of the continuation and the end of the sentence (`lm_log_prob`) and
P_cache is the relative frequency of c among the user's history entries that start with the prefix
(`exp(personal_log_freq)`; 0 for a candidate the user never said). When the history holds nothing that
starts with the prefix the cache is empty and the score is the LM's alone, as in a cache language model;
an entry equal to the prefix (it adds no word, so it is no candidate) or an empty final hypothesis counts
in the frequency's total and makes the cache non-empty. Both
are distributions over complete sentences, so the mixture is one too; its log is the decision score (the
policy prefetches the best candidate of a partial when it passes a threshold). The weight w is chosen on
the devel users (`choose_weight`), never on test.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import polars as pl

from specbench.prediction.prefetch import as_polars, require_columns

COLUMNS = ("request_id", "partial_index", "lm_log_prob", "personal_log_freq", "in_personal")


def cache_log_prob(predictions: Any, weight: float) -> np.ndarray:
    """log P(c | prefix, user) of every row of a predictions table (see the module docstring), `(N,)`
    float64; -inf where the probability is 0 (weight 1 and a candidate never said)."""
    if not 0.0 <= weight <= 1.0:
        raise ValueError(f"cache model weight must be in [0, 1], got {weight}")
    frame = as_polars(predictions, "predictions")
    require_columns(frame, COLUMNS, "predictions")
    has_cache = pl.col("in_personal").any().over(["request_id", "partial_index"])
    scored = frame.select(has_cache.alias("cache"), "lm_log_prob", "personal_log_freq", "in_personal")
    lm = scored["lm_log_prob"].to_numpy().astype(np.float64)
    cache = np.where(scored["in_personal"].to_numpy(), scored["personal_log_freq"].to_numpy(), -np.inf)
    with np.errstate(divide="ignore"):
        log_w, log_1mw = math.log(weight) if weight > 0 else -np.inf, np.log1p(-weight)
    mixed = np.logaddexp(log_w + cache, log_1mw + lm)
    return np.where(scored["cache"].to_numpy(), mixed, lm)


def choose_weight(weights: Sequence[float], devel_success: Callable[[np.ndarray], float],
                  devel_predictions: Any) -> tuple[float, list[dict[str, float]]]:
    """The weight whose scores give the highest devel success at the devel operating point
    (`devel_success(scores)`); ties go to the smaller weight (less personal). Also every weight's figure."""
    rows = [{"weight": float(w), "devel_success": float(devel_success(cache_log_prob(devel_predictions, w)))}
            for w in sorted(weights)]
    best = max(rows, key=lambda r: (np.nan_to_num(r["devel_success"], nan=-1.0), -r["weight"]))
    return best["weight"], rows
