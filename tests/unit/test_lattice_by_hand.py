"""Lattice pruning and word-lattice queries on tiny hand-computed lattices, for both prunings (the numpy
reference `prune_lattice` and the compiled `prune_compiled`): the beam's edge (a path whose cost equals
`best + lattice_beam + 1e-6 * max(1, |best|)` is kept, the next float above it is not), duplicates whose
costs tie up to rounding (the first recorded is kept), a start state that is not the lowest state of frame
0 (it is still node 0), the documented tie rules of the best path, and the word sequences of a zero-frame
lattice with an epsilon cycle whose start node is final."""

from __future__ import annotations

import math

import numpy as np
import pytest

from specbench.decoder.lattice import RawLattice, WordLattice, prune_lattice

pytestmark = pytest.mark.unit

INF = math.inf
Arc = tuple  # (src_frame, src_state, dst_frame, dst_state, ilabel, olabel, graph, acoustic)


def raw_of(arcs: list[Arc], num_frames: int, start: int = 0) -> RawLattice:
    columns = list(zip(*arcs))
    return RawLattice(num_frames, start, *(np.array(c) for c in columns))


def prunings() -> list:
    from specbench.decoder.lattice_kernels import prune_compiled

    return [prune_lattice, prune_compiled]


def nodes_of(lat: WordLattice) -> list[tuple[int, int]]:
    return list(zip(lat.node_frame.tolist(), lat.node_state.tolist()))


def arcs_of(lat: WordLattice) -> set[tuple]:
    """Kept arcs as ((frame, state), (frame, state), olabel, graph cost)."""
    nodes = nodes_of(lat)
    return {(nodes[s], nodes[d], int(o), float(g))
            for s, d, o, g in zip(lat.src.tolist(), lat.dst.tolist(), lat.olabel, lat.graph_cost)}


@pytest.mark.parametrize("best", [0.0, -4.0])
@pytest.mark.parametrize("prune", prunings(), ids=["numpy", "compiled"])
def test_a_path_on_the_beams_edge_is_kept_and_one_beyond_it_is_not(prune, best: float) -> None:
    """One frame, best path cost `best` (state 1). With lattice_beam 1 the limit is best + 1 + 1e-6 *
    max(1, |best|), computed here as the docs state it. State 2 is reached by an arc costing exactly the
    limit, state 3 by an arc costing 0 whose final weight is exactly the limit: both are within it ("at
    most"), so the arcs, the nodes and state 3's final weight are kept. States 4 and 5 are the same one
    float above the limit: dropped. State 6 is 2e-6 beyond the beam: kept only because the slack scales
    with |best| (4e-6 at best = -4)."""
    limit = best + 1.0 + 1e-6 * max(1.0, abs(best))
    above = float(np.nextafter(limit, INF))
    arcs = [(0, 0, 1, 1, 1, 11, best, 0.0), (0, 0, 1, 2, 1, 12, limit, 0.0), (0, 0, 1, 3, 1, 13, 0.0, 0.0),
            (0, 0, 1, 4, 1, 14, above, 0.0), (0, 0, 1, 5, 1, 15, 0.0, 0.0),
            (0, 0, 1, 6, 1, 16, best + 1.0 + 2e-6, 0.0)]
    final = np.array([INF, 0.0, 0.0, limit, 0.0, above, 0.0])
    lat = prune(raw_of(arcs, 1), final, 1.0)
    assert lat is not None
    kept_states = {int(s) for s in lat.node_state[1:]}
    assert kept_states == ({1, 2, 3, 6} if best else {1, 2, 3})
    finals = {int(s): float(w) for s, w in zip(lat.node_state, lat.final_cost) if math.isfinite(w)}
    assert finals == ({1: 0.0, 2: 0.0, 3: limit, 6: 0.0} if best else {1: 0.0, 2: 0.0, 3: limit})
    assert lat.best_path() == ((11,), best, 0.0)


