"""Cluster bootstrap of two rates: each draw is the rate over the items of the drawn clusters (checked against
a direct loop), and clustering widens the interval when items within a cluster agree."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specbench.metrics.cluster_bootstrap import paired_cluster_bootstrap

pytestmark = pytest.mark.unit


def _direct(a: np.ndarray, b: np.ndarray, ids: np.ndarray, samples: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The same draws, computed by concatenating the drawn clusters' items one by one."""
    names = np.unique(ids)
    rng = np.random.default_rng(seed)
    rates_a, diffs = [], []
    for _ in range(samples):
        drawn = names[rng.integers(0, len(names), size=len(names))]
        picked = np.concatenate([np.flatnonzero(ids == name) for name in drawn])
        rates_a.append(a[picked].mean())
        diffs.append(a[picked].mean() - b[picked].mean())
    return np.array(rates_a), np.array(diffs)


@settings(max_examples=30, deadline=None)
@given(data=st.data(), n=st.integers(1, 30))
def test_draws_equal_the_rate_over_the_drawn_clusters(data: st.DataObject, n: int) -> None:
    a = np.array(data.draw(st.lists(st.booleans(), min_size=n, max_size=n)), dtype=float)
    b = np.array(data.draw(st.lists(st.booleans(), min_size=n, max_size=n)), dtype=float)
    ids = np.array(data.draw(st.lists(st.sampled_from(["u1", "u2", "u3", "u4"]), min_size=n, max_size=n)))
    result = paired_cluster_bootstrap(a, b, ids, samples=50, seed=7)
    rates_a, diffs = _direct(a, b, ids, 50, 7)
    assert (result.low_a, result.high_a) == pytest.approx(tuple(np.percentile(rates_a, [2.5, 97.5])))
    assert (result.low, result.high) == pytest.approx(tuple(np.percentile(diffs, [2.5, 97.5])))
    assert result.rate_a == pytest.approx(a.mean()) and result.difference == pytest.approx(a.mean() - b.mean())
    assert result.clusters == len(set(ids))


def test_agreeing_clusters_widen_the_interval() -> None:
    """The same 400 items: 20 users whose requests all succeed or all fail give a far wider interval than
    400 users of one request each."""
    hits = np.repeat([1.0, 0.0] * 10, 20)
    never = np.zeros_like(hits)
    clustered = paired_cluster_bootstrap(hits, never, np.repeat(np.arange(20), 20), seed=0)
    independent = paired_cluster_bootstrap(hits, never, np.arange(400), seed=0)
    assert clustered.rate_a == independent.rate_a == 0.5
    assert (clustered.high_a - clustered.low_a) > 3 * (independent.high_a - independent.low_a)
    assert clustered.low < 0.5 < clustered.high


def test_identical_systems_have_a_zero_difference() -> None:
    hits = np.array([1, 0, 1, 1, 0, 1], dtype=float)
    result = paired_cluster_bootstrap(hits, hits, np.array([1, 1, 2, 2, 3, 3]), samples=100)
    assert (result.difference, result.low, result.high) == (0.0, 0.0, 0.0)


@pytest.mark.parametrize(("a", "b", "ids", "samples", "match"), [
    ([1, 0], [1], [1, 2], 10, "equally long"),
    ([], [], [], 10, "non-empty"),
    ([1], [0], [1], 0, "samples must be at least 1"),
])
def test_bad_input_is_an_error(a: list[int], b: list[int], ids: list[int], samples: int, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        paired_cluster_bootstrap(np.array(a), np.array(b), np.array(ids), samples=samples)
