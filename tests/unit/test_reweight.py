"""Johnson reweighting of epsilon arcs (`wfst.reweight`) against brute force: on small random graphs with
negative epsilon weights, every complete path keeps its cost and every epsilon weight is >= 0; also on
graphs whose paths return to the start state, and whose start state is final."""

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


def _costs(graph, depth: int) -> dict[tuple[int, ...], float]:
    """Cost of every complete path of at most `depth` arcs, by its arc indices (reweighting keeps the arcs)."""
    fst = graph.to_arrays()
    out: dict[tuple[int, ...], float] = {}

    def walk(state: int, cost: float, arcs: tuple[int, ...]) -> None:
        if np.isfinite(fst.final[state]):
            out[arcs] = cost + float(fst.final[state])
        if len(arcs) < depth:
            for a in range(int(fst.offsets[state]), int(fst.offsets[state + 1])):
                walk(int(fst.nextstate[a]), cost + float(fst.weight[a]), (*arcs, a))

    walk(graph.start, 0.0, ())
    return out


def test_a_path_through_the_start_state_again_keeps_its_cost() -> None:
    """0 -a/0.5-> 1 -eps/-1-> 0 and 0 -b/0.25-> 2 (final): h(start) = -1 (the epsilon arc 1 -> 0), and each
    return to the start once cost -h(start) more."""
    graph = from_arrays(0, np.array([np.inf, np.inf, 0.0]), src=np.array([0, 1, 0]), dest=np.array([1, 0, 2]),
                        ilabel=np.array([1, 0, 2]), olabel=np.zeros(3, dtype=int), weight=np.array([0.5, -1.0, 0.25]))
    before, after = _costs(graph, 7), _costs(nonnegative_epsilons(graph), 7)
    assert before.keys() == after.keys() and len(before) == 4  # b, ab, aab, aaab
    assert [after[k] for k in sorted(after)] == pytest.approx([before[k] for k in sorted(before)], abs=1e-6)


@pytest.mark.parametrize("seed", range(8))
def test_random_cyclic_graphs_with_a_final_start_keep_every_path_cost(seed) -> None:
    """Emitting arcs in any direction, epsilon arcs from higher to lower states (no epsilon cycle), some into
    the start state, which is final: every path of up to five arcs keeps its cost."""
    rng = np.random.default_rng(100 + seed)
    n = 5
    src, dest = (a.ravel() for a in np.meshgrid(np.arange(n), np.arange(n), indexing="ij"))
    keep = rng.random(src.size) < 0.45
    src, dest = src[keep], dest[keep]
    ilabel = np.where((src > dest) & (rng.random(src.size) < 0.7), 0, rng.integers(1, 4, src.size))
    ilabel[src <= dest] = np.maximum(ilabel[src <= dest], 1)
    weight = rng.normal(0.0, 2.0, src.size)
    final = np.where(rng.random(n) < 0.5, rng.normal(0, 1, n), np.inf)
    final[0] = 0.3
    graph = from_arrays(0, final, src=src, dest=dest, ilabel=ilabel, olabel=np.zeros_like(src), weight=weight)
    out = nonnegative_epsilons(graph)
    assert np.all(out.epsilon.weight >= 0)
    before, after = _costs(graph, 5), _costs(out, 5)
    assert before.keys() == after.keys() and () in before
    assert [after[k] for k in sorted(after)] == pytest.approx([before[k] for k in sorted(before)], abs=1e-4)
