"""Epsilon moves for the CPU decoder's non-emitting step (Kaldi's `ProcessNonemitting`).

A *move* takes a token from state s to state d without consuming a frame, at a cost, along one or more
epsilon arcs. Two kinds of move tables exist, with one CSR layout (`EpsilonMoves`):

- the epsilon arcs themselves (`closed=False`): the decoder iterates them to a fixed point, re-expanding
  every state whose token improved (a label-correcting shortest-path search, valid for any weights without
  negative cycles);
- the epsilon closure (`closed=True`, built by `epsilon_closure` when every epsilon weight is >= 0): one
  move per pair (s, d) with d reachable from s over epsilon arcs, at the shortest distance. One round of
  moves then reaches the same fixed point: with non-negative weights every prefix of a path costs no more
  than the path, so Kaldi's pruning of intermediate tokens above the cutoff prunes exactly the moves whose
  total cost is above it.

Each move remembers the epsilon arc that ends it (`last_arc`), so `arc_path` recovers the arcs of a move
for the traceback (the word labels on epsilon arcs).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property

import numpy as np

from specbench.decoder.search import gather_arcs
from specbench.wfst.graph import ArcSet

DEFAULT_MAX_CLOSURE_FACTOR = 8  # give up the closure when it has more moves than this many per epsilon arc


@dataclass(frozen=True)
class EpsilonMoves:
    """Epsilon moves in CSR form: the moves out of state s are [offsets[s], offsets[s + 1]).

    offsets: (S + 1,) int64. degree: (S,) int64 moves per state.
    src, dest: (M,) intp source and destination states.
    cost: (M,) float64 cost of the move (sum of its arcs' float32 weights).
    last_arc: (M,) intp index (into the graph's epsilon ArcSet) of the move's last arc.
    arc_src: (num epsilon arcs,) intp source state of each epsilon arc.
    closed: True when the moves are the epsilon closure (moves of one state sorted by dest).
    open_because: when not closed, why ("epsilon mode 'arcs'", a negative weight, the closure's size).
    """

    offsets: np.ndarray
    degree: np.ndarray
    src: np.ndarray
    dest: np.ndarray
    cost: np.ndarray
    last_arc: np.ndarray
    arc_src: np.ndarray
    closed: bool
    open_because: str = "epsilon mode 'arcs'"

    @property
    def num_moves(self) -> int:
        """Number of moves M."""
        return int(self.dest.shape[0])

    @cached_property
    def longest_arc_path(self) -> int:
        """The most epsilon arcs a move's `arc_path` can have (a closure move's: its source's moves + 1)."""
        return int(self.degree.max()) + 1 if self.closed and self.degree.shape[0] else 1

    def arc_path(self, move: int) -> list[int]:
        """The epsilon arc indices of `move`, in path order (for a closure move: its prefixes' last arcs)."""
        path = [int(self.last_arc[move])]
        if not self.closed:
            return path
        source = int(self.src[move])
        lo, hi = int(self.offsets[source]), int(self.offsets[source + 1])
        while (via := int(self.arc_src[path[-1]])) != source:
            if len(path) > hi - lo:
                raise RuntimeError(f"epsilon closure: the path of move {move} does not lead back to {source}")
            prefix = lo + int(np.searchsorted(self.dest[lo:hi], via))
            path.append(int(self.last_arc[prefix]))
        path.reverse()
        return path


def _arc_sources(eps: ArcSet) -> np.ndarray:
    """(num epsilon arcs,) intp source state of each arc."""
    return np.repeat(np.arange(eps.num_states, dtype=np.intp), eps.out_degree)


def epsilon_arcs(eps: ArcSet) -> EpsilonMoves:
    """The epsilon arcs as single-arc moves (closed=False); move i is epsilon arc i."""
    arc_src = _arc_sources(eps)
    return EpsilonMoves(
        offsets=eps.offsets, degree=eps.out_degree, src=arc_src, dest=eps.dest.astype(np.intp),
        cost=eps.weight.astype(np.float64), last_arc=np.arange(eps.num_arcs, dtype=np.intp), arc_src=arc_src,
        closed=False,
    )


def _best_per_pair(num_states: int, parts: list[tuple[np.ndarray, ...]]) -> tuple[np.ndarray, ...]:
    """Keep, per (src, dest) pair, the lowest (cost, is_new, last_arc) entry of the concatenated parts.

    Each part is (src, dest, cost, last_arc, is_new); returns the same five arrays sorted by (src, dest).
    """
    src, dest, cost, last, new = (np.concatenate(cols) for cols in zip(*parts, strict=True))
    key = src.astype(np.int64) * num_states + dest
    order = np.lexsort((last, new, cost, key))
    key = key[order]
    first = np.ones(key.shape[0], dtype=bool)
    first[1:] = key[1:] != key[:-1]
    keep = order[first]
    return src[keep], dest[keep], cost[keep], last[keep], new[keep]


def _extend(frontier: tuple[np.ndarray, ...], eps: ArcSet, w64: np.ndarray) -> tuple[np.ndarray, ...]:
    """Every frontier move followed by one more epsilon arc (cycles back to the source dropped)."""
    f_src, f_dest, f_cost = frontier[:3]
    arcs, counts = gather_arcs(eps.offsets, eps.out_degree, f_dest)
    src, dest = f_src.repeat(counts), eps.dest[arcs].astype(np.intp)
    keep = src != dest
    ones = np.ones(int(keep.sum()), dtype=bool)
    return src[keep], dest[keep], (f_cost.repeat(counts) + w64[arcs])[keep], arcs[keep], ones


def epsilon_closure(eps: ArcSet, max_moves: int | None = None) -> EpsilonMoves | None:
    """The epsilon closure as moves (closed=True), or None when it does not apply.

    None when an epsilon weight is negative (or NaN) or the closure would exceed `max_moves` moves
    (default: DEFAULT_MAX_CLOSURE_FACTOR per epsilon arc, at least 10^6). Built by rounds of one-arc
    extensions of the moves that improved, until none does; ties keep the earlier move, then the lower
    last arc. Moves from a state to itself are left out (they cannot improve a token).
    """
    if eps.num_arcs and not bool(np.all(eps.weight >= 0)):
        return None
    limit = max(DEFAULT_MAX_CLOSURE_FACTOR * eps.num_arcs, 10**6) if max_moves is None else max_moves
    num_states, w64 = eps.num_states, eps.weight.astype(np.float64)
    arc_src = _arc_sources(eps)
    arcs = np.arange(eps.num_arcs, dtype=np.intp)
    keep = arc_src != eps.dest
    first = (arc_src[keep], eps.dest[keep].astype(np.intp), w64[keep], arcs[keep],
             np.ones(int(keep.sum()), dtype=bool))
    moves = _best_per_pair(num_states, [first])
    frontier = moves
    while frontier[0].shape[0]:
        old = moves[:4] + (np.zeros(moves[0].shape[0], dtype=bool),)
        moves = _best_per_pair(num_states, [old, _extend(frontier, eps, w64)])
        if moves[0].shape[0] > limit:
            return None
        improved = moves[4]
        frontier = tuple(column[improved] for column in moves)
    src, dest, cost, last = moves[:4]
    offsets = np.zeros(num_states + 1, dtype=np.int64)
    np.cumsum(np.bincount(src, minlength=num_states), out=offsets[1:])
    return EpsilonMoves(
        offsets=offsets, degree=np.diff(offsets), src=src, dest=dest, cost=cost, last_arc=last,
        arc_src=arc_src, closed=True,
    )


def why_no_closure(eps: ArcSet, max_moves: int | None = None) -> str:
    """Why `epsilon_closure(eps, max_moves)` gave None."""
    if eps.num_arcs and not bool(np.all(eps.weight >= 0)):
        return "an epsilon weight is negative (or NaN)"
    limit = max(DEFAULT_MAX_CLOSURE_FACTOR * eps.num_arcs, 10**6) if max_moves is None else max_moves
    return f"the epsilon closure would have more than {limit:,} moves"


def build_moves(eps: ArcSet, mode: str = "auto", max_moves: int | None = None) -> EpsilonMoves:
    """Epsilon moves for `mode`: "closure" (error when it does not apply), "arcs", or "auto" (the closure
    when it applies, else the arcs, saying why in `open_because`)."""
    if mode not in ("auto", "closure", "arcs"):
        raise ValueError(f"epsilon mode must be 'auto', 'closure' or 'arcs', got {mode!r}")
    if mode == "arcs":
        return epsilon_arcs(eps)
    closure = epsilon_closure(eps, max_moves)
    if closure is not None:
        return closure
    why = why_no_closure(eps, max_moves)
    if mode == "closure":
        raise ValueError(f"epsilon mode 'closure' does not apply: {why}; use epsilon mode 'arcs'")
    return replace(epsilon_arcs(eps), open_because=why)


@dataclass(frozen=True)
class ClosedArcs:
    """Emitting arcs each followed by nothing or by one epsilon-closure move, as CSR over source states.

    The entries of state s are [offsets[s], offsets[s + 1]), ordered by emitting arc, then the bare arc
    before its moves, then by move; entry e stands for emitting arc `arc = code // base` followed by move
    `code % base - 1` (none when -1), with base = moves.num_moves + 1 (so codes ascend within a state).
    offsets: (S + 1,) int64; degree: (S,) int64; dest: (N,) intp final state of the entry; weight: (N,)
    float64 arc weight + move cost; column: (N,) intp score column (ilabel - 1); code: (N,) int64.
    """

    offsets: np.ndarray
    degree: np.ndarray
    dest: np.ndarray
    weight: np.ndarray
    column: np.ndarray
    code: np.ndarray
    base: int


def close_emitting_arcs(emit: ArcSet, moves: EpsilonMoves) -> ClosedArcs:
    """Every emitting arc, bare and followed by each closure move out of its destination (moves.closed)."""
    if not moves.closed:
        raise ValueError("close_emitting_arcs needs the epsilon closure (moves.closed)")
    base = moves.num_moves + 1
    if (emit.num_arcs + 1) * base >= 2**62:
        raise ValueError(f"{emit.num_arcs} emitting arcs and {moves.num_moves} epsilon moves overflow int64 "
                         "codes; use epsilon mode 'arcs'")
    arc_dest = emit.dest.astype(np.intp)
    counts = 1 + moves.degree[arc_dest]
    arc = np.arange(emit.num_arcs, dtype=np.int64).repeat(counts)
    ends = counts.cumsum()
    rank = np.arange(int(ends[-1]) if ends.size else 0) - (ends - counts).repeat(counts)  # 0 = the bare arc
    has_move = rank > 0
    move = np.where(has_move, moves.offsets[arc_dest[arc]] + rank - 1, -1)
    dest, weight = arc_dest[arc], emit.weight[arc].astype(np.float64)
    dest[has_move] = moves.dest[move[has_move]]
    weight[has_move] += moves.cost[move[has_move]]
    offsets = np.concatenate([np.zeros(1, dtype=np.int64), ends])[emit.offsets]  # entries before each state
    return ClosedArcs(
        offsets=offsets, degree=np.diff(offsets), dest=dest, weight=weight,
        column=emit.ilabel[arc].astype(np.intp) - 1, code=arc * base + move + 1, base=base,
    )
