"""From the decoders' lattice records to lattices: each record is one kept candidate, a closed arc (an
emitting arc followed by an epsilon-closure move, see epsilon.ClosedArcs) taken from a token at some frame.
It becomes the graph arcs it stands for (the emitting arc, then the move's epsilon arcs, with their word
labels and weights) between (frame, state) nodes; `lattice.prune_lattice` then applies Kaldi's
forward-backward lattice pruning. Shared by the CPU backend and the lane (GPU and twin) backends.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specbench.decoder.epsilon import EpsilonMoves
from specbench.decoder.lattice import RawLattice, WordLattice, prune_lattice
from specbench.decoder.search import gather_arcs
from specbench.wfst.graph import CsrGraph


@dataclass(frozen=True)
class MovePaths:
    """The epsilon arcs of every closure move, CSR: move m's arcs are arcs[offsets[m]:offsets[m + 1]]."""

    offsets: np.ndarray
    degree: np.ndarray
    arcs: np.ndarray

    @classmethod
    def build(cls, moves: EpsilonMoves, num_states: int) -> MovePaths:
        """Vectorized `EpsilonMoves.arc_path` for all moves: a move's path is its prefix move's path (the
        move from the same source to its last arc's source) plus its last arc."""
        count = moves.num_moves
        if not moves.closed:
            ones = np.ones(count, dtype=np.int64)
            return cls(np.arange(count + 1, dtype=np.int64), ones, moves.last_arc.astype(np.int64))
        key = moves.src.astype(np.int64) * num_states + moves.dest
        via = moves.arc_src[moves.last_arc]
        has_prefix = via != moves.src
        prefix = np.full(count, -1, dtype=np.int64)
        prefix[has_prefix] = np.searchsorted(key, moves.src[has_prefix].astype(np.int64) * num_states
                                             + via[has_prefix])
        length = np.ones(count, dtype=np.int64)
        cur = prefix.copy()
        while (alive := cur >= 0).any():
            length[alive] += 1
            cur[alive] = prefix[cur[alive]]
        offsets = np.zeros(count + 1, dtype=np.int64)
        np.cumsum(length, out=offsets[1:])
        arcs = np.empty(int(offsets[-1]), dtype=np.int64)
        at, cur = offsets[1:] - 1, np.arange(count, dtype=np.int64)
        while cur.shape[0]:
            arcs[at] = moves.last_arc[cur]
            keep = prefix[cur] >= 0
            at, cur = at[keep] - 1, prefix[cur[keep]]
        return cls(offsets, length, arcs)


def records_to_raw(graph: CsrGraph, moves: EpsilonMoves, paths: MovePaths, num_frames: int,
                   costs: np.ndarray, frame: np.ndarray, src_state: np.ndarray, code: np.ndarray) -> RawLattice:
    """The RawLattice of one utterance: the start state's closure moves at frame 0, and every record
    (frame, src_state, closed-arc code) as its graph arcs. costs: (T, P) float32 acoustic costs."""
    emit, eps = graph.emitting, graph.epsilon
    base = moves.num_moves + 1
    lo, hi = int(moves.offsets[graph.start]), int(moves.offsets[graph.start + 1])
    arc = code // base
    move = code % base - 1
    # emitting arcs: (f, src) -> (f + 1, dest)
    parts = [(frame, src_state, frame + 1, emit.dest[arc], emit.ilabel[arc], emit.olabel[arc],
              emit.weight[arc].astype(np.float64),
              costs[frame, emit.ilabel[arc] - 1].astype(np.float64))]
    # epsilon arcs of the records' moves at frame f + 1, and of the start closure at frame 0
    with_move = move >= 0
    eps_frames = [frame[with_move] + 1, np.zeros(hi - lo, dtype=np.int64)]
    eps_moves = [move[with_move], np.arange(lo, hi, dtype=np.int64)]
    for frames, chosen in zip(eps_frames, eps_moves, strict=True):
        index, counts = gather_arcs(paths.offsets, paths.degree, chosen)
        e = paths.arcs[index]
        f = frames.repeat(counts)
        parts.append((f, moves.arc_src[e], f, eps.dest[e], np.zeros(e.shape[0], dtype=np.int32), eps.olabel[e],
                      eps.weight[e].astype(np.float64), np.zeros(e.shape[0])))
    columns = [np.concatenate([p[i] for p in parts]) for i in range(8)]
    ints = [c.astype(np.int32) for c in columns[:6]]
    return RawLattice(num_frames, graph.start, *ints, columns[6], columns[7])


def lattice_from_records(graph: CsrGraph, moves: EpsilonMoves, paths: MovePaths, costs: np.ndarray,
                         records: np.ndarray, lattice_beam: float) -> WordLattice | None:
    """records: (K, 3) int64 (frame, src state, closed-arc code) of one utterance."""
    raw = records_to_raw(graph, moves, paths, costs.shape[0], costs, records[:, 0], records[:, 1], records[:, 2])
    return prune_lattice(raw, graph.final, lattice_beam)


def lane_lattices(lg, batch, records: np.ndarray, lattice_beam: float) -> list[WordLattice | None]:
    """Per lane of a lane batch: its lattice from the (K, 4) records (lane, frame, src state, entry)."""
    paths = lane_move_paths(lg)
    order = np.argsort(records[:, 0], kind="stable")
    records = records[order]
    bounds = np.searchsorted(records[:, 0], np.arange(len(batch.utt_ids) + 1))
    out = []
    for lane in range(len(batch.utt_ids)):
        mine = records[bounds[lane]:bounds[lane + 1]]
        frames = int(batch.lengths[lane])
        triples = np.stack([mine[:, 1], mine[:, 2], lg.code[mine[:, 3]]], axis=1)
        out.append(lattice_from_records(lg.graph, lg.moves, paths, batch.costs[lane, :frames], triples,
                                        lattice_beam))
    return out


_PATHS_CACHE: dict[int, tuple[object, MovePaths]] = {}


def lane_move_paths(lg) -> MovePaths:
    """MovePaths of a LaneGraph, built once per graph object."""
    cached = _PATHS_CACHE.get(id(lg.moves))
    if cached is None or cached[0] is not lg.moves:
        cached = (lg.moves, MovePaths.build(lg.moves, lg.num_states))
        _PATHS_CACHE.clear()
        _PATHS_CACHE[id(lg.moves)] = cached
    return cached[1]
