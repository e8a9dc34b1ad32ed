"""From the decoders' lattice records to lattices (shared by the CPU backend and the lane backends).

A record is one link between two search tokens, kept because it lies within the lattice beam of its
destination token (cost of the source + link cost <= cost of the destination + lattice beam; a path through
a link outside that bound is more than the beam worse than the best path to the destination, so the final
pruning would drop it anyway). Records are (frame, source state, code): code >= 0 is emitting arc `code`
from frame f to f + 1; code < 0 is epsilon arc `-1 - code` within frame f. `lattice.prune_lattice` then
applies Kaldi's forward-backward lattice pruning over the (frame, state) nodes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from specbench.decoder.lattice import RawLattice, WordLattice, prune_lattice
from specbench.decoder.search import gather_arcs
from specbench.wfst.graph import CsrGraph


def records_to_raw(graph: CsrGraph, costs: np.ndarray, frame: np.ndarray, src_state: np.ndarray,
                   code: np.ndarray) -> RawLattice:
    """The RawLattice of one utterance from its records; costs: (T, P) float32 acoustic costs."""
    emit, eps = graph.emitting, graph.epsilon
    is_emit = code >= 0
    arc = code[is_emit]
    e = -1 - code[~is_emit]
    f_emit, f_eps = frame[is_emit], frame[~is_emit]
    columns = [
        np.concatenate([f_emit, f_eps]), np.concatenate([src_state[is_emit], src_state[~is_emit]]),
        np.concatenate([f_emit + 1, f_eps]), np.concatenate([emit.dest[arc], eps.dest[e]]),
        np.concatenate([emit.ilabel[arc], np.zeros(e.shape[0], dtype=np.int32)]),
        np.concatenate([emit.olabel[arc], eps.olabel[e]]),
    ]
    graph_cost = np.concatenate([emit.weight[arc], eps.weight[e]]).astype(np.float64)
    acoustic = np.concatenate([costs[f_emit, emit.ilabel[arc] - 1].astype(np.float64), np.zeros(e.shape[0])])
    return RawLattice(costs.shape[0], graph.start, *(c.astype(np.int32) for c in columns), graph_cost, acoustic)


def lattice_from_records(graph: CsrGraph, costs: np.ndarray, records: np.ndarray, lattice_beam: float,
                         prune: Callable[..., WordLattice | None] = prune_lattice,
                         final: np.ndarray | None = None) -> WordLattice | None:
    """records: (K, 3) ints (frame, src state, code) of one utterance; `prune` is `prune_lattice` or its
    compiled twin (`lattice_kernels.prune_compiled`); `final`: the graph's final weights as (S,) float64,
    when the caller holds them already (else converted from `graph.final` on every call)."""
    raw = records_to_raw(graph, costs, records[:, 0], records[:, 1], records[:, 2])
    return prune(raw, graph.final if final is None else final, lattice_beam)


def partial_records(records: np.ndarray, frames: int) -> np.ndarray:
    """The (K, 3) records (frame, src state, code) of the first `frames` frames: emitting links that end by
    frame `frames` (recorded at frame < frames) and epsilon links among the tokens of frames 0..frames."""
    emitting = records[:, 2] >= 0
    return records[np.where(emitting, records[:, 0] < frames, records[:, 0] <= frames)]


def partial_lattice(graph: CsrGraph, costs: np.ndarray, records: np.ndarray, frames: int, lattice_beam: float,
                    prune: Callable[..., WordLattice | None] = prune_lattice) -> WordLattice | None:
    """The pruned lattice of the audio up to `frames` frames, as the utterance's lattice would be if it ended
    there with every state final at cost 0 (Kaldi's `use_final_probs = false`). The search is causal, so this
    is the lattice of decoding the first `frames` frames alone over the graph with all final costs 0."""
    zero = np.zeros(graph.num_states, dtype=np.float64)
    return lattice_from_records(graph, costs[:frames], partial_records(records, frames), lattice_beam, prune, zero)


def epsilon_links(graph: CsrGraph, states: np.ndarray, costs: np.ndarray, token_cost: np.ndarray,
                  link_beam: float) -> tuple[np.ndarray, np.ndarray]:
    """Epsilon links among one frame's tokens: for each token (states (N,), costs (N,)) every epsilon arc to
    a state that holds a token, within `link_beam` of it (`SearchOptions.link_beam`). token_cost: (S,) float64 dense token costs
    (+inf where no token). Returns (src states, codes -1 - epsilon arc)."""
    eps = graph.epsilon
    index, counts = gather_arcs(eps.offsets, eps.out_degree, states)
    src = states.repeat(counts)
    reach = costs.repeat(counts) + eps.weight[index].astype(np.float64)
    target = token_cost[eps.dest[index]]
    near = (np.isfinite(target) & (reach <= target + link_beam)).nonzero()[0]  # only states holding a token
    return src[near], -1 - index[near]


def fastest_prune() -> Callable[..., WordLattice | None]:
    """`lattice_kernels.prune_compiled` where numba imports (five times the numpy reference's speed on
    SLURP lattices), else `prune_lattice`; both give the same lattices, array for array."""
    try:
        from specbench.decoder.lattice_kernels import prune_compiled
    except ImportError:
        return prune_lattice
    return prune_compiled


def warm_pruning() -> None:
    """Compile `fastest_prune` here (or load it from numba's on-disk cache), so that processes started after
    this one load it from the cache instead of each compiling it at once."""
    raw = RawLattice(1, 0, [0], [0], [1], [1], [1], [1], [0.0], [0.0])
    fastest_prune()(raw, np.zeros(2), 1.0)


def lane_lattices(graph: CsrGraph, batch, records: Sequence[np.ndarray],
                  lattice_beam: float) -> list[WordLattice | None]:
    """Per utterance of a lane batch (`lane_tables.LaneBatch`): its lattice from its (K, 3) records (frame, src
    state, code), `records[u]`; `lattice_kernels.prune_records` (raw lattice and pruning compiled, the GIL
    released throughout) where numba imports, else `lattice_from_records`: the same lattices."""
    if len(records) != len(batch.utt_ids):
        raise ValueError(f"lane_lattices: {len(records)} record arrays for {len(batch.utt_ids)} utterances")
    final = graph.final.astype(np.float64)
    try:
        from specbench.decoder.lattice_kernels import prune_records
    except ImportError:
        prune = fastest_prune()
        return [lattice_from_records(graph, batch.utterance_costs(u), records[u], lattice_beam, prune, final)
                for u in range(len(batch.utt_ids))]
    return [prune_records(graph, batch.utterance_costs(u), records[u], final, lattice_beam)
            for u in range(len(batch.utt_ids))]
