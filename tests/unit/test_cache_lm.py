"""The personal cache model over completions against a direct computation of the mixture, row by row."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest

from specbench.prediction.cache_lm import cache_log_prob, choose_weight

pytestmark = pytest.mark.unit


def _table() -> pl.DataFrame:
    # request r1, partial 0: an LM candidate the user also said (2 of 3 matching entries), an LM-only one,
    # a personal-only one (1 of 3); partial 1: nothing in the history, so the LM alone
    return pl.DataFrame({
        "request_id": ["r1", "r1", "r1", "r1", "r1"], "partial_index": [0, 0, 0, 1, 1],
        "lm_log_prob": [-1.0, -2.0, -7.0, -0.5, -3.0],
        "personal_log_freq": [math.log(2 / 3), -10.0, math.log(1 / 3), -10.0, -10.0],
        "in_personal": [True, False, True, False, False]})


@pytest.mark.parametrize("w", [0.0, 0.3, 0.7, 1.0])
def test_the_mixture_row_by_row(w: float) -> None:
    got = cache_log_prob(_table(), w)
    cache = [2 / 3, 0.0, 1 / 3]
    lm = [-1.0, -2.0, -7.0]
    for i in range(3):
        p = w * cache[i] + (1 - w) * math.exp(lm[i])
        assert got[i] == (pytest.approx(math.log(p)) if p > 0 else -np.inf)
    assert got[3:].tolist() == [-0.5, -3.0]  # empty cache: the LM alone at any weight


def test_weight_zero_is_the_lm_and_bad_weights_are_refused() -> None:
    assert cache_log_prob(_table(), 0.0).tolist() == pytest.approx(_table()["lm_log_prob"].to_list())
    with pytest.raises(ValueError, match="weight"):
        cache_log_prob(_table(), 1.5)


def test_the_weight_is_chosen_by_the_devel_figure_ties_to_the_smaller() -> None:
    # a devel figure that rewards ranking the personal-only candidate above the LM-only one
    def success(scores: np.ndarray) -> float:
        return float(scores[2] > scores[1])
    weight, rows = choose_weight([0.9, 0.1, 0.5], success, _table())
    assert [r["weight"] for r in rows] == [0.1, 0.5, 0.9]
    assert weight == min(r["weight"] for r in rows if r["devel_success"] == 1.0)
