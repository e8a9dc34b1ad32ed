"""The CPU twin of the GPU decoder: the kernels of `lanes.py` written in numpy, step for step.

Every method of `NumpyLaneKernels` does what the CUDA kernel of the same name in `kernels/lanes.cu` does,
over the same fixed-capacity queues: `np.minimum.at` on the same order-preserving uint64 keys stands for
`atomicMin`, `np.repeat` by out-degree for the kernels' binary search of the prefix sums (the same slot to
token map), `np.bincount` into 256-bin histograms for their atomicAdd. Where a kernel's threads test every
candidate, the numpy passes after recombination index the kept candidates only (the same values, less memory
traffic into tables of lanes x states). `TwinDecoder` is the lane decoder on these kernels; tests compare it with
the CPU backend on every commit, so the GPU algorithm is checked without a GPU. Its `KernelLog` counts the
launches and host reads the GPU backend makes for the same batch (`tests/gpu` compares the two logs).
"""

from __future__ import annotations

import numpy as np

from specbench.decoder.lane_tables import (
    BEST_LAUNCHES,
    FRAME_LAUNCHES,
    LINK_LAUNCHES,
    RECORD_DTYPE,
    STAT,
    KernelLog,
    LaneBatch,
    LaneGraph,
    LaneKernels,
    LaneOutput,
    LaneSettings,
    Refill,
    admitted_tokens,
    path_ends,
    path_layout,
)
from specbench.decoder.lanes import LaneDecoder
from specbench.decoder.options import DEFAULT_OPTIONS, SearchOptions
from specbench.decoder.search import gather_arcs
from specbench.wfst.graph import CsrGraph

U64_MAX = np.uint64(2**64 - 1)
U32_MAX = np.uint32(2**32 - 1)
I64_MAX = np.iinfo(np.int64).max


def ordered32(values: np.ndarray) -> np.ndarray:
    """Order-preserving uint32 bits of float32 values (negative: all bits flipped; else sign bit set)."""
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    return np.where(bits >> np.uint32(31), ~bits, bits | np.uint32(0x80000000))


def from_ordered32(keys: np.ndarray) -> np.ndarray:
    keys = np.asarray(keys, dtype=np.uint32)
    bits = np.where(keys >> np.uint32(31), keys & np.uint32(0x7FFFFFFF), ~keys)
    return bits.view(np.float32)


def ordered64(values: np.ndarray) -> np.ndarray:
    """Order-preserving uint64 bits of float64 values."""
    bits = np.ascontiguousarray(values, dtype=np.float64).view(np.uint64)
    return np.where(bits >> np.uint64(63), ~bits, bits | np.uint64(1 << 63))


def from_ordered64(keys: np.ndarray) -> np.ndarray:
    keys = np.asarray(keys, dtype=np.uint64)
    bits = np.where(keys >> np.uint64(63), keys & np.uint64((1 << 63) - 1), ~keys)
    return bits.view(np.float64)


def _add_per_lane(stats: np.ndarray, column: int, lanes: np.ndarray) -> None:
    """stats[lane, column] += 1 for every entry of `lanes` (the kernels' warp-aggregated atomicAdd)."""
    stats[:, column] += np.bincount(lanes, minlength=stats.shape[0])


