"""Johnson reweighting of epsilon arcs (`wfst.reweight`) against brute force: on small random acyclic
graphs with negative epsilon weights, every complete path keeps its cost and every epsilon weight is >= 0."""

from __future__ import annotations

import numpy as np
import pytest

from specbench.wfst.graph import from_arrays
from specbench.wfst.reweight import nonnegative_epsilons


def _paths(graph, state, cost, labels, out):
    fst = graph.to_arrays()
    if np.isfinite(fst.final[state]):
        out.setdefault(tuple(labels), []).append(cost + float(fst.final[state]))
    for a in range(int(fst.offsets[state]), int(fst.offsets[state + 1])):
        _paths(graph, int(fst.nextstate[a]), cost + float(fst.weight[a]), [*labels, (int(fst.ilabel[a]), a)], out)


@pytest.mark.parametrize("seed", range(8))
def test_every_path_keeps_its_cost_and_epsilons_turn_nonnegative(seed) -> None:
    rng = np.random.default_rng(seed)
    n = 7
    src, dest = np.triu_indices(n, k=1)  # forward arcs only: acyclic, finitely many paths
    keep = rng.random(src.shape[0]) < 0.5
    src, dest = src[keep], dest[keep]
    ilabel = np.where(rng.random(src.shape[0]) < 0.5, 0, rng.integers(1, 4, src.shape[0]))
    weight = rng.normal(0.0, 2.0, src.shape[0])
    final = np.where(rng.random(n) < 0.4, rng.normal(0, 1, n), np.inf)
    final[-1] = 0.5
    graph = from_arrays(0, final, src=src, dest=dest, ilabel=ilabel, olabel=np.zeros_like(src), weight=weight)
    out = nonnegative_epsilons(graph)
    assert np.all(out.epsilon.weight >= 0)
    before, after = {}, {}
    _paths(graph, 0, 0.0, [], before)
    _paths(out, 0, 0.0, [], after)
    key = lambda d: sorted((tuple(lab for lab, _ in k), round(c, 3)) for k, cs in d.items() for c in cs)
    assert [c for _, c in key(before)] == pytest.approx([c for _, c in key(after)], abs=1e-4)


def test_a_negative_epsilon_cycle_is_refused() -> None:
    graph = from_arrays(0, np.array([0.0, 0.0]), src=np.array([0, 1]), dest=np.array([1, 0]),
                        ilabel=np.array([0, 0]), olabel=np.array([0, 0]), weight=np.array([-1.0, 0.5]))
    with pytest.raises(ValueError, match="negative-cost epsilon cycle"):
        nonnegative_epsilons(graph)
