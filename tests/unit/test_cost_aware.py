"""The net-benefit prefetch policy: the speaking-rate fit, the net benefit, and its decisions checked by hand
on a small table and against the policy written out request by request on random tables."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from specbench.errors import DataError
from specbench.prediction.cost_aware import ms_per_added_word, net_benefit, net_benefit_sweep
from specbench.prediction.prefetch import operating_point

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


def test_ms_per_added_word_checks_the_requests_as_the_policies_do() -> None:
    """A correct prediction whose request is missing, or a request listed twice, would silently drop out of
    (or count twice in) the fit; it is refused with the same message the policies give."""
    requests, predictions = tables()
    with pytest.raises(DataError, match="request_id 'b', which the requests table lacks"):
        ms_per_added_word(predictions, requests.filter(pl.col("request_id") == "a"))
    with pytest.raises(DataError, match="lists request_id 'a' more than once"):
        ms_per_added_word(predictions, pl.concat([requests, requests.head(1)]))


def test_net_benefit_and_decisions_by_hand() -> None:
    requests, predictions = tables()
    p = np.array([0.5, 0.9, 0.8, 0.3, -np.inf])
    # expected gains 400, 100, 200, 600, 300 ms; net benefit P * gain - (1 - P) * lambda
    assert net_benefit(p, predictions, 100.0, 100.0).tolist() == pytest.approx([150.0, 80.0, 140.0, 110.0, -np.inf])
    out = net_benefit_sweep(p, predictions, requests, 100.0, [1000.0, 100.0, 300.0, 500.0])
    assert out["threshold"].to_list() == [100.0, 300.0, 500.0, 1000.0]
    # lambda 100: a at its first partial (150, correct); b's first partial's best is b0 (140 > 110), wrong.
    # 300: a (50) and b0 (100; b1 -30) still. 500: a0 -50, so a waits for a1 (40), wrong; b0 60, wrong.
    # 1000: nothing is worth it (a1 -10, b0 -40).
    assert out["success"].to_list() == [1, 1, 0, 0]
    assert out["failure"].to_list() == [1, 1, 2, 0]
    assert out["none"].to_list() == [0, 0, 0, 2]
    assert operating_point(out, 0.5)["threshold"] == 100.0  # the smallest lambda within the budget


def _direct(p: np.ndarray, predictions: pl.DataFrame, requests: pl.DataFrame, ms_per_word: float,
            cost: float) -> dict[str, str]:
    """The policy written out: at each partial in time order, the candidates (adding a word) whose net
    benefit is >= 0; the one with the largest is prefetched and decides the request."""
    outcomes = {}
    rows = predictions.with_columns(pl.Series("p", p)).iter_rows(named=True)
    by_request: dict[str, list[dict]] = {}
    for row in rows:
        by_request.setdefault(row["request_id"], []).append(row)
    for request in requests["request_id"]:
        outcomes[request] = "none"
        cands = [r for r in by_request.get(request, []) if r["added_words"] >= 1]
        for index in sorted({r["partial_index"] for r in cands}):
            worth = [(r["p"] * r["added_words"] * ms_per_word - (1 - r["p"]) * cost, r["correct"])
                     for r in cands if r["partial_index"] == index]
            best = max(worth)
            if best[0] >= 0:
                outcomes[request] = "success" if best[1] else "failure"
                break
    return outcomes


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_sweep_is_the_policy_written_out(seed: int) -> None:
    rng = np.random.default_rng(seed)
    rows = []
    for r in range(40):
        for partial in range(int(rng.integers(1, 5))):
            for c in range(int(rng.integers(1, 4))):
                rows.append({"request_id": f"r{r}", "partial_index": partial, "partial_time_ms": 100.0 * partial,
                             "added_words": int(rng.integers(0, 6)), "correct": bool(rng.uniform() < 0.4),
                             "prediction_words": [f"p{partial}", f"c{c}"], "source": "lm", "lm_log_prob": -1.0})
    predictions = pl.DataFrame(rows)
    requests = pl.DataFrame({"request_id": [f"r{r}" for r in range(41)], "end_of_speech_ms": [900.0] * 41})
    p = rng.uniform(size=predictions.height)
    costs = [0.0, 150.0, 400.0, 1200.0, 5000.0]
    table = net_benefit_sweep(p, predictions, requests, 110.0, costs)
    for cost, row in zip(costs, table.iter_rows(named=True)):
        want = _direct(p, predictions, requests, 110.0, cost)
        counts = {o: sum(v == o for v in want.values()) for o in ("success", "failure", "none")}
        assert (row["threshold"], row["success"], row["failure"], row["none"]) == (
            cost, counts["success"], counts["failure"], counts["none"])
