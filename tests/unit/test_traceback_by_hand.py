"""`traceback.read_path` by hand: the move codes of a path through a tiny graph (a bare epsilon move before
the first frame, emitting arcs bare and followed by an epsilon move) give its words in path order, the frame
count before each word (so the word end frames), the graph cost (float32 weights and the final weight of the
given final state, summed as float64) and the acoustic cost (the emitting arcs' frame costs)."""

from __future__ import annotations

import numpy as np
import pytest

from specbench.decoder.epsilon import build_moves
from specbench.decoder.traceback import read_path
from specbench.wfst.graph import from_arrays

pytestmark = pytest.mark.unit

# epsilon arcs: #0 0 -> 1 word 9 /0.1, #1 3 -> 4 word 8 /0.2; emitting arcs: #0 1 -1-> 2 /0.3,
# #1 2 -2:word 7-> 3 /0.4, #2 2 -1-> 2 /0.5; final: state 3 1.0, state 4 0.25
GRAPH = from_arrays(0, np.array([np.inf, np.inf, np.inf, 1.0, 0.25], np.float32), src=np.array([0, 3, 1, 2, 2]),
                    dest=np.array([1, 4, 2, 3, 2]), ilabel=np.array([0, 0, 1, 2, 1]),
                    olabel=np.array([9, 8, 0, 7, 0]), weight=np.array([0.1, 0.2, 0.3, 0.4, 0.5]))
COSTS = np.array([[0.7, 9.0], [1.1, 9.0], [9.0, 1.3]], np.float32)  # (frames, columns): label j is column j - 1


def _f32_sum(*values: float) -> float:
    return sum(float(np.float32(v)) for v in values)


@pytest.mark.parametrize("codes, final_state, words, starts, ends, weights", [
    # base 3 (2 epsilon moves + 1): -1 = move 0 alone; 0 = arc 0; 6 = arc 2; 5 = arc 1 then move 1; 3 = arc 1
    ([-1, 0, 6, 5], 4, (9, 7, 8), (0, 2, 3), (1, 2, 2), (0.1, 0.3, 0.5, 0.4, 0.2, 0.25)),
    ([-1, 0, 6, 3], 3, (9, 7), (0, 2), (1, 2), (0.1, 0.3, 0.5, 0.4, 1.0)),
])
def test_read_path_gives_words_starts_and_costs(codes, final_state, words, starts, ends, weights) -> None:
    moves = build_moves(GRAPH.epsilon, "arcs")
    assert moves.num_moves == 2 and GRAPH.emitting.ilabel.tolist() == [1, 2, 1]
    path = read_path(codes, 3, GRAPH, moves, COSTS, final_state)
    assert (path.word_ids, path.word_starts, path.word_end_frames, path.num_frames) == (words, starts, ends, 3)
    assert path.graph_cost == _f32_sum(*weights)
    assert path.acoustic_cost == _f32_sum(0.7, 1.1, 1.3)  # frames 0, 1 on label 1, frame 2 on label 2
