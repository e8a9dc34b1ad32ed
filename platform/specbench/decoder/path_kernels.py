"""What the lane decoder's host reads from its downloads, compiled with numba: best paths from backpointer
codes, many at once (`traceback.read_flat_paths`), and lattice records grouped by utterance (`group_records`).

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
        i, j = 0, n - 1
        while i < j:  # into path order, in place (a copy here was an allocation per move)
            out[i], out[j] = out[j], out[i]
            i += 1
            j -= 1
    return n


@entry("(int64[::1], int64[::1], int64, int64[::1], int64[::1], float32[:, ::1], float32[::1], int32[::1], "
       "int32[::1], float32[::1], int32[::1], float32[::1], int64[::1], int64[::1], int64[::1], int64[::1], "
       "int64[::1], int64, int64)",
       returns="Tuple((float64[::1], float64[::1], int64[::1], int64[::1], int64[::1], int64[::1]))")
def _read_paths(codes, offsets, base, final_states, rows, costs, emit_weight, emit_ilabel, emit_olabel,
                eps_weight, eps_olabel, final, last_arc, src, move_offsets, move_dest, arc_src, closed, longest):
    """Path p: codes[offsets[p]:offsets[p + 1]], ending in final_states[p], its frame t's costs in row
    rows[p] + t of `costs`; a move has at most `longest` arcs. Returns graph and acoustic costs, emitting
    arcs, and the words (word_offsets, words, starts: for each word, the emitting arcs before it). One pass,
    the words written into room for the most a code can carry (its emitting arc and its move's arcs)."""
    n = offsets.shape[0] - 1
    graph_cost = np.empty(n, dtype=np.float64)
    acoustic_cost = np.empty(n, dtype=np.float64)
    frames = np.zeros(n, dtype=np.int64)
    word_offsets = np.zeros(n + 1, dtype=np.int64)
    scratch = np.empty(longest, dtype=np.int64)
    room = codes.shape[0] * (1 + longest)
    words = np.empty(room, dtype=np.int64)
    starts = np.empty(room, dtype=np.int64)
    w = 0
    for p in range(n):
        g = np.float64(final[final_states[p]])
        a = 0.0
        t = 0
        row = rows[p]
        for i in range(offsets[p], offsets[p + 1]):
            c = codes[i]
            move = c % base - 1 if c >= 0 else -1 - c
            if c >= 0:
                arc = c // base
                g += np.float64(emit_weight[arc])
                a += np.float64(costs[row + t, emit_ilabel[arc] - 1])
                if emit_olabel[arc] != 0:
                    words[w] = emit_olabel[arc]
                    starts[w] = t
                    w += 1
                t += 1
            if move >= 0:
                arcs = _move_arcs(move, last_arc, src, move_offsets, move_dest, arc_src, closed, scratch)
                for k in range(arcs):
                    g += np.float64(eps_weight[scratch[k]])
                    if eps_olabel[scratch[k]] != 0:
                        words[w] = eps_olabel[scratch[k]]
                        starts[w] = t
                        w += 1
        graph_cost[p], acoustic_cost[p], frames[p] = g, a, t
        word_offsets[p + 1] = w
    return graph_cost, acoustic_cost, frames, word_offsets, words[:w].copy(), starts[:w].copy()


@entry("(int32[:, ::1], int64[:, ::1])")  # numba's JIT, which releases the GIL (only lattices need it)
def _group_records(records, placements):
    """Lattice records (K, 4 int32: lane, frame step, src state, code) by utterance, from the lanes' placements
    (P, 3: lane, first step, utterance; a lane's in step order): a record belongs to its lane's last placement
    that began at or before its step (`lanes.records_by_utterance`, the numpy reference). Returns the records
    as (K, 3) int32 (frame of the utterance, src, code) grouped by utterance in ascending order, each utterance's in
    the order made (counting sorts), the utterances present and where each one's records start (G + 1)."""
    lanes = 0
    for p in range(placements.shape[0]):
        lanes = max(lanes, placements[p, 0] + 1)
    first = np.zeros(lanes + 1, dtype=np.int64)  # placements by lane, in the order made
    for p in range(placements.shape[0]):
        first[placements[p, 0] + 1] += 1
    for lane in range(lanes):
        first[lane + 1] += first[lane]
    by_lane = np.empty(placements.shape[0], dtype=np.int64)
    fill = first[:-1].copy()
    for p in range(placements.shape[0]):
        by_lane[fill[placements[p, 0]]] = p
        fill[placements[p, 0]] += 1
    count = records.shape[0]
    utt = np.empty(count, dtype=np.int64)
    frame = np.empty(count, dtype=np.int64)
    utts = 0
    for k in range(count):
        lane, step = records[k, 0], records[k, 1]
        lo, hi = (first[lane], first[lane + 1]) if lane < lanes else (0, 0)
        while lo < hi:  # the first placement of the lane after `step`
            mid = (lo + hi) // 2
            if placements[by_lane[mid], 1] <= step:
                lo = mid + 1
            else:
                hi = mid
        if lane >= lanes or lo == first[lane]:
            raise ValueError("a lattice record precedes every placement of its lane")
        p = by_lane[lo - 1]
        utt[k], frame[k] = placements[p, 2], step - placements[p, 1]
        utts = max(utts, utt[k] + 1)
    start = np.zeros(utts + 1, dtype=np.int64)
    for k in range(count):
        start[utt[k] + 1] += 1
    present = 0
    for u in range(utts):
        present += start[u + 1] > 0
        start[u + 1] += start[u]
    grouped = np.empty((count, 3), dtype=np.int32)
    fill = start[:-1].copy()
    for k in range(count):
        at = fill[utt[k]]
        fill[utt[k]] += 1
        grouped[at, 0], grouped[at, 1], grouped[at, 2] = frame[k], records[k, 2], records[k, 3]
    keys = np.empty(present, dtype=np.int64)
    bounds = np.empty(present + 1, dtype=np.int64)
    g = 0
    for u in range(utts):
        if start[u + 1] > start[u]:
            keys[g], bounds[g] = u, start[u]
            g += 1
    bounds[present] = count
    return grouped, keys, bounds


def group_records(records: np.ndarray, placements: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`_group_records` on C arrays: records (K, 4) int32 (`lane_tables.RECORD_DTYPE`), placements (P, 3) int64."""
    return _group_records(np.ascontiguousarray(records, dtype=np.int32),
                          np.ascontiguousarray(placements, dtype=np.int64))