class NumpyLaneKernels(LaneKernels):
    """The lane algorithm's kernels in numpy (one batch at a time)."""

    def __init__(self, lg: LaneGraph, settings: LaneSettings) -> None:
        self.lg, self.s = lg, settings
        self.beam32 = settings.pruning.beam32
        self.log = KernelLog()
        self._clean_tables = 0  # the lanes of the recombination tables kept from the last wave (0: none)

    # ---- a wave's start, and lanes refilled between frame steps -------------------------------------------

    def start(self, batch: LaneBatch, num_lanes: int) -> None:
        lg, lanes, count = self.lg, num_lanes, len(batch.utt_ids)
        self.batch, self.num_lanes = batch, lanes
        self.table = self.s.table_size(lg.num_states)
        # a wave leaves every entry it touched reset, so tables kept from the last one serve as many lanes
        # (their first lanes); filling new ones touches every page (gigabytes with a large graph's states)
        if self._clean_tables < lanes:
            self.dense_key = np.full(lanes * self.table, U64_MAX, dtype=np.uint64)
            self.dense_cost = np.full(lanes * self.table, U64_MAX, dtype=np.uint64)
            self.dense_entry = np.full(lanes * self.table, U32_MAX, dtype=np.uint32)
            if self.s.lattice_beam is not None:
                self.dense_tok = np.full(lanes * lg.num_states, np.inf)
        self._clean_tables = 0  # until the wave finishes
        self.lane_end, self.lane_start = np.zeros(lanes, dtype=np.int64), np.zeros(lanes, dtype=np.int64)
        self.lane_row, self.lane_utt = np.zeros(lanes, dtype=np.int64), np.full(lanes, -1, dtype=np.int64)
        self.stats = np.zeros((lanes, len(STAT)), dtype=np.int64)
        self.utt_stats = np.zeros((count, len(STAT)), dtype=np.int64)
        slots = self.slots = max(len(batch.partial_frames), 1)
        self.final_id = np.full(count, -1, dtype=np.int64)
        self.final_state = np.full(count, -1, dtype=np.int64)
        self.partial_id = np.full(count * slots, -1, dtype=np.int64)
        self.partial_state = np.full(count * slots, -1, dtype=np.int64)
        self.tok_lane = np.zeros(0, dtype=np.int32)
        self.tok_state = np.zeros(0, dtype=np.int32)
        self.tok_cost = np.zeros(0, dtype=np.float64)
        self.tok_id = np.zeros(0, dtype=np.int64)
        ring = self.arena_ring = min(self.s.arena_window, self.s.arena_capacity)
        self.arena_prev, self.arena_code = np.empty(ring, dtype=np.int64), np.empty(ring, dtype=np.int64)
        self.arena_size = self.arena_taken = self.known_arena = 0
        self.lane_first = np.full(lanes, I64_MAX, dtype=np.int64)  # arena entry of the lane's utterance's first
        self.utt_done = np.full(count, -1, dtype=np.int64)  # the step of the refill that released the utterance
        self.path_base = path_layout(batch.lengths, batch.partial_frames)
        self.paths = np.zeros(int(self.path_base[-1]), dtype=np.int64)
        self.path_len = np.zeros((count, 1 + slots), dtype=np.int64)
        self.since = self.next_step = 0  # the first step of the status period; the step the next frame runs
        self.lattice: list[np.ndarray] | None = [] if self.s.lattice_beam is not None else None
        self.lattice_size = self.lattice_taken = self.known_lattice = 0
        self.planned: dict[int, Refill] = {}

    def plan(self, refills: list[Refill]) -> None:
        """The GPU backend: one upload from pinned memory (the host does not wait)."""
        if refills:
            self.log.upload("refill plan")
        self.planned.update((r.step, r) for r in refills)

    def refill(self, step: int) -> None:
        """The planned refill of `step` (`refill_lanes`): counts of the released lanes to their utterances,
        lanes zeroed; utterances placed from frame step `step`: the lanes' end step and cost rows, the frame-0
        tokens (the start state closed over epsilons) appended to the queue and the arena, as many lanes'
        as the arena has room for (the others' tokens dropped, counted)."""
        r = self.planned.pop(step, None)
        if r is None:
            return
        out_lanes, in_lanes, in_utts = r.out_lanes, r.in_lanes, r.in_utts
        self.log.launch("refill_lanes")
        self.utt_stats[r.out_utts] = self.stats[out_lanes]
        self.stats[out_lanes] = 0
        self.utt_done[r.out_utts] = step
        if not in_lanes.shape[0]:
            return
        self.lane_end[in_lanes] = step + self.batch.lengths[in_utts]
        self.lane_start[in_lanes] = step
        self.lane_row[in_lanes] = self.batch.first_row[in_utts] - step
        self.lane_utt[in_lanes] = in_utts
        per_lane = 1 + self.lg.init_dest.shape[0]
        fit = min(in_lanes.shape[0], self.s.arena_room(self.arena_size, self.arena_taken) // per_lane)
        self.stats[in_lanes[fit:], STAT["queue_overflows"]] += per_lane
        self.lane_first[in_lanes[fit:]] = I64_MAX  # no entries: the utterance overflowed
        in_lanes = in_lanes[:fit]
        self.lane_first[in_lanes] = self.arena_size + per_lane * np.arange(fit, dtype=np.int64)
        lane, state, cost, ids, prev, code = admitted_tokens(self.lg, in_lanes, self.arena_size)
        self.tok_lane = np.concatenate([self.tok_lane, lane])
        self.tok_state = np.concatenate([self.tok_state, state])
        self.tok_cost = np.concatenate([self.tok_cost, cost])
        self.tok_id = np.concatenate([self.tok_id, ids])
        self._arena_write(prev, code)

    def links(self, step: int) -> None:
        if self.lattice is not None:
            self.epsilon_links(step)

    # ---- one frame step -------------------------------------------------------------------------------

    def frame(self, f: int, finals: bool, partials: bool) -> None:
        for name in FRAME_LAUNCHES:  # the GPU backend launches them at every step, whatever the token count
            self.log.launch(name)
        self.next_step = f + 1
        self._drop_finished_lanes(f)
        best, worst, count = self.lane_reduce()
        selected = self.radix_select(best, worst, count)
        cutoff, adaptive = self.lane_cutoff(best, worst, count, selected)
        deg, cum = self.token_degree(cutoff)
        self.log.arcs += min(int(cum[-1]) if cum.shape[0] else 0, self.s.arc_capacity)
        slot_tok, entry, new = self.expand_min(f, deg, cum)
        kept, key, index = self.expand_recombine(slot_tok, entry, new, adaptive)
        winners = self.resolve(kept, key, index, entry, new)
        self.emit_winners(f, winners, kept, index, slot_tok, entry, new)
        if finals:
            self.lane_best(f, finals=True, out_id=self.final_id, out_state=self.final_state)
        if partials:
            self.lane_best(f, finals=False, out_id=self.partial_id, out_state=self.partial_state)

    def _drop_finished_lanes(self, f: int) -> None:
        """Tokens of lanes whose utterance has ended take no part (the kernels skip them)."""
        active = self.lane_end[self.tok_lane] > f
        if not active.all():
            self.tok_lane, self.tok_state = self.tok_lane[active], self.tok_state[active]
            self.tok_cost, self.tok_id = self.tok_cost[active], self.tok_id[active]

    def lane_reduce(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per lane: best cost, worst cost, token count (atomicMin/atomicMax on ordered bits, atomicAdd)."""
        lanes = self.num_lanes
        best = np.full(lanes, U64_MAX, dtype=np.uint64)
        worst = np.zeros(lanes, dtype=np.uint64)
        keys = ordered64(self.tok_cost)
        np.minimum.at(best, self.tok_lane, keys)
        np.maximum.at(worst, self.tok_lane, keys)
        count = np.bincount(self.tok_lane, minlength=lanes).astype(np.int64)
        return from_ordered64(best), from_ordered64(worst), count

    def radix_select(self, best: np.ndarray, worst: np.ndarray, count: np.ndarray) -> np.ndarray:
        """(L, 2) float32: the max_active-th and min_active-th smallest float32 costs (0-based) of the lanes
        that need them (else +inf): the first part of `lane_select`, 4 passes of 256-bin histograms (the GPU's
        block per lane reads the lane's tokens as one contiguous run: checked here)."""
        runs = self.tok_lane[np.flatnonzero(np.diff(self.tok_lane, prepend=-1))]  # the lane of each run
        if np.unique(runs).shape[0] != runs.shape[0]:
            raise RuntimeError("a lane's tokens are not contiguous in the queue, which the GPU's per-lane "
                               "selection (radix_select in lanes.cu) relies on")
        cfg = self.s.pruning
        need = np.zeros((self.num_lanes, 2), dtype=bool)
        need[:, 0] = count > cfg.max_active
        beam_cutoff = best + self.beam32
        need[:, 1] = ((count > cfg.min_active) & (cfg.min_active > 0)
                      & (worst.astype(np.float32).astype(np.float64) > beam_cutoff))
        if not need.any():  # no lane has more tokens than max_active or min_active asks about
            return np.full((self.num_lanes, 2), np.inf)
        remaining = np.tile(np.array([cfg.max_active, cfg.min_active], dtype=np.int64), (self.num_lanes, 1))
        prefix = np.zeros((self.num_lanes, 2), dtype=np.uint32)
        keys = ordered32(self.tok_cost.astype(np.float32))
        need_token = need[self.tok_lane]
        bins = self.num_lanes * 2 * 256
        for shift in (24, 16, 8, 0):
            hist = np.zeros(bins, dtype=np.int64)  # (lane, slot, digit): the kernels' atomicAdd, as a bincount
            digit = ((keys >> np.uint32(shift)) & np.uint32(255)).astype(np.int64)
            for slot in (0, 1):
                match = need_token[:, slot].copy()
                if shift < 24:
                    match &= (keys >> np.uint32(shift + 8)) == prefix[self.tok_lane, slot]
                where = (self.tok_lane[match].astype(np.int64) * 2 + slot) * 256 + digit[match]
                hist += np.bincount(where, minlength=bins)
            cum = hist.reshape(self.num_lanes, 2, 256).cumsum(axis=2)  # one thread per (lane, slot) walks its bins
            chosen = (cum <= remaining[:, :, None]).sum(axis=2)
            before = np.take_along_axis(cum, np.maximum(chosen - 1, 0)[:, :, None], axis=2)[:, :, 0]
            remaining -= np.where(chosen > 0, before, 0)
            prefix = (prefix << np.uint32(8)) | np.minimum(chosen, 255).astype(np.uint32)
        values = from_ordered32(prefix).astype(np.float64)
        return np.where(need, values, np.inf)

    def lane_cutoff(self, best: np.ndarray, worst: np.ndarray, count: np.ndarray,
                    selected: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Kaldi's GetCutoff per lane (pruning.get_cutoff's rules): weight cutoff and adaptive beam (the end of
        `lane_select`)."""
        cfg, beam32 = self.s.pruning, self.beam32
        has = count > 0
        beam_cutoff = best + beam32
        max_binds = has & (count > cfg.max_active) & (selected[:, 0] < beam_cutoff)
        min_cut = np.full(self.num_lanes, np.inf)
        over = has & (count > cfg.min_active)
        if cfg.min_active == 0:
            min_cut[over] = best[over]
        else:
            inside = over & (worst.astype(np.float32).astype(np.float64) <= beam_cutoff)
            min_cut[inside] = beam_cutoff[inside]
            beyond = over & ~inside
            min_cut[beyond] = selected[beyond, 1]
        min_binds = has & ~max_binds & (min_cut > beam_cutoff)
        cutoff = np.where(max_binds, selected[:, 0], np.where(min_binds, min_cut, beam_cutoff))
        adaptive = np.full(self.num_lanes, beam32)
        bound = max_binds | min_binds
        adaptive[bound] = ((cutoff[bound] - best[bound]) + cfg.beam_delta32).astype(np.float32)
        cutoff[~has] = np.inf
        self.stats[:, STAT["max_active_binds"]] += max_binds
        self.stats[:, STAT["min_active_binds"]] += min_binds
        self.stats[:, STAT["beam_narrowings"]] += has & (adaptive < beam32)
        return cutoff, adaptive

    def token_degree(self, cutoff: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Closed-arc out-degree of every token below its lane's cutoff (0 otherwise), and prefix sums."""
        expand = self.tok_cost < cutoff[self.tok_lane]
        _add_per_lane(self.stats, STAT["tokens_pruned"], self.tok_lane[~expand])
        deg = np.where(expand, self.lg.degree[self.tok_state], 0).astype(np.int64)
        return deg, deg.cumsum()

    def expand_min(self, f: int, deg: np.ndarray, cum: np.ndarray) -> tuple[np.ndarray, ...]:
        """Arc slots j < min(E, arc capacity): token by binary search, arc entry, new cost; slots past the
        capacity are dropped and counted per lane."""
        total = int(cum[-1]) if cum.shape[0] else 0
        slots = min(total, self.s.arc_capacity)
        if total > slots:
            first = cum - deg
            lost = np.clip(cum - np.maximum(first, slots), 0, None)
            self.stats[:, STAT["queue_overflows"]] += np.bincount(self.tok_lane, lost, self.num_lanes).astype(
                np.int64)
        # slot j's token: the one whose range [cum - deg, cum) holds j (the kernels' binary search); spread
        # per token by repeat, then cut at the capacity
        tok = np.repeat(np.arange(deg.shape[0], dtype=np.int64), deg)[:slots]
        base = self.lg.offsets[self.tok_state] - (cum - deg)  # slot j's entry: its token's base + j
        entry = np.repeat(base, deg)[:slots] + np.arange(slots, dtype=np.int64)
        costs = self.batch.costs
        row = np.repeat((self.lane_row[self.tok_lane] + f) * costs.shape[1], deg)[:slots]
        ac = costs.reshape(-1).take(row + self.lg.column[entry]).astype(np.float64)
        new = (np.repeat(self.tok_cost, deg)[:slots] + self.lg.weight[entry]) + ac
        return tok, entry, new

    def expand_recombine(self, tok: np.ndarray, entry: np.ndarray, new: np.ndarray,
                         adaptive: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Next cutoff per lane = min new + adaptive beam; candidates below it atomicMin their packed key into
        their destination's entry of the lane's table (with `table_slots`, a hash slot: `_hash_slots`).
        Returns the kept candidates (positions, ascending) with their keys, and every candidate's table index
        (the later passes read the kept ones only)."""
        lanes = self.tok_lane[tok]
        min_new = np.full(self.num_lanes, U64_MAX, dtype=np.uint64)
        np.minimum.at(min_new, lanes, ordered64(new))
        next_cutoff = from_ordered64(min_new) + adaptive
        keep = new < next_cutoff[lanes]
        _add_per_lane(self.stats, STAT["tokens_pruned"], lanes[~keep])
        if self.s.table_slots:
            index, placed = self._hash_slots(lanes, self.lg.dest[entry], keep)
            _add_per_lane(self.stats, STAT["queue_overflows"], lanes[keep & ~placed])
            keep &= placed
        else:
            index = lanes.astype(np.int64) * self.lg.num_states + self.lg.dest[entry]
        _add_per_lane(self.stats, STAT["tokens_created"], lanes[keep])
        kept = np.flatnonzero(keep)
        key = (ordered32(new[kept].astype(np.float32)).astype(np.uint64) << np.uint64(32)) | entry[kept].astype(
            np.uint64)
        np.minimum.at(self.dense_key, index[kept], key)
        return kept, key, index

    def _hash_slots(self, lanes: np.ndarray, dest: np.ndarray, keep: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Table index of every kept candidate (0 for the others) and whether it found a slot: a slot per
        distinct destination state of a lane, `table_slots` at most (the GPU claims them by atomicCAS in
        an order of its own; a lane that reaches more states overflows on both)."""
        index = np.zeros(lanes.shape[0], dtype=np.int64)
        placed = np.zeros(lanes.shape[0], dtype=bool)
        dense = lanes[keep].astype(np.int64) * self.lg.num_states + dest[keep]
        states, which = np.unique(dense, return_inverse=True)
        lane_of = states // self.lg.num_states
        rank = np.arange(states.shape[0]) - np.searchsorted(lane_of, lane_of, side="left")
        index[keep] = (lane_of * self.table + rank)[which]
        placed[keep] = (rank < self.table)[which]
        index[~placed] = 0
        return index, placed

    def resolve(self, kept: np.ndarray, key: np.ndarray, index: np.ndarray, entry: np.ndarray,
                new: np.ndarray) -> np.ndarray:
        """`resolve_cost` and `resolve_index`: exact float64 cost, then entry, among the float32 ties of the
        kept candidates; returns the winners' positions, ascending (`mark`)."""
        at, where = kept, index[kept]
        tie = (key >> np.uint64(32)) == (self.dense_key[where] >> np.uint64(32))
        at, where = at[tie], where[tie]
        cost_key = ordered64(new[at])
        np.minimum.at(self.dense_cost, where, cost_key)
        tie = cost_key == self.dense_cost[where]
        at, where = at[tie], where[tie]
        low = entry[at].astype(np.uint32)
        np.minimum.at(self.dense_entry, where, low)
        return at[low == self.dense_entry[where]]

    def emit_winners(self, f: int, winners: np.ndarray, kept: np.ndarray, index: np.ndarray, tok: np.ndarray,
                     entry: np.ndarray, new: np.ndarray) -> None:
        """Prefix sums + `emit_winners`: the next token queue, arena entries, lattice records; the dense entries
        the kept candidates touched are reset."""
        s = self.s
        if s.lattice_beam is not None:
            best_here = from_ordered64(self.dense_cost[index[kept]])
            bare = self.lg.bare_arc[entry[kept]]
            near = (bare >= 0) & (new[kept] <= best_here + s.link_beam)
            at = kept[near]
            self._record(self.tok_lane[tok[at]], f, self.tok_state[tok[at]], bare[near])
        room = min(s.token_capacity, s.arena_room(self.arena_size, self.arena_taken))
        _add_per_lane(self.stats, STAT["queue_overflows"], self.tok_lane[tok[winners[max(room, 0):]]])
        winners = winners[:max(room, 0)]
        src = tok[winners]
        ids = self.arena_size + np.arange(winners.shape[0], dtype=np.int64)
        self._arena_write(self.tok_id[src], self.lg.code[entry[winners]])
        touched = index[kept]
        self.dense_key[touched] = U64_MAX
        self.dense_cost[touched] = U64_MAX
        self.dense_entry[touched] = U32_MAX
        self.tok_lane = self.tok_lane[src]
        self.tok_state = self.lg.dest[entry[winners]]
        self.tok_cost = new[winners]
        self.tok_id = ids

    def _arena_write(self, prev: np.ndarray, code: np.ndarray) -> None:
        """The wave's next arena entries (`arena_size` on) into the ring, entry i at slot i % ring: a slice per
        turn of the ring."""
        count, ring, done = prev.shape[0], self.arena_ring, 0
        while done < count:
            at = (self.arena_size + done) % ring
            part = min(count - done, ring - at)
            self.arena_prev[at:at + part] = prev[done:done + part]
            self.arena_code[at:at + part] = code[done:done + part]
            done += part
        self.arena_size += count

    def _record(self, lanes: np.ndarray, frame: int, src: np.ndarray, code: np.ndarray) -> None:
        """Append lattice records (lane, frame, src state, code) up to the capacity; count the rest."""
        room = self.s.lattice_room(self.lattice_size, self.lattice_taken)
        _add_per_lane(self.stats, STAT["queue_overflows"], lanes[room:])
        lanes, src, code = lanes[:room], src[:room], code[:room]
        self.lattice.append(np.stack([lanes, np.full(lanes.shape[0], frame), src, code], axis=1).astype(RECORD_DTYPE))
        self.lattice_size += lanes.shape[0]

    def epsilon_links(self, frame: int) -> None:
        """`dense_tok_set`, `eps_link_count` + prefix sums, `eps_link_write`, `dense_tok_set` to clear: every
        epsilon arc between two tokens of the frame within the lattice beam of its destination token."""
        lg, states = self.lg, self.token_index()
        for name in LINK_LAUNCHES:  # the GPU backend's, at every step
            self.log.launch(name)
        self.dense_tok[states] = self.tok_cost
        index, counts = gather_arcs(lg.eps_offsets, lg.eps_degree.astype(np.int64), self.tok_state)
        reach = self.tok_cost.repeat(counts) + lg.eps_weight[index]
        lanes = self.tok_lane.repeat(counts)
        target = lanes.astype(np.int64) * lg.num_states + lg.eps_dest[index]
        held = self.dense_tok[target]
        near = np.flatnonzero(np.isfinite(held) & (reach <= held + self.s.link_beam))
        self._record(lanes[near], frame, self.tok_state.repeat(counts)[near], -1 - index[near])
        self.dense_tok[states] = np.inf

    def token_index(self) -> np.ndarray:
        """Dense (lane, state) index of every token."""
        return self.tok_lane.astype(np.int64) * self.lg.num_states + self.tok_state

    def lane_target(self, f: int, finals: bool) -> np.ndarray:
        """`lane_target` of lanes.cu for every lane: the output slot of its best token after step f, or -1."""
        running = (self.lane_utt >= 0) & (self.lane_end > f)
        if finals:
            return np.where(running & (self.lane_end == f + 1), self.lane_utt, -1)
        every, done = self.batch.partial_every, f - self.lane_start + 1
        if not every:
            return np.full(self.num_lanes, -1, dtype=np.int64)
        return np.where(running & (done % every == 0), self.lane_utt * self.slots + done // every - 1, -1)

    def lane_best(self, f: int, finals: bool, out_id: np.ndarray, out_state: np.ndarray) -> None:
        """Best token of each lane with an output slot at step f (`lane_target`): lowest cost (+ final weight
        with `finals`), then lowest state, written to out_id / out_state at the slot."""
        for name in BEST_LAUNCHES:  # the GPU backend's, at every step where a lane ends (or takes a partial)
            self.log.launch(name)
        target = self.lane_target(f, finals)
        mine = target[self.tok_lane] >= 0
        lane, state = self.tok_lane[mine], self.tok_state[mine]
        cost = self.tok_cost[mine] + (self.lg.final[state] if finals else 0.0)
        finite = np.isfinite(cost)
        lane, state, cost, ids = lane[finite], state[finite], cost[finite], self.tok_id[mine][finite]
        best = np.full(self.num_lanes, U64_MAX, dtype=np.uint64)
        np.minimum.at(best, lane, ordered64(cost))
        tied = ordered64(cost) == best[lane]
        low = np.full(self.num_lanes, np.iinfo(np.int64).max, dtype=np.int64)
        np.minimum.at(low, lane[tied], state[tied].astype(np.int64))
        pick = tied & (state == low[lane])
        out_id[target[lane[pick]]] = ids[pick]
        out_state[target[lane[pick]]] = state[pick]

    # ---- status points and the wave's end: best paths traced through the arena, one download ------------

    def status(self, take: np.ndarray, trace: np.ndarray) -> LaneOutput:
        """The GPU backend's status point: `trace_paths` for the utterances released since the last one,
        `set_taken` (the arena entries no utterance in a lane needs are freed), and one read: the fill of the
        arena and the lattice records, the records made up to the previous status point, and the paths and
        rows of `take`."""
        self.log.launch("trace_paths")
        self.log.launch("set_taken")
        self.log.launch("concatenate")
        self.trace_paths(trace, self.since, unreleased=False)
        self.since = self.next_step
        self.set_taken()
        out = self._made_until(self.known_lattice, take, take)
        # the GPU's download, in int64 entries: the counts (16), records (two a record), paths, and per row its
        # outputs at the tables' widths
        row = 2 + 2 * self.slots + len(STAT) + 1 + self.slots
        entries = 16 + out.paths.shape[0] + (out.lattice.nbytes // 8 if out.lattice is not None else 0)
        rows = int(take.max() - take.min() + 1) if take.shape[0] else 0  # the span of `take`
        self.log.sync("status", 8 * (entries + rows * row))
        self.known_arena, self.known_lattice = self.arena_size, self.lattice_size
        return out

    def trace_paths(self, utts: np.ndarray, since: int, unreleased: bool) -> None:
        """`trace_paths`: over the span of `utts`, every utterance released at a refill from step `since` on
        (with `unreleased`, also those never released: the wave's end) gets its best paths (final, then each
        partial slot) traced back through the arena, written right-aligned into their rooms of the path
        buffer (`path_layout`), with their lengths."""
        if not utts.shape[0]:
            return
        span = np.arange(int(utts.min()), int(utts.max()) + 1)
        done = self.utt_done[span]
        u = span[(done >= since) | (unreleased & (done < 0))]
        paths = 1 + self.slots
        ids = np.concatenate([self.final_id[u][:, None], self.partial_id.reshape(-1, self.slots)[u]], axis=1)
        width = self.batch.lengths[u].astype(np.int64) + 1
        rooms = (self.path_base[u + 1] - self.path_base[u]) // width
        which = np.arange(paths)
        valid = which[None, :] < rooms[:, None]
        ends = self.path_base[u][:, None] + (which[None, :] + 1) * width[:, None]
        rows, cols = valid.nonzero()
        cur, end, room = ids[rows, cols], ends[rows, cols], width[rows]
        n = np.zeros(cur.shape[0], dtype=np.int64)
        prev, code, ring = self.arena_prev, self.arena_code, self.arena_ring
        alive = cur >= 0
        alive[alive] = prev[cur[alive] % ring] >= 0
        while alive.any():
            idx = alive.nonzero()[0]
            over = n[idx] >= room[idx]
            n[idx[over]], alive[idx[over]] = -1, False
            idx = idx[~over]
            self.paths[end[idx] - 1 - n[idx]] = code[cur[idx] % ring]
            n[idx] += 1
            cur[idx] = prev[cur[idx] % ring]
            alive[idx] = prev[cur[idx] % ring] >= 0
        self.path_len[u[rows], cols] = n

    def set_taken(self) -> None:
        """`set_taken`: the arena is freed up to the first entry of the oldest utterance still in a lane and
        not released (the released ones' paths are traced); the lattice records up to the host's take."""
        held = self.lane_utt >= 0
        held[held] = self.utt_done[self.lane_utt[held]] < 0
        first = int(self.lane_first[held].min()) if held.any() else self.arena_size
        self.arena_taken = min(first, self.arena_size)

    def _made_until(self, lattice: int, span: np.ndarray, rows: np.ndarray) -> LaneOutput:
        """A LaneOutput of the lattice records made since the last take up to the wave's `lattice`-th (the rest
        kept for the next take), the paths over the span of `span`'s rooms, and the rows of `rows`."""
        records = None
        if self.lattice is not None:
            flat = np.concatenate(self.lattice) if self.lattice else np.zeros((0, 4), dtype=RECORD_DTYPE)
            cut_records = lattice - self.lattice_taken
            records, self.lattice = flat[:cut_records], [flat[cut_records:]]
            self.lattice_taken = lattice
        slots, base = len(self.batch.partial_frames), self.path_base
        lo, hi = (int(span.min()), int(span.max()) + 1) if span.shape[0] else (0, 0)
        partial_id = self.partial_id.reshape(-1, self.slots)[rows, :slots]
        partial_state = self.partial_state.reshape(-1, self.slots)[rows, :slots]
        return LaneOutput(paths=self.paths[base[lo]:base[hi]].copy(),
                          path_end=path_ends(base, self.batch.lengths, rows, slots, int(base[lo])),
                          path_len=self.path_len[rows, :1 + slots], final_id=self.final_id[rows],
                          final_state=self.final_state[rows], partial_id=partial_id, partial_state=partial_state,
                          stats=self.utt_stats[rows], lattice=records)

    def finish(self, lanes: np.ndarray, utts: np.ndarray, untaken: np.ndarray) -> LaneOutput:
        self._clean_tables = self.dense_key.shape[0] // self.table  # every lane of the tables is clean again
        self.utt_stats[utts] = self.stats[lanes]
        self.log.launch("trace_paths")
        self.trace_paths(untaken, self.since, unreleased=True)
        self.known_arena, self.known_lattice = self.arena_size, self.lattice_size  # the GPU's counts read here
        self.log.arena_entries += self.arena_size
        return self._made_until(self.lattice_size, untaken, np.arange(len(self.batch.utt_ids)))


class TwinDecoder(LaneDecoder):
    """The GPU decoding algorithm on the CPU (numpy): same arguments and results as `gpu.GpuDecoder`.

    options: the search settings (`SearchOptions`); max_lanes, refill, lattice_workers and the queue
    capacities (`LaneSettings`): see `lanes.LaneDecoder`.
    """

    def __init__(self, graph: CsrGraph, options: SearchOptions = DEFAULT_OPTIONS, max_lanes: int = 256,
                 refill: bool = True, lattice_workers: int | None = None, **capacities: int) -> None:
        super().__init__(graph, NumpyLaneKernels, options, max_lanes=max_lanes, refill=refill,
                         lattice_workers=lattice_workers, **capacities)
