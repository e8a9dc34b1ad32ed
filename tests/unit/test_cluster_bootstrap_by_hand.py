"""The cluster bootstrap's reported fields on a hand-computed input, and a cluster-id array of another length
rejected with the documented message."""

from __future__ import annotations

import numpy as np
import pytest

from specbench.metrics.cluster_bootstrap import paired_cluster_bootstrap

pytestmark = pytest.mark.unit


def test_reported_fields_by_hand() -> None:
    a, b, ids = np.array([1, 1, 0, 1]), np.array([0, 1, 0, 0]), np.array(["u", "u", "v", "w"])
    result = paired_cluster_bootstrap(a, b, ids, samples=17, seed=3)
    assert (result.rate_a, result.rate_b, result.difference) == pytest.approx((0.75, 0.25, 0.5))
    assert (result.clusters, result.samples) == (3, 17)


def test_cluster_ids_of_another_length_are_an_error() -> None:
    with pytest.raises(ValueError, match="equally long"):
        paired_cluster_bootstrap(np.array([1, 0]), np.array([1, 0]), np.array([1]))
