"""Best paths read from backpointer codes, many at once, compiled with numba (traceback.read_paths).

A path is a run of codes (traceback.py): `c >= 0` is emitting arc `c // base` followed by epsilon move
`c % base - 1` (none when -1), `c < 0` is epsilon move `-1 - c` alone. For each path this gives its word
labels (emitting and epsilon arcs, in path order) with the emitting arcs before each, its graph cost (the final
weight, then every arc's float32 weight as float64, added in path order) and its acoustic cost (the emitting
arcs' float32 costs as float64, added in frame order). Two passes: the words are counted, then written.
"""

from __future__ import annotations

import numpy as np

from specbench.decoder.compiled_cache import entry, kernel


@kernel
def _move_arcs(move, last_arc, src, offsets, dest, arc_src, closed, out):
    """The epsilon arcs of `move` into `out` in path order (epsilon.EpsilonMoves.arc_path); their count."""
    out[0] = last_arc[move]
    n = 1
    if closed:
        source = src[move]
        lo, hi = offsets[source], offsets[source + 1]
        while arc_src[out[n - 1]] != source:
            if n > hi - lo:
                raise RuntimeError("epsilon closure: a move's path does not lead back to its source")
            via = arc_src[out[n - 1]]
            out[n] = last_arc[lo + np.searchsorted(dest[lo:hi], via)]
            n += 1
        out[:n] = out[:n][::-1].copy()
    return n


@entry("(int64[::1], int64[::1], int64, int64[::1], int64[::1], float32[:, ::1], float32[::1], int32[::1], "
       "int32[::1], float32[::1], int32[::1], float32[::1], int64[::1], int64[::1], int64[::1], int64[::1], "
       "int64[::1], int64, int64)")
def _read_paths(codes, offsets, base, final_states, rows, costs, emit_weight, emit_ilabel, emit_olabel,
                eps_weight, eps_olabel, final, last_arc, src, move_offsets, move_dest, arc_src, closed, longest):
    """Path p: codes[offsets[p]:offsets[p + 1]], ending in final_states[p], its frame t's costs in row
    rows[p] + t of `costs`; a move has at most `longest` arcs. Returns graph and acoustic costs, emitting arcs, and the words (word_offsets,
    words, starts: for each word, the emitting arcs before it)."""
    n = offsets.shape[0] - 1
    graph_cost = np.empty(n, dtype=np.float64)
    acoustic_cost = np.empty(n, dtype=np.float64)
    frames = np.zeros(n, dtype=np.int64)
    word_offsets = np.zeros(n + 1, dtype=np.int64)
    scratch = np.empty(longest, dtype=np.int64)
    for write in range(2):
        if write:
            words = np.empty(word_offsets[n], dtype=np.int64)
            starts = np.empty(word_offsets[n], dtype=np.int64)
        for p in range(n):
            g = np.float64(final[final_states[p]])
            a = 0.0
            t = 0
            w = word_offsets[p]
            for i in range(offsets[p], offsets[p + 1]):
                c = codes[i]
                move = c % base - 1 if c >= 0 else -1 - c
                if c >= 0:
                    arc = c // base
                    g += np.float64(emit_weight[arc])
                    a += np.float64(costs[rows[p] + t, emit_ilabel[arc] - 1])
                    if emit_olabel[arc] != 0:
                        if write:
                            words[w] = emit_olabel[arc]
                            starts[w] = t
                        w += 1
                    t += 1
                if move >= 0:
                    for k in range(_move_arcs(move, last_arc, src, move_offsets, move_dest, arc_src, closed,
                                              scratch)):
                        g += np.float64(eps_weight[scratch[k]])
                        if eps_olabel[scratch[k]] != 0:
                            if write:
                                words[w] = eps_olabel[scratch[k]]
                                starts[w] = t
                            w += 1
            if write:
                graph_cost[p], acoustic_cost[p], frames[p] = g, a, t
            else:
                word_offsets[p + 1] = w
    return graph_cost, acoustic_cost, frames, word_offsets, words, starts
