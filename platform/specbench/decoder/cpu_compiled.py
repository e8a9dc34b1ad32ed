"""The compiled CPU backend: `CpuDecoder`'s search with its frame loop and its lattice pruning compiled by
numba.

The frame loop (`compiled_kernels.decode_frames`) and the pruning (`lattice_kernels.prune_links`) follow
the numpy backend's (`cpu.py`) rules step for step, so both give the same tokens, 1-best, costs, counters
and lattices; the parity tests check it. The loop records each lattice link between two tokens (frame and
position) with its cost, and the pruning runs forward-backward over the tokens directly, so neither looks
anything up in the graph or hashes (frame, state) pairs except for the few percent of links it keeps. The rest is the numpy backend's code: the graph preparation (the
epsilon closure and the closed arcs), the start of an utterance (the start token closed over epsilons,
computed once per decoder and replayed), the traceback and the partial hypotheses. Graphs whose epsilon
closure does not apply (a negative epsilon weight, or more closure moves than `epsilon_closure` allows; the
decoder's `moves.open_because` says which) need the numpy backend's epsilon iteration: there this backend
runs the numpy loop.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import fields
from typing import Any

import numpy as np

from specbench.decoder.compiled_kernels import NO_CODE, decode_frames
from specbench.decoder.cpu import FLT_MAX, CpuDecoder
from specbench.decoder.lattice import WordLattice
from specbench.decoder.lattice_kernels import prune_compiled, prune_links
from specbench.decoder.lattice_paths import epsilon_links, lattice_from_records
from specbench.decoder.result import DecodeResult, DecodeStats
from specbench.decoder.search import Arena, Tokens

COUNTERS = tuple(f.name for f in fields(DecodeStats))  # the stats vector's order


class CompiledCpuDecoder(CpuDecoder):
    """`CpuDecoder` (same constructor, same results) with the per-frame work in one compiled call per
    `advance` and the lattice pruning compiled too. The first decoder of a process compiles the loop, or
    loads it from numba's on-disk cache."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._tables = None
        # seconds per stage over every utterance decoded: start (the start token's epsilon step), frame_loop
        # (the compiled frames, lattice records included), result_and_lattice (traceback and lattice; of
        # it, lattice_prune: the compiled pruning); the decoder benchmark reports them
        self.profile: dict[str, float] = dict.fromkeys(("start", "frame_loop", "result_and_lattice",
                                                        "lattice_prune"), 0.0)
        self._start: tuple | None = None  # the tokens after the start's epsilon step (see _close)
        self._links: list[tuple] = []  # per advance: the frame loop's lattice links (see _lattice)
        if self.moves.closed:
            arcs, emit, eps = self._closed_arcs, self.graph.emitting, self.graph.epsilon
            if arcs.column.size and int(arcs.column.max()) >= 1 << 16:
                raise ValueError(f"the compiled CPU backend takes at most 65,536 score columns; the graph's "
                                 f"input labels go up to {int(arcs.column.max()) + 1}. Fix: use the "
                                 "cpu_numpy backend")
            record = np.empty((arcs.dest.shape[0], 2), dtype=np.int64)  # (weight bits, dest << 16 | column)
            record[:, 0] = arcs.weight.astype(np.float64).view(np.int64)
            record[:, 1] = (arcs.dest.astype(np.int64) << 16) | arcs.column.astype(np.int64)
            flat = record.reshape(-1)
            self._tables = (
                arcs.offsets.astype(np.int64), flat.view(np.float64), flat, arcs.code.astype(np.int64),
                np.int64(self._code_base), emit.offsets.astype(np.int64), self._emit_weight,
                self._emit_column.astype(np.int64))
            self._eps = (eps.offsets.astype(np.int64), eps.dest.astype(np.int64),
                         eps.weight.astype(np.float64))
            self._dense_code = np.full(self.graph.num_states, NO_CODE, dtype=np.int64)

    def _lattice(self, costs: np.ndarray) -> WordLattice | None:
        """The compiled lattice from the frame loop's links (timed in `profile`); the numpy records and the
        compiled pruning of their RawLattice where the numpy loop ran (negative epsilon weights)."""
        start = time.perf_counter()
        try:
            if self._tables is None:
                records = np.concatenate(self._records) if self._records else np.zeros((0, 3), dtype=np.int64)
                return lattice_from_records(self.graph, costs, records, self.lattice_beam, prune_compiled,
                                            self._final)
            parts = list(zip(*self._links))
            links = tuple(np.concatenate(p) for p in parts[:4])
            token_states = np.concatenate(parts[4])
            counts = np.concatenate(parts[5])
            return prune_links(self.graph, costs, counts, token_states, self._start_index, links,
                               self.lattice_beam, self._final)
        finally:
            self.profile["lattice_prune"] += time.perf_counter() - start

    def _partial_lattices(self, costs: np.ndarray) -> Callable[[int], WordLattice | None]:
        """frames -> the lattice of the first `frames` frames, from the frame loop's links cut at that frame
        (the numpy records where the numpy loop ran)."""
        if self._tables is None:
            return super()._partial_lattices(costs)
        parts = list(zip(*self._links))
        emit_links, emit_cost, eps_links, eps_cost = (np.concatenate(p) for p in parts[:4])
        token_states, counts = np.concatenate(parts[4]), np.concatenate(parts[5])
        zero = np.zeros(self.graph.num_states, dtype=np.float64)

        def lattice(frames: int) -> WordLattice | None:
            emit, eps = emit_links[:, 0] < frames, eps_links[:, 0] <= frames
            kept = counts[:frames + 1]
            return prune_links(self.graph, costs[:frames], kept, token_states[:int(kept.sum())],
                               self._start_index, (emit_links[emit], emit_cost[emit], eps_links[eps], eps_cost[eps]),
                               self.lattice_beam, zero)
        return lattice

    def _record_epsilon_links(self, frame: int) -> None:
        """The start's epsilon links as links between frame 0's tokens (the compiled loop makes the others);
        the numpy backend's records where the numpy loop runs."""
        if self._tables is None:
            super()._record_epsilon_links(frame)
            return
        tokens = self._require_state().tokens
        states = tokens.states.astype(np.int64)
        dense = self._dense_cost
        dense[states] = tokens.costs
        src, code = epsilon_links(self.graph, states, tokens.costs, dense, self.link_beam)
        dense[states] = np.inf
        order = np.argsort(states, kind="stable")
        position = order[np.searchsorted(states[order], src)]
        arc = -1 - code.astype(np.int64)
        dest = order[np.searchsorted(states[order], self.graph.epsilon.dest[arc])]
        eps = np.stack([np.zeros_like(arc), position, dest, arc], axis=1).astype(np.int64)
        cost = self.graph.epsilon.weight[arc].astype(np.float64) + 0.0
        self._start_index = int(order[np.searchsorted(states[order], self.graph.start)])
        self._links = [(np.zeros((0, 4), dtype=np.int64), np.zeros(0), eps, cost, states,
                        np.array([states.shape[0]], dtype=np.int64))]

    def result(self) -> DecodeResult:
        """As `CpuDecoder.result`; its time (traceback, lattice from the records) goes to `profile`."""
        start = time.perf_counter()
        try:
            return super().result()
        finally:
            self.profile["result_and_lattice"] += time.perf_counter() - start

    def _close(self, cutoff: float) -> None:
        """The epsilon step; at the start of an utterance (cutoff FLT_MAX) its outcome is the same for every
        utterance, so it is computed once and replayed: the tokens, their arena entries and the counters."""
        if self._tables is None or cutoff != FLT_MAX:
            super()._close(cutoff)
            return
        begin = time.perf_counter()
        self._replay_start()
        self.profile["start"] += time.perf_counter() - begin

    def _replay_start(self) -> None:
        """The start tokens: computed by the numpy epsilon step the first time, replayed after."""
        state = self._require_state()
        if self._start is None:
            before = dict(state.stats)
            super()._close(FLT_MAX)
            prev, code = state.arena._compact()
            self._start = (state.tokens, prev, code, {k: state.stats[k] - before[k] for k in COUNTERS})
            return
        tokens, prev, code, counts = self._start
        state.tokens = Tokens(tokens.states, tokens.costs, tokens.ids)
        state.arena = Arena()
        state.arena.add(prev, code)
        for key, value in counts.items():
            state.stats[key] += value

    def advance(self, loglikes: np.ndarray) -> None:
        """Decode the next frames: loglikes (t, P) float32 (other float dtypes are converted)."""
        if self._tables is None:
            super().advance(loglikes)
            return
        state = self._require_state()
        neg = self._checked_costs(loglikes)
        if neg.shape[0] == 0:  # no frames: as the numpy backend
            return
        state.scores.append(neg)
        stats = np.array([state.stats[k] for k in COUNTERS], dtype=np.int64)
        config, tokens = self.config, state.tokens
        link_beam = -1.0 if self.link_beam is None else float(self.link_beam)
        start = time.perf_counter()
        out = decode_frames(
            np.ascontiguousarray(neg, dtype=np.float64), tokens.states.astype(np.int64),
            tokens.costs.astype(np.float64, copy=True), tokens.ids.astype(np.int64, copy=True),
            np.int64(state.arena.size), np.int64(state.stats["frames"]),
            *self._tables, config.beam32, np.int64(config.max_active), np.int64(config.min_active),
            config.beam_delta32, config.unconstrained, np.int64(self._partial_every), link_beam,
            *self._eps, self._dense_cost, self._dense_code, stats)
        self.profile["frame_loop"] += time.perf_counter() - start
        states, costs, ids, prev, code, partials, *links = out
        state.arena.add(prev, code)
        state.tokens = Tokens(states.astype(np.intp), costs, ids)
        state.stats.update(zip(COUNTERS, (int(x) for x in stats)))
        self._partials.extend((int(f), int(e), int(s)) for f, e, s in partials)
        if self.lattice_beam is not None:
            self._links.append(tuple(links))
