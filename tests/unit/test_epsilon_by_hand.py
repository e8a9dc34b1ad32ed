"""Epsilon moves by hand (`epsilon.epsilon_closure`, `build_moves`): the closure of small epsilon graphs
written out move by move (shortest distances, no move from a state to itself, the tie rules: the earlier
move, then the lower last arc), its limits (zero weights allowed, a negative one refused, the size limit
exact), and the modes of `build_moves`."""

from __future__ import annotations

import numpy as np
import pytest

from specbench.decoder.epsilon import build_moves, epsilon_closure
from specbench.wfst.graph import from_arrays

pytestmark = pytest.mark.unit


def _epsilon(num_states: int, arcs: list[tuple[int, int, float]]):
    """The epsilon ArcSet of a graph with these epsilon arcs (src, dest, weight); arcs are numbered by
    source state, in the order given within a state."""
    src, dest, weight = (np.array(column) for column in zip(*arcs, strict=True))
    graph = from_arrays(0, np.zeros(num_states, np.float32), src=src, dest=dest, ilabel=np.zeros(len(arcs), int),
                        olabel=np.zeros(len(arcs), int), weight=weight.astype(np.float32))
    return graph.epsilon


def _moves(moves) -> list[tuple[int, int, float, int]]:
    return [(int(s), int(d), float(c), int(a)) for s, d, c, a in
            zip(moves.src, moves.dest, moves.cost, moves.last_arc, strict=True)]


def test_the_closure_keeps_the_earlier_move_on_a_tie() -> None:
    # arcs: 0: 0->1 /1; 1: 2->0 /1; 2: 2->1 /2. (2, 1) costs 2 directly (arc 2, found first) and over 2->0->1
    # (last arc 0, found a round later): the earlier move wins although its last arc is higher
    moves = epsilon_closure(_epsilon(3, [(0, 1, 1.0), (2, 0, 1.0), (2, 1, 2.0)]))
    assert moves.closed
    assert _moves(moves) == [(0, 1, 1.0, 0), (2, 0, 1.0, 1), (2, 1, 2.0, 2)]
    assert moves.arc_path(2) == [2]


def test_the_closure_keeps_the_lower_last_arc_among_moves_of_one_round() -> None:
    # arcs: 0: 0->1 /1, 0->2 /1; 1: 1->3 /1; 2: 2->3 /1. (0, 3) costs 2 over 1 (last arc 2) and over 2
    # (last arc 3), both found in round 2: the lower last arc wins, and its path is arcs 0 then 2
    moves = epsilon_closure(_epsilon(4, [(0, 1, 1.0), (0, 2, 1.0), (1, 3, 1.0), (2, 3, 1.0)]))
    assert _moves(moves) == [(0, 1, 1.0, 0), (0, 2, 1.0, 1), (0, 3, 2.0, 2), (1, 3, 1.0, 2), (2, 3, 1.0, 3)]
    assert moves.arc_path(2) == [0, 2]
    assert list(moves.offsets) == [0, 3, 4, 5, 5]


def test_a_cycle_gives_no_move_from_a_state_to_itself() -> None:
    # 0->1 /0.5, 1->0 /0.25, 1->2 /0 (a zero weight is allowed)
    moves = epsilon_closure(_epsilon(3, [(0, 1, 0.5), (1, 0, 0.25), (1, 2, 0.0)]))
    assert _moves(moves) == [(0, 1, 0.5, 0), (0, 2, 0.5, 2), (1, 0, 0.25, 1), (1, 2, 0.0, 2)]
    assert moves.arc_path(1) == [0, 2]


def test_a_long_chain_has_every_move_and_the_size_limit_is_exact() -> None:
    # a chain of 20 arcs of weight 1: 20 * 21 / 2 = 210 moves (more than 8 per arc, fewer than 10^6)
    eps = _epsilon(21, [(s, s + 1, 1.0) for s in range(20)])
    moves = epsilon_closure(eps)
    assert moves is not None and moves.num_moves == 210
    assert all(cost == dest - src for src, dest, cost, _ in _moves(moves))
    assert moves.arc_path(19) == list(range(20))  # move 19: (0, 20), every arc of the chain
    assert epsilon_closure(eps, max_moves=210).num_moves == 210
    assert epsilon_closure(eps, max_moves=209) is None


def test_a_negative_weight_leaves_only_the_arcs() -> None:
    eps = _epsilon(3, [(0, 1, 1.0), (1, 2, -0.5)])
    assert epsilon_closure(eps) is None
    assert not build_moves(eps, "auto").closed and build_moves(eps, "auto").num_moves == 2
    assert build_moves(eps, "auto").open_because == "an epsilon weight is negative (or NaN)"
    with pytest.raises(ValueError, match="'closure' does not apply: an epsilon weight is negative"):
        build_moves(eps, "closure")
    chain = _epsilon(21, [(s, s + 1, 1.0) for s in range(20)])  # 210 closure moves
    assert build_moves(chain, "auto", max_moves=209).open_because == "the epsilon closure would have more " \
        "than 209 moves"
    with pytest.raises(ValueError, match="'closure' does not apply: the epsilon closure would have more than"):
        build_moves(chain, "closure", max_moves=209)
    with pytest.raises(ValueError, match="epsilon mode must be"):
        build_moves(eps, "fast")


def test_the_arcs_mode_gives_the_arcs_even_where_a_closure_exists() -> None:
    eps = _epsilon(3, [(0, 1, 1.0), (1, 2, 1.0)])
    arcs = build_moves(eps, "arcs")
    assert not arcs.closed and _moves(arcs) == [(0, 1, 1.0, 0), (1, 2, 1.0, 1)]
    closure = build_moves(eps, "closure")
    assert closure.closed and _moves(closure) == [(0, 1, 1.0, 0), (0, 2, 2.0, 1), (1, 2, 1.0, 1)]
