"""Make every epsilon weight of a graph non-negative without changing the cost of any complete path
(Johnson's reweighting, 1977), so that the lane decoders can use the epsilon closure.

Determinization and minimization in the log semiring push weight around, and an HCLG comes out with some
negative epsilon weights (Kaldi's do too). With h(v) the shortest distance to v over epsilon arcs from a
virtual source joined to every state at cost 0 (so h <= 0 and h(d) <= h(s) + w for each epsilon arc s -> d),
every arc gets w + h(s) - h(d) (>= 0 on epsilon arcs; emitting arcs may turn negative, which every decoder
allows) and every final weight gets + h(v) - h(start). Along a path the arc terms telescope to
h(start) - h(end), so a path from the start state to a final state costs exactly what it cost before, however
often it passes through the start state again (an epsilon arc back into the start is what makes h(start) < 0),
and the empty path of a final start state too. Intermediate token costs move,
as with weight pushing, so a beam prunes slightly differently; the best path is the same.
"""

from __future__ import annotations

import numpy as np

from specbench.wfst.graph import CsrGraph, from_arrays


def epsilon_potentials(graph: CsrGraph, max_rounds: int | None = None) -> np.ndarray:
    """h: shortest distances over epsilon arcs from a virtual source (Bellman-Ford, vectorized); ValueError
    for a negative epsilon cycle."""
    eps = graph.epsilon
    src = np.repeat(np.arange(graph.num_states), eps.out_degree)
    weight = eps.weight.astype(np.float64)
    h = np.zeros(graph.num_states)
    for _ in range(max_rounds or graph.num_states + 1):
        candidate = h.copy()
        np.minimum.at(candidate, eps.dest, h[src] + weight)
        if np.all(candidate >= h - 1e-9):
            return h
        h = np.minimum(h, candidate)
    raise ValueError("the graph has a negative-cost epsilon cycle: no reweighting makes its epsilon weights "
                     "non-negative")


def nonnegative_epsilons(graph: CsrGraph) -> CsrGraph:
    """`graph` reweighted (see the module docstring); returned unchanged when no epsilon weight is negative."""
    if not graph.epsilon.num_arcs or bool(np.all(graph.epsilon.weight >= 0)):
        return graph
    h = epsilon_potentials(graph)
    fst = graph.to_arrays()
    src = np.repeat(np.arange(graph.num_states), np.diff(fst.offsets))
    weight = fst.weight.astype(np.float64) + h[src] - h[fst.nextstate]
    eps = fst.ilabel == 0
    weight[eps] = np.maximum(weight[eps], 0.0)  # float rounding of exact zeros
    final = fst.final.astype(np.float64) + h - (h[graph.start] if graph.start >= 0 else 0.0)
    return from_arrays(fst.start, final.astype(np.float32), offsets=fst.offsets, dest=fst.nextstate,
                       ilabel=fst.ilabel, olabel=fst.olabel, weight=weight.astype(np.float32))
