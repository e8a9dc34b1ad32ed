"""Data structures and array kernels of the CPU decoder's search (used by cpu.py).

`Tokens`: the active tokens of one frame, one per state. `Arena`: every token ever kept, as backpointers.
`gather_arcs`: the CSR arcs of a set of states, flattened with prefix sums. `recombine`: one winner per
destination state under the decoder's tie rule (lowest cost, then lowest move index).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

_NO_INDEX = np.iinfo(np.int64).max
_COUNTERS = ("frames", "tokens_created", "tokens_pruned", "max_active_binds", "min_active_binds",
             "beam_narrowings", "epsilon_iterations", "queue_overflows")


@dataclass
class Tokens:
    """Active tokens, at most one per state.

    states: (N,) intp graph states (distinct). costs: (N,) float64 accumulated costs.
    ids: (N,) int64 arena entries (their backpointers).
    """

    states: np.ndarray
    costs: np.ndarray
    ids: np.ndarray

    @property
    def size(self) -> int:
        """Number of tokens N."""
        return int(self.states.shape[0])

    def select(self, positions: np.ndarray) -> Tokens:
        """The tokens at `positions` ((K,) intp); self when it selects all of them, in order."""
        if positions.shape[0] == self.size:
            return self
        return Tokens(self.states[positions], self.costs[positions], self.ids[positions])

    def extend(self, states: np.ndarray, costs: np.ndarray, ids: np.ndarray) -> Tokens:
        """These tokens followed by new ones (states not yet present)."""
        if states.shape[0] == 0:
            return self
        return Tokens(np.concatenate([self.states, states]), np.concatenate([self.costs, costs]),
                      np.concatenate([self.ids, ids]))


class Arena:
    """Backpointers of all kept tokens, appended in chunks; entry ids count from 0.

    Entry i holds prev[i] (int64, the predecessor entry, -1 for the start token) and code[i] (int64, the move
    that created it: an emitting arc index >= 0, or -1 - epsilon move index).
    """

    def __init__(self) -> None:
        self._prev: list[np.ndarray] = []
        self._code: list[np.ndarray] = []
        self.size = 0

    def add(self, prev: np.ndarray, code: np.ndarray) -> np.ndarray:
        """Append entries (prev, code: (K,) int64); returns their ids (K,) int64."""
        ids = np.arange(self.size, self.size + prev.shape[0], dtype=np.int64)
        self._prev.append(prev)
        self._code.append(code)
        self.size += prev.shape[0]
        return ids

    def _compact(self) -> tuple[np.ndarray, np.ndarray]:
        if len(self._prev) > 1:
            self._prev, self._code = [np.concatenate(self._prev)], [np.concatenate(self._code)]
        return self._prev[0], self._code[0]

    def path(self, entry: int) -> list[int]:
        """The codes from the start token (excluded) to `entry`, in path order."""
        prev, code = self._compact()
        codes = []
        while (before := prev.item(entry)) >= 0:
            codes.append(code.item(entry))
            entry = before
        codes.reverse()
        return codes


@dataclass
class SearchState:
    """The per-utterance state of a CpuDecoder: tokens, arena, scores seen, counters."""

    utt_id: str
    tokens: Tokens
    arena: Arena
    scores: list[np.ndarray] = field(default_factory=list)  # (t, P) float32 acoustic costs per advance()
    width: int | None = None
    stats: dict[str, int] = field(default_factory=lambda: dict.fromkeys(_COUNTERS, 0))


def gather_arcs(offsets: np.ndarray, degree: np.ndarray, states: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """All CSR entries of `states`, flattened.

    offsets: (S + 1,) int64; degree: (S,) int64 entries per state; states: (N,) intp.
    Returns index (E,) int64 entry indices, grouped by state in the order of `states`, ascending within a
    state, and counts (N,) int64 entries per state: `values.repeat(counts)` spreads per-state values over
    the entries (faster than indexing with an owner array).
    """
    counts = degree.take(states)
    ends = counts.cumsum()
    index = np.arange(int(ends[-1]) if ends.shape[0] else 0, dtype=np.int64)
    index += (offsets[1:].take(states) - ends).repeat(counts)  # entry k of state s: offsets[s] + k
    return index, counts


def recombine(dest: np.ndarray, cost: np.ndarray, index: np.ndarray, dense_cost: np.ndarray,
              dense_index: np.ndarray) -> np.ndarray:
    """Positions of the winning candidates: per destination, the lowest cost, then the lowest index.

    dest: (K,) intp states; cost: (K,) float64; index: (K,) int64 move indices (distinct per destination).
    dense_cost: (S,) float64 all +inf, dense_index: (S,) int64 all INT64_MAX: scratch, restored on return.
    Returns (D,) intp positions, one per distinct destination.
    """
    if dest.shape[0] == 0:
        return np.zeros(0, dtype=np.intp)
    np.minimum.at(dense_cost, dest, cost)
    tied = (cost == dense_cost.take(dest)).nonzero()[0]
    dense_cost[dest] = np.inf
    tied_dest, tied_index = dest.take(tied), index.take(tied)
    np.minimum.at(dense_index, tied_dest, tied_index)
    win = tied.compress(tied_index == dense_index.take(tied_dest))
    dense_index[tied_dest] = _NO_INDEX
    return win
