"""The CPU reference WFST decoder: Kaldi's `FasterDecoder` semantics, vectorized with numpy.

Per utterance: one token at the start state (cost 0), closed over epsilon arcs with cutoff FLT_MAX (Kaldi's
`InitDecoding`); then per frame Kaldi's `ProcessEmitting` and `ProcessNonemitting(cutoff)`; at the end the
token with the lowest cost + final weight (ties: the lower state) is traced back. Kaldi's numeric types
are kept: float64 token costs, float32 arc weights and acoustic costs, float32 order statistics and
adaptive beam (pruning.py).

Emitting step, over all active tokens at once: `get_cutoff` gives the weight cutoff and the adaptive beam;
every token with cost < weight cutoff expands all its emitting arcs, `new = (cost + weight) + ac` with
`ac = -acoustic_scale * loglikes[t, ilabel - 1]` (float32); the next cutoff is `min(new) + adaptive_beam`
(Kaldi's best-token pre-pass gives the same bound) and candidates with `new >= next cutoff` are pruned.
Epsilon step (epsilon.py): tokens at or below the cutoff move along epsilon moves; candidates above the
cutoff are pruned; a state's token is replaced only by a strictly cheaper one.

Two ways to run the epsilon step, with the same tokens up to exact ties (a move landing exactly on the cutoff
included: closure drops it, arcs keeps it, as Kaldi does):
- closure (the default when all epsilon weights are >= 0): every emitting arc is precomputed bare and
  followed by each shortest epsilon path out of its destination (`ClosedArcs`), so one gather and one
  recombination per frame do both steps (an epsilon prefix never costs more than its path, so pruning the
  whole candidate prunes what Kaldi prunes step by step);
- arcs: recombine the emitting candidates, then expand epsilon arcs from the states that improved until a
  fixed point (a label-correcting search, valid for negative weights without negative cycles).

Recombination tie rule (the GPU backend shares it): among the candidates for one destination state in one
recombination, the lowest float64 cost wins, then the lowest code. Codes: an emitting arc `a` (its index in
the graph's emitting ArcSet) optionally followed by epsilon move `m` is `a * base + m + 1`, with
base = number of epsilon moves + 1 (so: lowest emitting arc, bare before followed, then lowest move); in
the arcs mode, epsilon candidates compare by epsilon arc index. A packed (float32 cost bits << 32 | index)
uint64 key picks the same winners except between candidates whose costs differ below float32 resolution.
Kaldi breaks exact ties by its hash-list order, so parity with Kaldi holds up to ties.

Where Kaldi differs (besides ties): it walks the tokens one at a time with a cutoff that shrinks as it goes,
so it keeps a few emitting tokens above the frame's final cutoff, in an order-dependent way. The next
GetCutoff prunes them unless max_active or min_active decides (they enter its counts), but after the last
frame they stay: Kaldi may reach a final state (or a cheaper one) through such a token where we report
"no final state reached" (or a costlier path). In closure mode a move landing exactly on the cutoff is
pruned (Kaldi keeps it) and move costs are summed before the token cost (rounding at 1e-16 relative).

Backpointers: every kept token is an `Arena` entry (predecessor entry, code; a bare epsilon move `m` from
the arcs mode or the initial closure is code `-1 - m`); `traceback.read_path` turns codes into words, word
end frames and costs.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from specbench.decoder.epsilon import ClosedArcs, EpsilonMoves, build_moves, close_emitting_arcs
from specbench.decoder.inputs import checked_scores
from specbench.decoder.lattice import WordLattice, prune_lattice
from specbench.decoder.lattice_paths import epsilon_links, lattice_from_records, partial_lattice
from specbench.decoder.options import DEFAULT_OPTIONS, SearchOptions, call_partial_every, require_options
from specbench.decoder.pruning import BIND_MAX_ACTIVE, BIND_MIN_ACTIVE, get_cutoff
from specbench.decoder.result import (
    STATUS_EMPTY, STATUS_NO_FINAL, STATUS_OK, DecodeResult, DecodeStats, PartialHypothesis, decode_each,
)
from specbench.decoder.search import Arena, SearchState, Tokens, gather_arcs, recombine
from specbench.decoder.traceback import partial_words, read_path, word_end_states
from specbench.wfst.graph import CsrGraph

FLT_MAX = float(np.finfo(np.float32).max)


class CpuDecoder:
    """Decode (T, P) float32 log-likelihood matrices over one graph; the graph is prepared once.

    options: the search settings (`options.SearchOptions`: beams, active-token limits, acoustic scale,
        lattice beam, partial interval); `self.config` is their `PruningConfig`.
    epsilon_mode: "auto" (the precomputed epsilon closure when all epsilon weights are >= 0, else iteration
        over the epsilon arcs), "closure" or "arcs".
    Column j of the scores holds graph input label j + 1, so P must be >= the graph's largest input label.
    Frame by frame: `init(utt_id)`, `advance(loglikes)` (any number of times), `result()`; `decode` does all,
    `decode_batch` one utterance after the other. One utterance at a time per instance (not thread-safe).
    `config` is read at every frame, so it may be replaced between `advance` calls. Memory: the closure mode
    keeps about 32 bytes per closed arc (1.1 M closed arcs, 35 MB, for the 760k-arc SLURP TLG) plus every
    kept token's backpointer (16 bytes).
    """

    def __init__(self, graph: CsrGraph, options: SearchOptions = DEFAULT_OPTIONS,
                 epsilon_mode: str = "auto") -> None:
        if not isinstance(graph, CsrGraph):
            raise ValueError(f"CpuDecoder.graph must be a CsrGraph, got {type(graph).__name__}")
        if graph.start < 0:
            raise ValueError("CpuDecoder.graph has no start state (an empty FST)")
        self.options = require_options("CpuDecoder", options)
        self.graph = graph
        self.config = options.pruning
        self.acoustic_scale = float(options.acoustic_scale)
        emit = graph.emitting
        self._emit_offsets, self._emit_degree = emit.offsets, emit.out_degree
        self._emit_dest = emit.dest.astype(np.intp)
        self._emit_weight = emit.weight.astype(np.float64)
        self._emit_column = (emit.ilabel.astype(np.intp) - 1)
        self._final = graph.final.astype(np.float64)
        self._word_end = word_end_states(graph)  # where a partial's last word is complete
        self._max_ilabel = graph.max_ilabel  # a reduction over all arcs: computed once
        self.moves: EpsilonMoves = build_moves(graph.epsilon, epsilon_mode)
        self._code_base = self.moves.num_moves + 1
        self._closed_arcs = close_emitting_arcs(emit, self.moves) if self.moves.closed else None
        self._dense_cost = np.full(graph.num_states, np.inf)
        self._dense_index = np.full(graph.num_states, np.iinfo(np.int64).max, dtype=np.int64)
        self._dense_pos = np.full(graph.num_states, -1, dtype=np.intp)
        self._state: SearchState | None = None
        if options.lattice_beam is not None and not self.moves.closed:
            raise ValueError(f"lattices need the epsilon closure, which this decoder lacks: "
                             f"{self.moves.open_because}. Fix: decode without lattice_beam, or use epsilon "
                             "mode 'auto' on a graph whose closure applies")
        self.lattice_beam, self.link_beam = options.lattice_beam, options.link_beam

    # ---- the frame-by-frame interface -------------------------------------------------------------

    def init(self, utt_id: str = "", partial_every: int | None = None) -> None:
        """Start an utterance: the start token, closed over epsilons with cutoff FLT_MAX. With
        `partial_every` (frames; default `options.partial_every`), the best partial path is kept after every
        that many frames."""
        partial_every = call_partial_every(self.options, partial_every)
        arena = Arena()
        root = arena.add(np.array([-1], dtype=np.int64), np.array([0], dtype=np.int64))
        tokens = Tokens(np.array([self.graph.start], dtype=np.intp), np.zeros(1), root)
        self._state = SearchState(utt_id=str(utt_id), tokens=tokens, arena=arena)
        self._partial_every = partial_every or 0
        self._partials: list[tuple[int, int, int]] = []  # (frame, arena entry, state)
        self._records: list[np.ndarray] = []
        self._close(FLT_MAX)
        if self.lattice_beam is not None:
            self._record_epsilon_links(0)

    def active_tokens(self) -> tuple[np.ndarray, np.ndarray]:
        """(states, costs) of the tokens the search holds now (after `init` and `advance`)."""
        tokens = self._require_state().tokens
        return tokens.states.copy(), tokens.costs.copy()

    def advance(self, loglikes: np.ndarray) -> None:
        """Decode the next frames: loglikes (t, P) float32 (other float dtypes are converted)."""
        state = self._require_state()
        neg = self._checked_costs(loglikes)
        if neg.shape[0] == 0:  # no frames (of any width): nothing to decode or keep for the traceback
            return
        state.scores.append(neg)
        rows = neg.astype(np.float64)
        step = self._frame_with_closure if self.moves.closed else self._frame_with_arcs
        for row in rows:
            step(row)
            state.stats["frames"] += 1
            if self._partial_every and state.stats["frames"] % self._partial_every == 0:
                self._keep_partial()

    def result(self) -> DecodeResult:
        """The best path so far through a final state, or a defined empty result with the reason."""
        state = self._require_state()
        stats = DecodeStats(**state.stats)
        frames = state.stats["frames"]
        if frames == 0:
            return DecodeResult.failed(state.utt_id, STATUS_EMPTY, 0, stats)
        tokens = state.tokens
        total = tokens.costs + self._final[tokens.states]
        finite = np.isfinite(total).nonzero()[0]
        if finite.size == 0:
            return DecodeResult.failed(state.utt_id, STATUS_NO_FINAL, frames, stats)
        best = finite[np.lexsort((tokens.states[finite], total[finite]))[0]]
        return self._traceback(int(tokens.ids[best]), int(tokens.states[best]), stats)

    def decode(self, loglikes: np.ndarray, utt_id: str = "",
               partial_every: int | None = None) -> DecodeResult:
        """Decode one utterance: loglikes (T, P) float32 log-likelihoods; T == 0 gives "empty utterance".
        partial_every: take the best partial path after every that many frames (DecodeResult.partials;
        default `options.partial_every`). Bad scores raise ValueError naming the utterance."""
        self.init(utt_id, partial_every)
        self.advance(loglikes)
        return self.result()

    def decode_batch(self, items: Sequence[tuple[str, np.ndarray]],
                     partial_every: int | None = None) -> list[DecodeResult]:
        """(utt_id, loglikes (T, P) float32) items, one after the other: one DecodeResult each, in order; an
        item with bad scores gets a failed result ("bad scores: ...") and never stops the others."""
        call_partial_every(self.options, partial_every)  # a bad argument is an error, not every item's
        return decode_each(self.decode, items, partial_every)

    def _keep_partial(self) -> None:
        """Remember the best token now (lowest cost, then lowest state) for a partial hypothesis."""
        tokens = self._state.tokens
        if tokens.size:
            best = np.lexsort((tokens.states, tokens.costs))[0]
            frame = self._state.stats["frames"] - 1
            self._partials.append((frame, int(tokens.ids[best]), int(tokens.states[best])))

    def _partial_results(self, costs: np.ndarray) -> tuple[PartialHypothesis, ...]:
        found = []
        lattice_of = self._partial_lattices(costs) if self.options.partial_lattices else None
        for frame, entry, last_state in self._partials:
            path = read_path(self._state.arena.path(entry), self._code_base, self.graph, self.moves,
                             costs[:frame + 1], last_state)
            lattice = None if lattice_of is None else lattice_of(frame + 1)
            found.append(PartialHypothesis(frame, partial_words(path.word_ids, last_state, self._word_end), lattice))
        return tuple(found)

    def _all_records(self) -> np.ndarray:
        return np.concatenate(self._records) if self._records else np.zeros((0, 3), dtype=np.int64)

    def _partial_lattices(self, costs: np.ndarray) -> Callable[[int], WordLattice | None]:
        """frames -> the lattice of the first `frames` frames (see `lattice_paths.partial_lattice`)."""
        records = self._all_records()
        return lambda frames: partial_lattice(self.graph, costs, records, frames, self.lattice_beam)

    # ---- helpers ----------------------------------------------------------------------------------

    def _require_state(self) -> SearchState:
        if self._state is None:
            raise RuntimeError("CpuDecoder: call init() before advance() or result()")
        return self._state

    def _checked_costs(self, loglikes: np.ndarray) -> np.ndarray:
        """(t, P) float32 acoustic costs -acoustic_scale * loglikes, after checking shape and values."""
        state = self._require_state()
        scores = checked_scores(state.utt_id, loglikes, self._max_ilabel, state.stats["frames"])
        if scores.shape[0] == 0:
            return scores
        width = scores.shape[1]
        if state.width not in (None, width):
            raise ValueError(f"utterance {state.utt_id!r}: scores have {width} columns, earlier frames had "
                             f"{state.width}")
        state.width = width
        return scores * np.float32(-self.acoustic_scale)  # == -(scores * scale) bit for bit

    def _expand(self, costs_row: np.ndarray, arcs: ClosedArcs | None) -> tuple[np.ndarray, ...]:
        """Kaldi's ProcessEmitting up to recombination, over the emitting arcs (`arcs` None) or over the
        closed arcs (emitting arcs followed by epsilon-closure moves). costs_row: (P,) float64 acoustic
        costs of the frame.

        Returns the candidates that survive the beam: codes (K,) int64 (emitting arc index, or closed-arc
        code), new (K,) float64 costs, dest (K,) intp states, prev (K,) int64 arena entries of their source
        tokens; and the next cutoff (float). With closed arcs the cutoff min(new) + adaptive beam is the
        same as over bare arcs (move costs are >= 0), and a candidate is kept when new < cutoff (Kaldi keeps
        an epsilon move landing exactly on the cutoff; we prune it).
        """
        state, config = self._state, self.config
        tokens, stats = state.tokens, state.stats
        self._src_states = None
        cut = get_cutoff(tokens.costs, config)
        stats["max_active_binds"] += cut.binding == BIND_MAX_ACTIVE
        stats["min_active_binds"] += cut.binding == BIND_MIN_ACTIVE
        stats["beam_narrowings"] += cut.adaptive_beam < config.beam32
        expand = tokens if cut.all_below else tokens.select((tokens.costs < cut.weight_cutoff).nonzero()[0])
        if arcs is None:
            offsets, degree = self._emit_offsets, self._emit_degree
            weight, column = self._emit_weight, self._emit_column
        else:
            offsets, degree, weight, column = arcs.offsets, arcs.degree, arcs.weight, arcs.column
        index, counts = gather_arcs(offsets, degree, expand.states)
        new = expand.costs.repeat(counts)
        new += weight.take(index)
        new += costs_row.take(column.take(index))
        next_cutoff = float(new.min()) + cut.adaptive_beam if new.size else math.inf
        if cut.best >= 0 and not tokens.costs[cut.best] < cut.weight_cutoff:  # Kaldi's best-token pre-pass
            bound = self._best_token_bound(tokens, cut.best, costs_row, cut.adaptive_beam)
            next_cutoff = min(next_cutoff, bound)
        keep = (new < next_cutoff).nonzero()[0]
        stats["tokens_created"] += keep.size
        stats["tokens_pruned"] += (tokens.size - expand.size) + (new.size - keep.size)
        index, prev = index.take(keep), expand.ids.repeat(counts).take(keep)
        if self.lattice_beam is not None:
            self._src_states = expand.states.repeat(counts).take(keep)
        if arcs is None:
            return index, new.take(keep), self._emit_dest.take(index), prev, next_cutoff
        stats["epsilon_iterations"] += 1
        return arcs.code.take(index), new.take(keep), arcs.dest.take(index), prev, next_cutoff

    def _frame_with_arcs(self, costs_row: np.ndarray) -> None:
        """One frame with epsilon arcs as moves: recombine the emitting candidates, then iterate epsilons."""
        state = self._state
        arcs, new, dest, prev, cutoff = self._expand(costs_row, None)
        win = recombine(dest, new, arcs, self._dense_cost, self._dense_index)
        ids = state.arena.add(prev[win], arcs[win] * self._code_base)
        state.tokens = Tokens(dest[win], new[win], ids)
        self._close(cutoff)

    def _frame_with_closure(self, costs_row: np.ndarray) -> None:
        """One frame over the closed arcs: every emitting candidate, bare or followed by one epsilon-closure
        move, competes in one recombination (tie: lowest code, i.e. emitting arc, bare before moved, then
        move), which gives the tokens of Kaldi's ProcessEmitting + ProcessNonemitting (see the module
        docstring)."""
        state = self._state
        codes, new, dest, prev, _ = self._expand(costs_row, self._closed_arcs)
        win = recombine(dest, new, codes, self._dense_cost, self._dense_index)
        ids = state.arena.add(prev[win], codes[win])
        state.tokens = Tokens(dest[win], new[win], ids)
        if self.lattice_beam is not None:
            self._record_lattice_arcs(codes, new, dest, win)
            self._record_epsilon_links(state.stats["frames"] + 1)

    def _record_lattice_arcs(self, codes: np.ndarray, new: np.ndarray, dest: np.ndarray,
                             win: np.ndarray) -> None:
        """Lattice links of the emitting step: the bare emitting-arc candidates (no closure move) within the
        lattice beam of their destination's token, as (frame, src state, emitting arc)."""
        best = self._dense_cost
        best[dest[win]] = new[win]
        near = ((codes % self._code_base == 0) & (new <= best.take(dest) + self.link_beam)).nonzero()[0]
        best[dest[win]] = np.inf
        frame = np.full(near.shape[0], self._state.stats["frames"], dtype=np.int64)
        self._records.append(np.stack([frame, self._src_states[near].astype(np.int64),
                                       codes[near] // self._code_base], axis=1))

    def _record_epsilon_links(self, frame: int) -> None:
        """Lattice links of the epsilon step: every epsilon arc between two of the frame's tokens within the
        lattice beam of its destination token, as (frame, src state, -1 - epsilon arc)."""
        tokens, dense = self._state.tokens, self._dense_cost
        dense[tokens.states] = tokens.costs
        src, code = epsilon_links(self.graph, tokens.states, tokens.costs, dense, self.link_beam)
        dense[tokens.states] = np.inf
        frames = np.full(src.shape[0], frame, dtype=np.int64)
        self._records.append(np.stack([frames, src.astype(np.int64), code.astype(np.int64)], axis=1))

    def _best_token_bound(self, tokens: Tokens, best: int, costs_row: np.ndarray, beam: float) -> float:
        """min over the best token's emitting arcs of new cost + beam (+inf without arcs)."""
        arcs = self.graph.emitting.state_arcs(int(tokens.states[best]))
        new = tokens.costs[best] + self._emit_weight[arcs] + costs_row[self._emit_column[arcs]]
        return float(new.min()) + beam if new.size else math.inf

    def _close(self, cutoff: float) -> None:
        """Kaldi's ProcessNonemitting(cutoff) over the search's tokens (see the module docstring)."""
        state, moves = self._state, self.moves
        tokens, stats, pos = state.tokens, state.stats, self._dense_pos
        pos[tokens.states] = np.arange(tokens.size)
        frontier = ((tokens.costs <= cutoff) & (moves.degree[tokens.states] > 0)).nonzero()[0]
        rounds = 0
        while frontier.size:
            rounds += 1
            if rounds > self.graph.num_states + 1:
                raise RuntimeError(f"utterance {state.utt_id!r}: the epsilon step does not converge "
                                   "(a negative-weight epsilon cycle?)")
            frontier = self._close_round(tokens, frontier, cutoff, stats)
            tokens = state.tokens
            if moves.closed:
                break
        stats["epsilon_iterations"] += rounds
        pos[state.tokens.states] = -1

    def _close_round(self, tokens: Tokens, frontier: np.ndarray, cutoff: float, stats: dict) -> np.ndarray:
        """One round of epsilon moves from the tokens at `frontier` positions; updates the search's tokens
        (in place for improved states, appended for new ones) and returns the improved positions."""
        moves, state, pos = self.moves, self._state, self._dense_pos
        move, counts = gather_arcs(moves.offsets, moves.degree, tokens.states[frontier])
        owner = np.arange(frontier.shape[0]).repeat(counts)
        cand = tokens.costs[frontier][owner] + moves.cost[move]
        keep = (cand <= cutoff).nonzero()[0]
        stats["tokens_created"] += keep.size
        stats["tokens_pruned"] += move.size - keep.size
        move, cand, owner = move[keep], cand[keep], owner[keep]
        dest = moves.dest[move]
        win = recombine(dest, cand, move, self._dense_cost, self._dense_index)
        dest, cand, move, prev = dest[win], cand[win], move[win], tokens.ids[frontier[owner[win]]]
        at = pos[dest]
        better = ((at < 0) | (cand < tokens.costs[np.maximum(at, 0)])).nonzero()[0]
        if better.size == 0:
            return better
        ids = state.arena.add(prev[better], -1 - move[better].astype(np.int64))
        at, dest, cand = at[better], dest[better], cand[better]
        old = at >= 0
        tokens.costs[at[old]] = cand[old]
        tokens.ids[at[old]] = ids[old]
        fresh = (~old).nonzero()[0]
        start = tokens.size
        pos[dest[fresh]] = start + np.arange(fresh.size)
        state.tokens = tokens.extend(dest[fresh], cand[fresh], ids[fresh])
        return np.concatenate([at[old], start + np.arange(fresh.size)])

    def _lattice(self, costs: np.ndarray) -> WordLattice | None:
        """The pruned lattice of the utterance from its records (costs: (T, P) float32)."""
        return lattice_from_records(self.graph, costs, self._all_records(), self.lattice_beam, prune_lattice,
                                    self._final)

    def _traceback(self, token_id: int, final_state: int, stats: DecodeStats) -> DecodeResult:
        """The DecodeResult of the path ending at arena entry `token_id` in `final_state`."""
        state = self._state
        costs = np.concatenate(state.scores) if len(state.scores) > 1 else state.scores[0]
        codes = state.arena.path(token_id)
        path = read_path(codes, self._code_base, self.graph, self.moves, costs, final_state)
        lattice = None
        if self.lattice_beam is not None:
            lattice = self._lattice(costs)
        return DecodeResult(
            utt_id=state.utt_id, status=STATUS_OK, word_ids=path.word_ids, graph_cost=path.graph_cost,
            acoustic_cost=path.acoustic_cost, num_frames=state.stats["frames"],
            word_end_frames=path.word_end_frames, stats=stats, lattice=lattice,
            partials=self._partial_results(costs),
        )
