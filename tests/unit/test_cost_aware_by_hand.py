"""The net-benefit policy at its edges, as the module states them: a net benefit of exactly 0 prefetches
(>= 0), a non-candidate row (probability -inf) stays -inf even with no added words, the speaking-rate fit
uses only predictions that add a word, and an empty list of costs is a configuration error."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from specbench.errors import ConfigError
from specbench.prediction.cost_aware import ms_per_added_word, net_benefit, net_benefit_sweep

pytestmark = pytest.mark.unit


def tables(added: list[int], correct: list[bool]) -> tuple[pl.DataFrame, pl.DataFrame]:
    requests = pl.DataFrame({"request_id": ["a"], "end_of_speech_ms": [1000.0]})
    n = len(added)
    predictions = pl.DataFrame({
        "request_id": ["a"] * n, "partial_index": list(range(n)),
        "partial_time_ms": [200.0 * (i + 1) for i in range(n)],
        "added_words": added, "correct": correct, "prediction_words": [["x"]] * n, "source": ["lm"] * n,
        "lm_log_prob": [-1.0] * n,
    })
    return requests, predictions


def test_a_net_benefit_of_exactly_zero_prefetches() -> None:
    requests, predictions = tables([2], [True])
    # P = 0.5, gain 2 * 100 ms: 0.5 * 200 - 0.5 * lambda is 0 at lambda 200 and negative above
    out = net_benefit_sweep(np.array([0.5]), predictions, requests, 100.0, [200.0, 201.0])
    assert out["success"].to_list() == [1, 0] and out["none"].to_list() == [0, 1]


def test_a_non_candidate_stays_minus_infinity() -> None:
    _, predictions = tables([0, 3], [False, True])
    got = net_benefit(np.array([-np.inf, -np.inf]), predictions, 100.0, 50.0)
    assert np.isneginf(got).all()


def test_the_fit_ignores_correct_predictions_that_add_no_word() -> None:
    requests, predictions = tables([0, 2], [True, True])
    # only the second row: 2 words, 1000 - 400 ms
    assert ms_per_added_word(predictions, requests) == pytest.approx(600 / 2)
    requests, predictions = tables([0], [True])
    with pytest.raises(ValueError, match="no correct prediction"):
        ms_per_added_word(predictions, requests)


def test_no_costs_is_a_config_error() -> None:
    requests, predictions = tables([2], [True])
    with pytest.raises(ConfigError, match="at least one cost"):
        net_benefit_sweep(np.array([0.5]), predictions, requests, 100.0, [])
