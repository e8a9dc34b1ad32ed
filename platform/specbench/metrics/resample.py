"""The draw shared by the project's bootstrap estimates: how often each of `n` units is picked when `n` units
are drawn with replacement, `samples` times (Efron's nonparametric bootstrap). A statistic that is a sum over
units is then `counts @ per_unit_values` for every draw at once."""

from __future__ import annotations

import numpy as np

__all__ = ["resample_counts"]


def resample_counts(n: int, samples: int, seed: int) -> np.ndarray:
    """`(samples, n)` int64: row i counts how often each unit was drawn in bootstrap draw i (rows sum to n)."""
    rng = np.random.default_rng(seed)
    return np.stack([np.bincount(rng.integers(0, n, size=n), minlength=n) for _ in range(samples)])