@pytest.mark.parametrize("prune", prunings(), ids=["numpy", "compiled"])
def test_duplicates_tied_up_to_rounding_keep_the_first_recorded(prune) -> None:
    """Two duplicate arcs (same nodes and labels) whose graph costs differ by one ulp but whose totals
    (graph + acoustic) round to the same float, with equal acoustic costs: neither is cheaper, so the first
    recorded is kept, in either recording order."""
    low, high = 0.1, float(np.nextafter(0.1, 1.0))
    assert low + 3.0 == high + 3.0 and low != high
    for first, second in [(low, high), (high, low)]:
        arcs = [(0, 0, 1, 1, 1, 5, first, 3.0), (0, 0, 1, 1, 1, 5, second, 3.0)]
        lat = prune(raw_of(arcs, 1), np.array([INF, 0.0]), 1.0)
        assert lat.num_arcs == 1 and lat.graph_cost.tolist() == [first] and lat.acoustic_cost.tolist() == [3.0]


@pytest.mark.parametrize("prune", prunings(), ids=["numpy", "compiled"])
def test_the_start_node_is_node_0_when_its_state_is_not_the_lowest(prune) -> None:
    """Start state 5; frame 0 also holds state 2 (reached by an epsilon arc with word 7), which sorts before
    it. Node 0 is still the start (0, 5), the others follow in (frame, state) order, and the queries run from
    it: the best path 5 -eps:7-> 2 -> (1, 1) costs 0.5, the direct arc 1.0."""
    arcs = [(0, 5, 0, 2, 0, 7, 0.0, 0.0), (0, 2, 1, 1, 1, 0, 0.25, 0.25), (0, 5, 1, 1, 2, 0, 0.5, 0.5)]
    final = np.array([INF, 0.0, INF, INF, INF, INF])
    lat = prune(raw_of(arcs, 1, start=5), final, INF)
    assert nodes_of(lat) == [(0, 5), (0, 2), (1, 1)]
    assert arcs_of(lat) == {((0, 5), (0, 2), 7, 0.0), ((0, 2), (1, 1), 0, 0.25), ((0, 5), (1, 1), 0, 0.5)}
    assert lat.best_path() == ((7,), 0.25, 0.25)
    assert lat.word_sequences() == {(7,): 0.5, (): 1.0}
    assert [lat.oracle_errors(ref) for ref in ([7], [], [7, 7])] == [0, 0, 1]


@pytest.mark.parametrize("prune", prunings(), ids=["numpy", "compiled"])
def test_best_path_ties_go_to_the_lowest_final_node_then_the_lowest_arc(prune) -> None:
    """Three complete paths of total cost 0.5 (all exact in binary): into (1, 1) by two arcs with words 5
    and 3 (graph 0.25, final 0.25), and into (1, 2) with word 2 (graph 0.5, final 0). The best path ends
    at the final node with the lowest id, (1, 1), and enters it by the lowest arc index (arcs sorted by src,
    dst, ilabel, olabel: word 3's)."""
    arcs = [(0, 0, 1, 2, 1, 2, 0.5, 0.0), (0, 0, 1, 1, 1, 5, 0.25, 0.0), (0, 0, 1, 1, 1, 3, 0.25, 0.0)]
    lat = prune(raw_of(arcs, 1), np.array([INF, 0.25, 0.0]), 0.0)
    assert nodes_of(lat) == [(0, 0), (1, 1), (1, 2)] and lat.olabel.tolist() == [3, 5, 2]
    assert lat.best_path() == ((3,), 0.5, 0.0)
    assert lat.best_path_arcs() == [0]


@pytest.mark.parametrize("prune", prunings(), ids=["numpy", "compiled"])
def test_zero_frame_lattice_with_an_epsilon_cycle_and_a_final_start(prune) -> None:
    """No frames: 0 -eps:3 (0.5)-> 1 -eps (0.5)-> 0, final weights 1.0 (state 0) and 0.2 (state 1). The
    cycle makes the word sequences a search over paths: the empty path ends at the final start node (1.0),
    0 -> 1 has word 3 (0.7); going round the cycle revisits a node. Best path (3,) at 0.7; the empty
    reference needs no edit (the empty path)."""
    arcs = [(0, 0, 0, 1, 0, 3, 0.5, 0.0), (0, 1, 0, 0, 0, 0, 0.5, 0.0)]
    lat = prune(raw_of(arcs, 0), np.array([1.0, 0.2]), INF)
    assert lat.num_arcs == 2 and lat.final_cost.tolist() == [1.0, 0.2]
    assert lat.word_sequences() == pytest.approx({(): 1.0, (3,): 0.7})
    assert lat.best_path() == ((3,), pytest.approx(0.7), 0.0)
    assert [lat.oracle_errors(ref) for ref in ([], [3], [4])] == [0, 0, 1]
