"""Johnson reweighting of epsilon arcs (`wfst.reweight`) on small graphs computed by hand: a start state that
is not state 0, an epsilon chain as long as the graph (the most Bellman-Ford rounds a graph without a negative
cycle needs), two epsilon paths whose costs differ by less than the convergence tolerance, potentials exact
when two paths differ by more than it, and the graph without states."""

from __future__ import annotations

import numpy as np
import pytest
from test_reweight import _costs

from specbench.wfst.graph import from_arrays
from specbench.wfst.reweight import epsilon_potentials, nonnegative_epsilons

pytestmark = pytest.mark.unit


def test_a_start_state_other_than_zero_keeps_every_path_cost() -> None:
    """Start 1: 1 -a/0.5-> 2 -eps/-1-> 1 and 1 -b/0.25-> 0 (final 0). h(1) = -1 and h(0) = 0, so the final
    weights must be shifted by h(start) = h(1), not by h(0). By hand: b costs 0.25, a b -0.25, a a b -0.75,
    a a a b -1.25."""
    graph = from_arrays(1, np.array([0.0, np.inf, np.inf]), src=np.array([1, 2, 1]), dest=np.array([2, 1, 0]),
                        ilabel=np.array([1, 0, 2]), olabel=np.zeros(3, dtype=int),
                        weight=np.array([0.5, -1.0, 0.25]))
    out = nonnegative_epsilons(graph)
    assert out.start == 1 and np.all(out.epsilon.weight >= 0)
    before, after = _costs(graph, 7), _costs(out, 7)
    assert sorted(before.values()) == pytest.approx([-1.25, -0.75, -0.25, 0.25])
    assert before.keys() == after.keys()
    assert [after[k] for k in sorted(after)] == pytest.approx([before[k] for k in sorted(before)], abs=1e-6)


def test_an_epsilon_chain_through_every_state_is_reweighted() -> None:
    """States 0..5 joined by epsilon arcs i -> i+1 of cost -1: the shortest distances are h(i) = -i, reached
    only after 5 relaxation rounds; this is no negative cycle, so it must not be refused. The one complete
    path costs -5 before and after."""
    n = 6
    graph = from_arrays(0, np.r_[np.full(n - 1, np.inf), 0.0], src=np.arange(n - 1), dest=np.arange(1, n),
                        ilabel=np.zeros(n - 1, dtype=int), olabel=np.zeros(n - 1, dtype=int),
                        weight=np.full(n - 1, -1.0))
    assert epsilon_potentials(graph) == pytest.approx(-np.arange(n))
    out = nonnegative_epsilons(graph)
    assert np.all(out.epsilon.weight >= 0)
    assert list(_costs(out, n).values()) == pytest.approx([-5.0])


def test_epsilon_weights_are_nonnegative_when_two_paths_differ_by_less_than_the_tolerance() -> None:
    """0 -eps/-1-> 1 -eps/-5e-10-> 2 and 0 -eps/-1-> 2 (final): the two paths into state 2 differ by 5e-10,
    below Bellman-Ford's convergence tolerance, so h(2) may stay at -1; every epsilon weight must still come
    out >= 0 (the decoders' epsilon closure relies on it), and the path costs stay within rounding."""
    graph = from_arrays(0, np.array([np.inf, np.inf, 0.0]), src=np.array([0, 0, 1]), dest=np.array([1, 2, 2]),
                        ilabel=np.zeros(3, dtype=int), olabel=np.zeros(3, dtype=int),
                        weight=np.array([-1.0, -1.0, -5e-10]))
    out = nonnegative_epsilons(graph)
    assert np.all(out.epsilon.weight >= 0)
    before, after = _costs(graph, 3), _costs(out, 3)
    assert before.keys() == after.keys()
    assert [after[k] for k in sorted(after)] == pytest.approx([before[k] for k in sorted(before)], abs=1e-6)


def test_potentials_are_exact_when_two_paths_differ_by_half_a_thousandth() -> None:
    """0 -eps/-1-> 1 -eps/-5e-4-> 2 and 0 -eps/-1-> 2: after one round h(2) = -1 (the direct arc), the second
    round improves it by 5e-4 through state 1, far above the tolerance: h = (0, -1, -1.0005) by hand."""
    graph = from_arrays(0, np.array([np.inf, np.inf, 0.0]), src=np.array([0, 0, 1]), dest=np.array([1, 2, 2]),
                        ilabel=np.zeros(3, dtype=int), olabel=np.zeros(3, dtype=int),
                        weight=np.array([-1.0, -1.0, -5e-4]))
    assert epsilon_potentials(graph) == pytest.approx([0.0, -1.0, -1.0005], abs=1e-9)


def test_a_graph_without_states_has_no_potentials() -> None:
    graph = from_arrays(-1, np.zeros(0), src=np.zeros(0, dtype=int), dest=np.zeros(0, dtype=int),
                        ilabel=np.zeros(0, dtype=int), olabel=np.zeros(0, dtype=int), weight=np.zeros(0))
    assert epsilon_potentials(graph).shape == (0,)
