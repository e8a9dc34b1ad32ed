"""The search kernels of the CPU decoder (`decoder.search`) against brute force on small inputs: `recombine`
keeps one winner per destination, the lowest cost and among equal costs the lowest move index wherever it comes
in the candidate order, and leaves its scratch arrays as it found them; `gather_arcs` lists each state's CSR
entries in order; `Arena.path` follows backpointers to the start token."""

from __future__ import annotations

import numpy as np
import pytest

from specbench.decoder.search import Arena, gather_arcs, recombine

pytestmark = pytest.mark.unit

NO_INDEX = np.iinfo(np.int64).max


def _scratch(num_states: int) -> tuple[np.ndarray, np.ndarray]:
    return np.full(num_states, np.inf), np.full(num_states, NO_INDEX, dtype=np.int64)


def test_recombine_breaks_cost_ties_by_the_lowest_index_in_any_order() -> None:
    # destination 2: costs 1.0 (index 7), 0.5 (index 9), 0.5 (index 4), 0.5 (index 6) -> index 4 (position 2)
    # destination 5: cost 2.0 (index 3) alone -> position 4
    dest = np.array([2, 2, 2, 2, 5], dtype=np.intp)
    cost = np.array([1.0, 0.5, 0.5, 0.5, 2.0])
    index = np.array([7, 9, 4, 6, 3], dtype=np.int64)
    dense_cost, dense_index = _scratch(6)
    assert sorted(recombine(dest, cost, index, dense_cost, dense_index).tolist()) == [2, 4]
    assert np.all(dense_cost == np.inf) and np.all(dense_index == NO_INDEX)  # scratch restored


def test_recombine_equals_brute_force_on_random_ties() -> None:
    rng = np.random.default_rng(11)
    dense_cost, dense_index = _scratch(5)
    for _ in range(200):  # the same scratch arrays for every call, as the decoder uses them
        k = int(rng.integers(0, 12))
        dest = rng.integers(0, 5, size=k).astype(np.intp)
        cost = rng.integers(0, 3, size=k).astype(np.float64) / 2  # few distinct costs: many ties
        index = rng.permutation(100)[:k].astype(np.int64)  # distinct, in random order
        win = recombine(dest, cost, index, dense_cost, dense_index)
        expected = {}
        for pos in range(k):  # brute force: per destination the least (cost, index)
            best = expected.get(int(dest[pos]))
            if best is None or (cost[pos], index[pos]) < (cost[best], index[best]):
                expected[int(dest[pos])] = pos
        assert sorted(win.tolist()) == sorted(expected.values())
        assert np.all(dense_cost == np.inf) and np.all(dense_index == NO_INDEX)


def test_gather_arcs_lists_each_states_entries_in_order() -> None:
    # CSR of 4 states with 2, 0, 3, 1 entries: offsets 0 2 2 5 6
    offsets = np.array([0, 2, 2, 5, 6], dtype=np.int64)
    degree = np.diff(offsets)
    index, counts = gather_arcs(offsets, degree, np.array([2, 0, 1, 3, 2], dtype=np.intp))
    assert index.tolist() == [2, 3, 4, 0, 1, 5, 2, 3, 4]  # state 2, state 0, (state 1 none), state 3, state 2
    assert counts.tolist() == [3, 2, 0, 1, 3]
    index, counts = gather_arcs(offsets, degree, np.zeros(0, dtype=np.intp))
    assert index.tolist() == [] and counts.tolist() == []


def test_arena_path_follows_backpointers_across_chunks() -> None:
    arena = Arena()
    root = arena.add(np.array([-1], dtype=np.int64), np.array([0], dtype=np.int64))  # entry 0: the start
    first = arena.add(np.array([0, 0], dtype=np.int64), np.array([10, 11], dtype=np.int64))  # entries 1, 2
    second = arena.add(np.array([2, 1], dtype=np.int64), np.array([-3, 12], dtype=np.int64))  # entries 3, 4
    assert root.tolist() == [0] and first.tolist() == [1, 2] and second.tolist() == [3, 4] and arena.size == 5
    assert arena.path(3) == [11, -3]  # 3 <- 2 <- 0
    assert arena.path(4) == [10, 12]  # 4 <- 1 <- 0
    assert arena.path(0) == []
