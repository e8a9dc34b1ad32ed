"""Cluster (block) bootstrap of two success rates measured on the same items, and of their difference.

The items of an evaluation are often not independent: a simulated user's requests share one voice, one
history and one set of routines, so a user who repeats a request many times moves every rate at once.
Resampling items would then understate the uncertainty. The cluster bootstrap (Davison & Hinkley 1997,
section 3.8; Field & Welsh 2007) resamples whole clusters (users) with replacement, `samples` times, and on
each draw computes each rate as the successes over the items of the drawn clusters (a ratio estimator, so
users with more requests weigh more, as in the rate itself). Both systems see the same draw (paired), so the
interval of the difference reflects only how the two systems differ per user. Intervals are the 2.5 and 97.5
percentiles of the draws.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specbench.metrics.resample import resample_counts

__all__ = ["RateDifference", "paired_cluster_bootstrap"]


@dataclass(frozen=True)
class RateDifference:
    """Rates of A and B over all items, A − B, and the 95% intervals of A's rate and of the difference."""

    rate_a: float
    rate_b: float
    low_a: float
    high_a: float
    difference: float
    low: float
    high: float
    clusters: int
    samples: int


def paired_cluster_bootstrap(hits_a: np.ndarray, hits_b: np.ndarray, clusters: np.ndarray, samples: int = 1000,
                             seed: int = 0) -> RateDifference:
    """Bootstrap over clusters of `mean(hits_a)`, `mean(hits_b)` and their difference.

    `hits_a`, `hits_b`: `(N,)` 0/1 (or bool) per item; `clusters`: `(N,)` any hashable ids (user ids).
    `ValueError` when the lengths differ, there are no items, or `samples` < 1.
    """
    a, b, ids = np.asarray(hits_a, dtype=np.float64), np.asarray(hits_b, dtype=np.float64), np.asarray(clusters)
    if a.ndim != 1 or a.shape != b.shape or a.shape != ids.shape or a.size == 0:
        raise ValueError(f"paired_cluster_bootstrap needs three equally long, non-empty 1-D arrays; got shapes "
                         f"{a.shape}, {b.shape} and {ids.shape}")
    if samples < 1:
        raise ValueError(f"paired_cluster_bootstrap: samples must be at least 1, got {samples}")
    _, cluster_of = np.unique(ids, return_inverse=True)
    n_clusters = int(cluster_of.max()) + 1
    items = np.bincount(cluster_of, minlength=n_clusters).astype(np.float64)
    sum_a = np.bincount(cluster_of, weights=a, minlength=n_clusters)
    sum_b = np.bincount(cluster_of, weights=b, minlength=n_clusters)
    counts = resample_counts(n_clusters, samples, seed).astype(np.float64)  # (samples, clusters): times drawn
    total = counts @ items
    rate_a, rate_b = counts @ sum_a / total, counts @ sum_b / total
    low_a, high_a = np.percentile(rate_a, [2.5, 97.5])
    low, high = np.percentile(rate_a - rate_b, [2.5, 97.5])
    return RateDifference(rate_a=float(a.mean()), rate_b=float(b.mean()), low_a=float(low_a), high_a=float(high_a),
                          difference=float(a.mean() - b.mean()), low=float(low), high=float(high),
                          clusters=n_clusters, samples=samples)
