"""From lattice records to lattices by hand (`lattice_paths`): the raw lattice of a few records (nodes,
labels, graph and acoustic costs of emitting and epsilon links), which records a partial lattice of the
first frames keeps, the epsilon links among one frame's tokens (within the lattice beam, and only to states
that hold a token), the partial lattice's final costs (every state final at 0), and the per-utterance
check of `lane_lattices`."""

from __future__ import annotations

import numpy as np
import pytest

from specbench.decoder.lane_tables import LaneBatch
from specbench.decoder.lattice_paths import (
    epsilon_links,
    lane_lattices,
    partial_lattice,
    partial_records,
    records_to_raw,
)
from specbench.wfst.graph import from_arrays

pytestmark = pytest.mark.unit


def _graph():
    """Emitting arcs 0: 0 --1:5/0.5--> 1, 1: 1 --2:6/0.25--> 2; epsilon arcs 0: 1 --0:7/0.125--> 2,
    1: 2 --0:0/1.0--> 0. State 2 final at 2.0."""
    return from_arrays(0, np.array([np.inf, np.inf, 2.0], np.float32), src=np.array([0, 1, 1, 2]),
                       dest=np.array([1, 2, 2, 0]), ilabel=np.array([1, 2, 0, 0]), olabel=np.array([5, 6, 7, 0]),
                       weight=np.array([0.5, 0.25, 0.125, 1.0]))


COSTS = np.array([[3.0, 4.0], [5.0, 6.0]], np.float32)  # (T, P) acoustic costs


def test_records_become_raw_lattice_arcs() -> None:
    graph = _graph()
    assert graph.emitting.num_arcs == 2 and graph.epsilon.num_arcs == 2
    # (frame, src state, code): emitting arc 0 at frame 0, emitting arc 1 at frame 1, epsilon arc 0 (code -1)
    # within frame 1
    frame, src, code = np.array([0, 1, 1]), np.array([0, 1, 1]), np.array([0, 1, -1])
    raw = records_to_raw(graph, COSTS, frame, src, code)
    assert (raw.num_frames, raw.start_state) == (2, 0)
    # emitting first, then epsilon
    assert raw.src_frame.tolist() == [0, 1, 1] and raw.dst_frame.tolist() == [1, 2, 1]
    assert raw.src_state.tolist() == [0, 1, 1] and raw.dst_state.tolist() == [1, 2, 2]
    assert raw.ilabel.tolist() == [1, 2, 0] and raw.olabel.tolist() == [5, 6, 7]
    assert raw.graph_cost.tolist() == [0.5, 0.25, 0.125]
    # frame 0 column 0 (ilabel 1): 3.0; frame 1 column 1 (ilabel 2): 6.0; epsilon: 0
    assert raw.acoustic_cost.tolist() == [3.0, 6.0, 0.0]


def test_a_partial_keeps_emitting_links_ending_by_its_frames_and_epsilon_links_of_its_tokens() -> None:
    records = np.array([[0, 0, 0], [1, 1, -1], [1, 1, 1], [2, 2, -2], [2, 0, 0]])
    # 2 frames: emitting links made at frames 0 and 1 (ending by frame 2), epsilon links at frames 0..2
    assert partial_records(records, 2).tolist() == [[0, 0, 0], [1, 1, -1], [1, 1, 1], [2, 2, -2]]
    assert partial_records(records, 1).tolist() == [[0, 0, 0], [1, 1, -1]]
    assert partial_records(records, 0).tolist() == []


def test_epsilon_links_stay_within_the_beam_of_a_held_token() -> None:
    graph = _graph()
    states, costs = np.array([1, 2]), np.array([1.0, 0.5])
    token_cost = np.array([np.inf, 1.0, 1.0])  # state 0 holds no token
    # 1 -> 2: 1.0 + 0.125 = 1.125 <= 1.0 + 0.125: kept at a beam of exactly 0.125; 2 -> 0: no token at 0
    src, codes = epsilon_links(graph, states, costs, token_cost, 0.125)
    assert src.tolist() == [1] and codes.tolist() == [-1]
    src, codes = epsilon_links(graph, states, costs, token_cost, 0.1)  # 1.125 > 1.1: dropped
    assert src.tolist() == [] and codes.tolist() == []


def test_a_partial_lattice_ends_anywhere_at_cost_0() -> None:
    graph = _graph()
    records = np.array([[0, 0, 0], [1, 1, 1]])
    # after 1 frame only the link 0 -> 1 remains; state 1 is not final in the graph but is in the partial
    lattice = partial_lattice(graph, COSTS, records, 1, 10.0)
    assert lattice is not None
    words, graph_cost, acoustic_cost = lattice.best_path()
    assert (words, graph_cost, acoustic_cost) == ((5,), 0.5, 3.0)


def test_lane_lattices_need_one_record_array_per_utterance() -> None:
    graph = _graph()
    batch = LaneBatch.of(["a", "b"], [COSTS, COSTS[:1]], ())
    with pytest.raises(ValueError, match="1 record arrays for 2 utterances"):
        lane_lattices(graph, batch, [np.zeros((0, 3), np.int32)], 1.0)
    records = [np.array([[0, 0, 0], [1, 1, 1]], np.int32), np.zeros((0, 3), np.int32)]
    a, b = lane_lattices(graph, batch, records, 10.0)
    # a: 0 -> 1 -> 2 final 2.0: graph 0.5 + 0.25 + 2.0, acoustic 3 + 6; b: no record, no lattice
    assert a.best_path() == ((5, 6), 2.75, 9.0) and b is None
