"""Reading best paths out of the decoders' backpointer codes: one path (`read_path`, the CPU decoder's), many
laid end to end in one compiled call (`read_flat_paths`, the lane decoders'), and the complete words of a
partial path (`partial_words`).

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
    flat = np.asarray(codes, dtype=np.int64)
    return read_flat_paths(flat, np.array([0, flat.shape[0]], dtype=np.int64), base, graph, moves,
                           np.asarray(costs, dtype=np.float32), np.zeros(1, np.int64),
                           np.array([final_state]))[0]


def read_flat_paths(codes: np.ndarray, offsets: np.ndarray, base: int, graph: CsrGraph, moves: EpsilonMoves,
                    costs: np.ndarray, rows: np.ndarray, final_states: np.ndarray) -> list[BestPath]:
    """The BestPath of each of the paths laid end to end in `codes`: path p is
    codes[offsets[p]:offsets[p + 1]] (int64), it ends in final_states[p], and its frame t's acoustic costs are
    row rows[p] + t of `costs` ((R, P) float32). One compiled call (`path_kernels`): the graph cost is the
    final weight plus every arc's float32 weight as float64, added in path order; the acoustic cost the
    emitting arcs' costs, added in frame order."""
    from specbench.decoder.path_kernels import _read_paths

    emit, eps = graph.emitting, graph.epsilon
    graph_cost, acoustic_cost, frames, word_offsets, words, starts = _read_paths(
        np.ascontiguousarray(codes, dtype=np.int64), np.ascontiguousarray(offsets, dtype=np.int64), int(base),
        np.asarray(final_states, dtype=np.int64), np.asarray(rows, dtype=np.int64),
        np.ascontiguousarray(costs, dtype=np.float32), emit.weight, emit.ilabel, emit.olabel, eps.weight,
        eps.olabel, graph.final, *(np.ascontiguousarray(a, dtype=np.int64) for a in (
            moves.last_arc, moves.src, moves.offsets, moves.dest, moves.arc_src)), int(moves.closed),
        moves.longest_arc_path)
    word_list, start_list = words.tolist(), starts.tolist()
    bounds = word_offsets.tolist()
    graph_list, acoustic_list, frame_list = graph_cost.tolist(), acoustic_cost.tolist(), frames.tolist()
    return [BestPath(tuple(word_list[lo:hi]), tuple(start_list[lo:hi]), graph_list[p], acoustic_list[p],
                     frame_list[p]) for p, (lo, hi) in enumerate(zip(bounds[:-1], bounds[1:]))]


def word_end_states(graph: CsrGraph) -> np.ndarray:
    """(S,) bool: the states from which a final state is reachable through epsilon arcs that put out no word
    (the state itself included). In an LG or HCLG such a state lies between words: the last word's tokens
    have all been emitted, and the sentence may end there through G's back-off arcs (arpa2fst gives a final
    weight only to histories with an explicit `</s>` n-gram, so most word ends are final only this way)."""
    reach = np.isfinite(graph.final)
    eps = graph.epsilon
    wordless = eps.olabel == 0
    src = np.repeat(np.arange(graph.num_states, dtype=np.int64), np.diff(eps.offsets))[wordless]
    dest = eps.dest[wordless]
    while True:  # one round per epsilon arc of the longest chain needed (back-off chains are short)
        grows = reach[dest] & ~reach[src]
        if not grows.any():
            return reach
        reach[src[grows]] = True


def partial_words(word_ids: tuple[int, ...], last_state: int, word_end: np.ndarray) -> tuple[int, ...]:
    """The words of a partial best path that are complete: every word followed by another word's label,
    and the last word too when the path's state lies between words (`word_end[last_state]`, from
    `word_end_states`: a final state is reachable without another word or frame). So a word belongs to a
    partial hypothesis at frame t once the traceback shows its last token emitted by t, and a partial never
    counts a word that is still being spoken."""
    if word_ids and not word_end[last_state]:
        return word_ids[:-1]
    return word_ids
