"""Reading a best path out of the CPU decoder's backpointer codes.

A path is a list of move codes from the start token to the best final token (see cpu.py): a code
`c >= 0` is emitting arc `c // base` followed by epsilon move `c % base - 1` (none when -1); a code `c < 0`
is epsilon move `-1 - c` alone. `base` is the number of epsilon moves + 1.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specbench.decoder.epsilon import EpsilonMoves
from specbench.wfst.graph import CsrGraph


@dataclass(frozen=True)
class BestPath:
    """What a path yields: word ids with the frame count before each word's label, and its costs.

    word_ids: output labels != 0 in path order. word_starts: for each word, the number of emitting arcs
    before the arc that carries its label. graph_cost: float64 sum of the float32 arc weights plus the
    final weight. acoustic_cost: float64 sum of the float32 acoustic costs of the emitting arcs.
    num_frames: emitting arcs on the path.
    """

    word_ids: tuple[int, ...]
    word_starts: tuple[int, ...]
    graph_cost: float
    acoustic_cost: float
    num_frames: int

    @property
    def word_end_frames(self) -> tuple[int, ...]:
        """Per word, the frame before the next word's label (num_frames - 1 for the last word); see
        DecodeResult.word_end_frames."""
        if not self.word_ids:
            return ()
        return tuple(start - 1 for start in self.word_starts[1:]) + (self.num_frames - 1,)


def read_path(codes: list[int], base: int, graph: CsrGraph, moves: EpsilonMoves, costs: np.ndarray,
              final_state: int) -> BestPath:
    """The BestPath of `codes` (path order) ending in `final_state`.

    costs: (T, P) float32 acoustic costs (-acoustic_scale * loglikes) of the frames decoded.
    """
    code = np.asarray(codes, dtype=np.int64)
    emitting = code >= 0
    arc = (code // base)[emitting]
    move = np.where(emitting, code % base - 1, -1 - code)
    emit, eps = graph.emitting, graph.epsilon
    frames = int(arc.shape[0])
    graph_cost = float(graph.final[final_state]) + float(emit.weight[arc].astype(np.float64).sum())
    acoustic_cost = float(costs[np.arange(frames), emit.ilabel[arc] - 1].astype(np.float64).sum())
    arc_olabel = iter(emit.olabel[arc].tolist())
    words: list[int] = []
    starts: list[int] = []
    frame = 0
    for is_emitting, eps_move in zip(emitting.tolist(), move.tolist(), strict=True):
        if is_emitting:
            if label := next(arc_olabel):
                words.append(label)
                starts.append(frame)
            frame += 1
        for eps_arc in moves.arc_path(eps_move) if eps_move >= 0 else ():
            graph_cost += float(eps.weight[eps_arc])
            if label := int(eps.olabel[eps_arc]):
                words.append(label)
                starts.append(frame)
    return BestPath(tuple(words), tuple(starts), graph_cost, acoustic_cost, frames)


def partial_words(word_ids: tuple[int, ...], last_state: int, final: np.ndarray) -> tuple[int, ...]:
    """The words of a partial best path that are complete: every word followed by another word's label,
    and the last word too when the path's state may end the utterance (finite final weight)."""
    if word_ids and not np.isfinite(final[last_state]):
        return word_ids[:-1]
    return word_ids
