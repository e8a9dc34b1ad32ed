"""The lane algorithm's host tables by hand (`lane_tables`): the room left in the arena and lattice rings,
where each utterance's traced paths lie in the path buffer, a wave's cost rows, the frame-0 tokens of a
lane, the partial frames, the closed-arc table's bare arcs, the settings' limits and the kernel log's
per-frame report."""

from __future__ import annotations

import numpy as np
import pytest

from specbench.decoder.lane_tables import (
    KernelLog,
    LaneBatch,
    LaneGraph,
    LaneSettings,
    admitted_tokens,
    partial_frame_indices,
    path_ends,
    path_layout,
)
from specbench.decoder.options import SearchOptions
from specbench.wfst.graph import from_arrays

pytestmark = pytest.mark.unit


def test_the_room_left_is_bounded_by_the_capacity_and_the_unfreed_ring() -> None:
    s = LaneSettings(SearchOptions(), arena_capacity=100, arena_window=10, lattice_capacity=50, lattice_window=20)
    assert s.arena_room(5, 0) == 5  # min(100 - 5, 10 - 5)
    assert s.arena_room(12, 8) == 6  # 4 entries held of a ring of 10
    assert s.arena_room(98, 95) == 2  # min(100 - 98, 10 - 3)
    assert s.arena_room(20, 5) == 0  # 15 held > 10: none
    assert s.lattice_room(30, 25) == 15  # min(50 - 30, 20 - 5)
    assert s.lattice_room(45, 40) == 5  # min(50 - 45, 20 - 5)
    assert LaneSettings(SearchOptions(), arena_capacity=4, arena_window=10).arena_room(1, 0) == 3  # ring = 4


def test_paths_lie_right_aligned_in_rooms_of_length_plus_one() -> None:
    # lengths 3 and 1, partials after frames 0 and 2: utterance 0 has 2 partial paths (frames 0, 2 < 3),
    # utterance 1 one (frame 0 < 1); rooms (1 + 2) x 4 = 12 and (1 + 1) x 2 = 4 entries
    base = path_layout(np.array([3, 1]), (0, 2))
    assert base.tolist() == [0, 12, 16]
    ends = path_ends(base, np.array([3, 1]), np.array([0, 1]), 2, 0)
    assert ends.tolist() == [[4, 8, 12], [14, 16, 18]]  # base + k x (length + 1), k = 1, 2, 3
    assert path_ends(base, np.array([3, 1]), np.array([1]), 2, 12).tolist() == [[2, 4, 6]]  # counted from 12
    assert path_layout(np.array([2]), ()).tolist() == [0, 3]
    # a partial frame equal to an utterance's length lies outside it: length 2 has only the partial after
    # frame 0, (1 + 1) x 3 = 6 entries
    assert path_layout(np.array([3, 2]), (0, 2)).tolist() == [0, 12, 18]


def test_a_wave_stacks_the_cost_rows_zero_padding_narrow_ones() -> None:
    a = np.array([[1.0, 2.0]], np.float32)
    b = np.array([[3.0, 4.0, 5.0], [6.0, 7.0, 8.0]], np.float32)
    batch = LaneBatch.of(["a", "b"], [a, b], (1, 3))
    assert batch.lengths.tolist() == [1, 2] and batch.first_row.tolist() == [0, 1]
    assert batch.costs.tolist() == [[1.0, 2.0, 0.0], [3.0, 4.0, 5.0], [6.0, 7.0, 8.0]]
    assert batch.utterance_costs(0).tolist() == [[1.0, 2.0, 0.0]]
    assert batch.utterance_costs(1).tolist() == [[3.0, 4.0, 5.0], [6.0, 7.0, 8.0]]
    assert batch.partial_every == 2  # partials after frames 1, 3: every 2 frames
    assert LaneBatch.of(["a"], [a], ()).partial_every == 0


def test_partial_frames_are_every_kth_frame_ending_at_frame_k_minus_1() -> None:
    assert partial_frame_indices(7, 3) == (2, 5)
    assert partial_frame_indices(6, 3) == (2, 5)
    assert partial_frame_indices(2, 1) == (0, 1)
    assert partial_frame_indices(5, None) == () and partial_frame_indices(5, 0) == ()
    with pytest.raises(ValueError, match="partial interval must be >= 1 frame"):
        partial_frame_indices(5, -1)


def _chain_graph():
    """0 --eps/0.25--> 1 --1:5/0.5--> 2 --eps/0.125--> 3 (final 0)."""
    return from_arrays(0, np.array([np.inf, np.inf, np.inf, 0.0], np.float32), src=np.array([0, 1, 2]),
                       dest=np.array([1, 2, 3]), ilabel=np.array([0, 1, 0]), olabel=np.array([0, 5, 0]),
                       weight=np.array([0.25, 0.5, 0.125], np.float32))


def test_a_lane_starts_with_the_start_state_and_its_closure_moves() -> None:
    lg = LaneGraph.build(_chain_graph())
    # two lanes, arena entries from 10: per lane the start state (no backpointer, code 0) and the move
    # 0 -> 1 (move 0: code -1 - 0, back to its lane's start entry)
    lane, state, cost, ids, prev, code = admitted_tokens(lg, np.array([3, 5]), 10)
    assert lane.tolist() == [3, 3, 5, 5] and state.tolist() == [0, 1, 0, 1]
    assert cost.tolist() == [0.0, 0.25, 0.0, 0.25] and ids.tolist() == [10, 11, 12, 13]
    assert prev.tolist() == [-1, 10, -1, 12] and code.tolist() == [0, -1, 0, -1]


def test_the_closed_arc_table_marks_bare_emitting_arcs() -> None:
    lg = LaneGraph.build(_chain_graph())
    # moves: 0 -> 1 (0.25), 2 -> 3 (0.125); emitting arc 0 (1 -> 2) bare, then followed by move 1 (to 3)
    assert lg.dest.tolist() == [2, 3] and lg.weight.tolist() == [0.5, 0.625]
    assert lg.bare_arc.tolist() == [0, -1] and lg.offsets.tolist() == [0, 0, 2, 2, 2]
    assert lg.word_end.tolist() == [False, False, True, True]  # 2 reaches final 3 by a wordless epsilon


@pytest.mark.parametrize(("changes", "says"), [
    ({"token_capacity": 2**31}, "token_capacity must be an int in"),
    ({"arena_window": 0}, "arena_window must be an int in"),
    ({"table_slots": 8}, "table_slots must be 0"),
    ({"table_slots": 48}, "table_slots must be 0"),
    ({"table_slots": 2**31}, "table_slots must be 0"),
])
def test_settings_refuse_capacities_out_of_range(changes: dict, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        LaneSettings(SearchOptions(), **changes)


def test_settings_accept_the_edges_and_size_the_tables() -> None:
    s = LaneSettings(SearchOptions(), token_capacity=2**31 - 1, table_slots=16)
    assert s.token_capacity == 2**31 - 1 and s.table_size(1000) == 16
    assert LaneSettings(SearchOptions()).table_size(1000) == 1000  # dense: one entry per state


def test_the_kernel_log_reports_per_frame_step() -> None:
    log = KernelLog()
    log.launch("a", 6)
    log.launch("b", 2)
    log.sync("status", 64)
    report = log.report(4, seconds=2.0)
    assert report["launches_per_frame"] == 2.0 and report["syncs_per_frame"] == 0.25  # 8 / 4, 1 / 4
    assert report["read_bytes_per_frame"] == 16.0 and report["launches"] == {"a": 6, "b": 2}
    assert log.report(0)["launches_per_frame"] == 8.0  # no frame step: counted as one
