"""The GPU decoding algorithm, backend-neutral: many utterances (lanes) decoded together, frame by frame.

This module holds the host side that the numpy twin (`twin.py`) and the cupy backend (`gpu/backend.py`)
share: the frame loop as a fixed sequence of kernel calls, the planning of refills and the assembly of results;
the graph tables, the per-wave buffers and the kernels' interface are in `lane_tables.py`. Each backend
implements the same kernels (`LaneKernels`): numpy functions in the twin, CUDA kernels in
`gpu/kernels/lanes.cu` on the GPU, so CI checks the GPU algorithm step by step on every commit.

A wave is one run of the frame loop over many utterances on a fixed number of lanes. Each lane holds one
utterance at a time, from its first frame step to its end step (`lane_end`; a lane's utterance reads its
frame f - first step from the wave's cost rows through `lane_row`); between frame steps, lanes whose
utterance ended a step earlier are refilled with the next utterances (`LaneKernels.refill`), as planned
ahead at the last status point (`_Planner`: the lengths say when each lane frees).

The frame loop does not wait for the device. Its counts (live tokens, candidate arcs, winners, arena and
lattice fill) stay in device memory, where the kernels read them: they run on fixed grids, with grid-stride
loops or one contiguous chunk of the items per block, and the prefix sums are the blocks' sums scanned by
one block (`scan_partials`) and each block's prefix within its chunk. Every `STATUS_EVERY` frame steps, a
status point traces the best paths of the utterances released since the last one on the device and reads
the device once (`LaneKernels.status`): the fill, which decides whether the wave takes more utterances, the
paths traced at the previous status point and the lattice records made up to it, from which results are
assembled. The backpointers stay on the device in a ring buffer (`LaneSettings.arena_window`), which holds
every entry of the utterances in the lanes, and are never downloaded; the lattice records wait in another
until the host takes them (`lattice_window`).

Per frame step f, over the tokens of every lane whose utterance is still running:

1. `frame_begin` (per-lane scratch reset), `lane_reduce`: per-lane best and worst cost, token count and
   first token (atomicMin / atomicMax on order-preserving float64 bits, atomicAdd).
2. `lane_select`, one block per lane: where max_active or min_active may bind, the exact k-th smallest
   float32 cost for k = max_active (when more tokens are active) and k = min_active (when tokens lie beyond
   the beam) by radix selection over 256-bin cost histograms of the order-preserving float32 bits, 8 bits a
   pass: Kaldi's `nth_element` cutoffs, exactly, without sorting, over the lane's tokens (contiguous in the
   queue), so a lane that needs no selection (most of them: max-active rarely binds) does no pass. Then
   Kaldi's GetCutoff (pruning.py's rules and float types): the weight cutoff, the adaptive beam;
   max-active and min-active binds and beam narrowings are counted.
3. `token_degree` + prefix sums (`scan_partials`, `scan_apply`): out-degrees (in the closed-arc table) of
   the tokens below the cutoff; arc slots past the arc capacity are counted as overflows.
4. `expand_min`: load-balanced over arcs: slot j finds its token by binary search in the prefix sums and
   its arc as an offset; the per-lane minimum of the new costs (atomicMin) gives the next cutoff.
5. `expand_recombine`: candidates below the next cutoff pack (order-preserving float32 cost << 32 | arc
   entry) into a uint64 and `atomicMin` it into the lane's table entry of their destination state: a dense
   per-lane state table, or with `LaneSettings.table_slots` a per-lane hash table over states.
6. `resolve_cost`, `resolve_index`: among candidates whose float32 costs tie with the winner's, the lowest
   float64 cost, then the lowest arc entry (two more atomicMin passes): the CPU decoder's tie rule exactly.
7. `mark` + prefix sums (`scan_partials`, then within `emit_winners`), `emit_winners`: winners compacted
   into the next token queue and the backpointer arena; bare emitting-arc candidates within the lattice
   beam of their destination's winner are recorded as lattice links, and (`links`: `dense_tok_set`,
   `eps_link_count`, prefix sums, `eps_link_write`, `dense_tok_set` to clear) every epsilon arc between two
   of the new tokens within the lattice beam of its destination (lattice_paths.py).
8. At frames where partial hypotheses are asked for, and at each lane's last frame, `best_cost`,
   `best_state`, `best_pick`: the best token per lane (lowest cost, then lowest state; at the end with final
   weights), written to the utterance's output slot.

Epsilon arcs: the epsilon closure is iterated to its fixed point once per graph on the host
(`epsilon.epsilon_closure`) and each emitting arc is stored followed by every closure move
(`epsilon.ClosedArcs`), so a frame's emitting and epsilon steps are the one expansion above; this is the
CPU decoder's default mode, with the same tokens. Graphs with negative epsilon weights need the CPU backend.

Queues have fixed capacities (tokens, candidate arcs, arena entries, lattice records) shared by the lanes of
a wave; anything that does not fit is dropped and counted in `DecodeStats.queue_overflows`. The lanes that
overflowed are decoded again in two halves, down to a lane alone (each lane's search is independent of the
others, so a retried lane gets exactly the result it would have had with room to spare). A lane alone whose
backpointers filled the arena ring (a long utterance on a large graph) is decoded alone again with the ring
doubled, until it fits or reaches `arena_capacity`; a lane that still overflows alone keeps the overflow as
its result's status.

The lane algorithm expands the tokens below the cutoff and has no pass of Kaldi's that bounds the next cutoff
by the best token's arcs when the best token itself is not expanded; this changes no result. When the
max_active cutoff, rounded to float32, falls at or below the best cost, no token is expanded (the best has
the lowest cost), as in Kaldi; the CPU backends' best-token bound then prunes nothing, there being no
candidate to prune.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace

import numpy as np

from specbench.decoder.inputs import checked_scores
from specbench.decoder.lane_tables import (
    GROUP_CHUNK_MIN,
    LATTICE_JOB_MIN,
    RECORD_DTYPE,
    STAT,
    STATUS_EVERY,
    KernelLog,
    LaneBatch,
    LaneGraph,
    LaneKernels,
    LaneOutput,
    LaneSettings,
    Refill,
    partial_frame_indices,
)
from specbench.decoder.options import DEFAULT_OPTIONS, SearchOptions, call_partial_every, require_options
from specbench.decoder.result import (
    STATUS_BAD_SCORES,
    STATUS_EMPTY,
    STATUS_NO_FINAL,
    STATUS_OK,
    STATUS_OVERFLOW,
    DecodeResult,
    DecodeStats,
)
from specbench.decoder.traceback import BestPath, partial_words, read_flat_paths
from specbench.wfst.graph import CsrGraph

_FRAMES, _CREATED, _EPSILON, _OVERFLOWS = (STAT[n] for n in ("frames", "tokens_created", "epsilon_iterations",
                                                              "queue_overflows"))


class LaneDecoder:
    """Decode utterances with the lane algorithm on one backend's kernels.

    kernels_factory(lane_graph, settings) -> LaneKernels; options: the search settings (`SearchOptions`);
    capacities: LaneSettings' queue capacities. `decode_batch(items)` takes (utt_id, loglikes (T, P)
    float32) pairs and returns one DecodeResult per item, in order; a bad item gets a failed result with
    the reason and never stops the others.

    At most `max_lanes` utterances are decoded together. With `refill` (the default: continuous batching, as
    Kaldi's CUDA decoder does with its channels), the items run longest first and a lane whose utterance has
    ended takes the next one after one idle frame step (which keeps each lane's lattice records of two
    utterances apart), so the lanes stay busy until the items run out; a wave takes new utterances while its
    backpointer arena and lattice records fill less than a quarter of their capacities (as read at the
    last status point, every `STATUS_EVERY` frame steps), and the rest go to the next wave. Without `refill`,
    the items run in batches of max_lanes of similar length, each as many frame steps as its longest. At each
    status point, the results of the utterances that ended before the previous one are taken from the device
    and assembled (`_Harvest`; `decode_stream` passes them on at once); with lattices, the records are
    grouped by utterance and pruned on `lattice_workers` host threads (default: `default_lattice_workers()`;
    one more keeps the takes in order) while decoding goes on
    (`lattice_paths.lane_lattices`; the compiled grouping and pruning release the GIL), so the frame loop's
    thread only reads paths. `frame_steps` counts
    the frame steps run (retries included), `lane_frames` the utterances' frames, `ring_retries` the
    decodes of an utterance alone again with a larger arena ring (one per doubling), `kernel_log` the device work (`KernelLog`).
    """

    def __init__(self, graph: CsrGraph, kernels_factory, options: SearchOptions = DEFAULT_OPTIONS,
                 max_lanes: int = 256, refill: bool = True, lattice_workers: int | None = None,
                 **capacities: int) -> None:
        self.options = require_options(type(self).__name__, options)
        self.options.require_no_partial_lattices(type(self).__name__)
        if isinstance(max_lanes, int) and max_lanes > 0:  # the ring holds the lanes' utterances: 2^16 a lane
            capacities.setdefault("arena_window", min(1 << 30, max(LaneSettings.arena_window, max_lanes << 16)))
            # a wave admits utterances while its records are under a quarter of this: 2^17 a lane keeps
            # thousands of lanes full with lattices (about 12,000 records an utterance on the SLURP test set)
            capacities.setdefault("lattice_capacity", min((1 << 31) - 1,
                                                          max(LaneSettings.lattice_capacity, max_lanes << 17)))
        self.settings = LaneSettings(options, **capacities)
        self.lane_graph = LaneGraph.build(graph)
        if not isinstance(max_lanes, int) or max_lanes < 1:
            raise ValueError(f"max_lanes must be a positive int, got {max_lanes!r}")
        lattice_workers = default_lattice_workers() if lattice_workers is None else lattice_workers
        if not isinstance(lattice_workers, int) or lattice_workers < 1:
            raise ValueError(f"lattice_workers must be a positive int, got {lattice_workers!r}")
        self.max_lanes, self.refill, self.lattice_workers = max_lanes, bool(refill), lattice_workers
        arcs = max(graph.emitting.dest.shape[0], graph.epsilon.dest.shape[0])
        if self.settings.lattice_beam is not None and arcs > np.iinfo(RECORD_DTYPE).max:
            raise ValueError(f"lattice records hold arc indices as {np.dtype(RECORD_DTYPE).name}, and this graph "
                             f"has {arcs:,} arcs of one kind; decode it without lattices, or on the cpu backend")
        start = 1 + self.lane_graph.init_dest.shape[0]  # a new lane's tokens: the start state and its closure
        slots = self.settings.table_slots
        if self.settings.lattice_beam is not None and 0 < slots < start:  # the GPU's link table would overflow
            raise ValueError(f"table_slots = {slots} holds fewer states than a new lane starts with ({start}: the "
                             "start state and its epsilon closure), whose lattice links would be lost. Fix: "
                             f"table_slots of at least {1 << (start - 1).bit_length()}, or 0 (dense tables)")
        self._kernels_factory = kernels_factory
        self.kernels: LaneKernels = kernels_factory(self.lane_graph, self.settings)
        self._arena_ring = min(self.settings.arena_window, self.settings.arena_capacity)  # the kernels' ring
        self._max_ilabel = graph.max_ilabel
        self.frame_steps = 0
        self.lane_frames = 0
        self.ring_retries = 0
        self._lattice_threads: tuple[ThreadPoolExecutor, ThreadPoolExecutor] | None = None

    @property
    def kernel_log(self) -> KernelLog:
        return self.kernels.log

    def lattice_threads(self) -> tuple[ThreadPoolExecutor, ThreadPoolExecutor]:
        """(the grouping thread, the `lattice_workers` pruning threads), started on first use."""
        if self._lattice_threads is None:
            self._lattice_threads = (ThreadPoolExecutor(1, thread_name_prefix="lattice-grouping"),
                                     ThreadPoolExecutor(self.lattice_workers, thread_name_prefix="lattices"))
        return self._lattice_threads

    def reset_counts(self) -> None:
        """Zero `frame_steps`, `lane_frames`, `ring_retries` and `kernel_log` (e.g. after a warm-up)."""
        self.frame_steps = self.lane_frames = self.ring_retries = 0
        self.kernels.log = KernelLog()

    def decode(self, loglikes: np.ndarray, utt_id: str = "", partial_every: int | None = None) -> DecodeResult:
        """One utterance (a batch of one). Bad scores raise ValueError naming the utterance, as in every
        backend's `decode` (`decode_batch` gives such an item a failed result instead)."""
        result = self.decode_batch([(utt_id, loglikes)], partial_every)[0]
        if result.status.startswith(STATUS_BAD_SCORES):  # checked once on the way in; raised here as ValueError
            checked_scores(str(utt_id), loglikes, self._max_ilabel)
        return result

    def decode_batch(self, items: Sequence[tuple[str, np.ndarray]],
                     partial_every: int | None = None) -> list[DecodeResult]:
        """Decode `items` on at most max_lanes lanes; partial hypotheses every `partial_every` frames
        (default `options.partial_every`). One result per item, in order."""
        results: list[DecodeResult | None] = [None] * len(items)
        for position, result in self._decode_items(items, partial_every):
            results[position] = result
        return [r for r in results if r is not None]

    def decode_stream(self, items: Sequence[tuple[str, np.ndarray]],
                      partial_every: int | None = None) -> Iterator[tuple[int, DecodeResult]]:
        """`decode_batch`'s results as they are ready, as (position in `items`, result) pairs: bad items at
        once, then the utterances of each wave at the status points after they end (every `STATUS_EVERY`
        frame steps; with lattices, once their lattices are pruned), so that a caller can pass them on while
        the rest decode."""
        yield from self._decode_items(items, partial_every)

    def _decode_items(self, items: Sequence[tuple[str, np.ndarray]],
                      partial_every: int | None) -> Iterator[tuple[int, DecodeResult]]:
        partial_every = call_partial_every(self.options, partial_every)
        good: list[tuple[int, str, np.ndarray]] = []
        for position, (utt_id, loglikes) in enumerate(items):
            try:
                costs = self._checked_costs(str(utt_id), loglikes)
            except ValueError as err:
                yield position, DecodeResult.bad_scores(str(utt_id), err)
                continue
            if costs.shape[0] == 0:
                yield position, DecodeResult.failed(str(utt_id), STATUS_EMPTY, 0, DecodeStats())
                continue
            good.append((position, str(utt_id), costs))
        # refilled lanes: longest first, so that the last to end are short; batches: of similar lengths
        good.sort(key=lambda item: -item[2].shape[0] if self.refill else item[2].shape[0])
        size = max(len(good) if self.refill else self.max_lanes, 1)
        for begin in range(0, len(good), size):
            yield from self._decode_retrying(good[begin:begin + size], partial_every)

    def _decode_retrying(self, chunk: list[tuple[int, str, np.ndarray]],
                         partial_every: int | None) -> Iterator[tuple[int, DecodeResult]]:
        """(position, result) of the utterances of `chunk` as they are ready; those that overflowed the shared
        queues decoded again in two halves (recursively), so that only an utterance that overflows alone keeps
        the overflow."""
        again: list[tuple[int, str, np.ndarray]] = []
        alone: tuple[tuple[int, str, np.ndarray], DecodeResult] | None = None
        rest = chunk
        while rest:  # the waves: each takes a prefix of what is left
            taken = 0
            for index, result in self._decode_wave(rest, partial_every):
                taken += 1
                if result.status == STATUS_OVERFLOW and len(chunk) > 1:
                    again.append(rest[index])
                elif result.status == STATUS_OVERFLOW and self._ring_filled():
                    alone = rest[index], result  # decoded again once this wave's loop has ended
                else:
                    yield rest[index][0], result
            rest = rest[taken:]
        if alone is not None:
            yield alone[0][0], self._decode_with_larger_ring(alone[0], alone[1], partial_every)
        if again:
            middle = (len(again) + 1) // 2
            for half in (again[:middle], again[middle:]):
                if half:
                    yield from self._decode_retrying(half, partial_every)

    def _ring_filled(self) -> bool:
        """Whether the last wave's backpointers filled the kernels' arena ring (as read at its last status
        point). In a wave of one utterance nothing is freed before it ends, so its overflow was the ring's."""
        return self.kernels.known_arena >= self._arena_ring

    def _decode_with_larger_ring(self, item: tuple[int, str, np.ndarray], result: DecodeResult,
                                 partial_every: int | None) -> DecodeResult:
        """An utterance that filled the arena ring alone (a long one on a large graph: every backpointer
        of its frames stays on the device until its best path is traced), decoded alone again on kernels with
        the ring doubled, until it fits or the ring reaches `arena_capacity` (the kernels of the larger
        ring are made for the retry and dropped after it; their work counts in this decoder's log)."""
        home, home_ring = self.kernels, self._arena_ring
        try:
            while (result.status == STATUS_OVERFLOW and self._ring_filled()
                   and self._arena_ring < self.settings.arena_capacity):
                self._arena_ring = min(2 * self._arena_ring, self.settings.arena_capacity)
                larger = replace(self.settings, arena_window=self._arena_ring)
                self.kernels = self._kernels_factory(self.lane_graph, larger)
                self.kernels.log = home.log
                result = [r for _, r in self._decode_wave([item], partial_every)][0]
                self.ring_retries += 1
        finally:
            self.kernels, self._arena_ring = home, home_ring
        return result

    def _checked_costs(self, utt_id: str, loglikes: np.ndarray) -> np.ndarray:
        """(T, P) float32 acoustic costs -acoustic_scale * loglikes, after `inputs.checked_scores`."""
        scores = checked_scores(utt_id, loglikes, self._max_ilabel)
        return scores * np.float32(-self.settings.acoustic_scale)

    def _room_to_admit(self) -> bool:
        """Whether a wave takes more utterances: its arena and lattice records under a quarter full at the last
        status point."""
        s, k = self.settings, self.kernels
        return k.known_arena < s.arena_capacity // 4 and k.known_lattice < s.lattice_capacity // 4

    def _decode_wave(self, chunk: list[tuple[int, str, np.ndarray]],
                     partial_every: int | None) -> Iterator[tuple[int, DecodeResult]]:
        """One run of the frame loop over a prefix of `chunk` (all of it, unless the arena fills): (index in
        `chunk`, result) of every utterance it takes, as they are ready (`_Harvest`). Every `STATUS_EVERY`
        frame steps, a status point: the host reads the device once (`LaneKernels.status`), decides whether
        the wave takes more utterances, and plans the refills of the next `STATUS_EVERY` steps."""
        k, total = self.kernels, len(chunk)
        lengths = np.array([c[2].shape[0] for c in chunk], dtype=np.int64)
        partials = partial_frame_indices(int(lengths.max()), partial_every)
        batch = LaneBatch.of([c[1] for c in chunk], [c[2] for c in chunk], partials)
        every = batch.partial_every
        num_lanes = min(self.max_lanes, total)
        k.start(batch, num_lanes)
        planner = _Planner(lengths, num_lanes, self.refill)
        lane_utt = np.full(num_lanes, -1, dtype=np.int64)
        lane_start = np.zeros(num_lanes, dtype=np.int64)
        lane_end = np.zeros(num_lanes, dtype=np.int64)
        harvest = _Harvest(self, batch)

        def begin(step: int) -> None:
            """Step `step`'s planned refill (the host's view of the lanes follows), then its epsilon links."""
            event = planner.at(step)
            if event is not None:
                harvest.released(event.out_utts)
                lane_utt[event.in_lanes] = event.in_utts
                lane_start[event.in_lanes] = step
                lane_end[event.in_lanes] = step + lengths[event.in_utts]
                harvest.placed(event.in_lanes, step, event.in_utts)
                with log.host_stage("frame launches"):
                    k.refill(step)
            with log.host_stage("frame launches"):
                k.links(step)

        log = k.log
        with log.host_stage("plan refills"):
            k.plan(planner.window(0, STATUS_EVERY, admit=True))
        begin(0)
        f = 0
        while ((lane_end > f).any() or planner.pending(f + 1)  # lanes run, or a refill is planned
               or (self.refill and (f + 1) % STATUS_EVERY == 0 and planner.admitted < len(lengths)
                   and (lane_end == f).any())):  # all ended just before a status point: it refills them
            running = lane_end > f
            ending = running & (lane_end == f + 1)
            partials = bool(every and (running & ((f - lane_start + 1) % every == 0)).any())
            with log.host_stage("frame launches"):
                k.frame(f, bool(ending.any()), partials)
            self.frame_steps += 1
            if (f + 1) % STATUS_EVERY == 0:
                yield from harvest.status_point()
                if self.refill:
                    with log.host_stage("plan refills"):
                        k.plan(planner.window(f + 1, f + 1 + STATUS_EVERY, admit=self._room_to_admit()))
            begin(f + 1)
            yield from harvest.ready()
            f += 1
        self.lane_frames += int(lengths[:planner.admitted].sum())
        left = (lane_utt >= 0).nonzero()[0]
        harvest.released(lane_utt[left])
        with log.host_stage("final download"):
            out = k.finish(left, lane_utt[left], harvest.untaken())
        yield from harvest.finish(out)


def default_lattice_workers(processes: int = 1) -> int:
    """Lattice pruning threads for each of `processes` lane decoders sharing this machine: the cores this
    process may use, shared among them, less one each for the frame loop's thread and the grouping thread;
    between 1 and 8."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 2)
    return max(1, min(8, cores // max(1, processes) - 2))


class _Planner:
    """A wave's placements of utterances on lanes, planned ahead of the frame loop (the lengths say when each
    lane's utterance ends): utterances in order, each onto a lane one idle step after the lane's last
    utterance ended (without refill, only at step 0). `window(begin, end, admit)` plans steps begin..end - 1
    (new utterances only with `admit`); `at(step)` is the planned refill of a step."""

    def __init__(self, lengths: np.ndarray, num_lanes: int, refill: bool) -> None:
        self.lengths, self.refill = lengths, refill
        self.end = np.full(num_lanes, -1, dtype=np.int64)  # the planned end step of each lane's utterance
        self.utt = np.full(num_lanes, -1, dtype=np.int64)
        self.admitted = 0
        self.events: dict[int, Refill] = {}
        self.last = -1  # the last step with a planned refill

    def window(self, begin: int, end: int, admit: bool) -> list[Refill]:
        planned = []
        total = self.lengths.shape[0]
        for step in range(begin, end):
            if not admit or self.admitted == total or (step and not self.refill):
                break
            free = (self.end < 0).nonzero()[0] if step == 0 else (self.end == step - 1).nonzero()[0]
            take = free[:total - self.admitted]
            if not take.shape[0]:
                continue
            out_lanes = take[self.utt[take] >= 0]
            utts = np.arange(self.admitted, self.admitted + take.shape[0], dtype=np.int64)
            event = Refill(step, out_lanes, self.utt[out_lanes].copy(), take, utts)
            self.utt[take], self.end[take] = utts, step + self.lengths[utts]
            self.admitted += take.shape[0]
            self.events[step] = event
            self.last = step
            planned.append(event)
        return planned

    def at(self, step: int) -> Refill | None:
        return self.events.pop(step, None)

    def pending(self, step: int) -> bool:
        """Whether a refill is planned at `step` or later."""
        return self.last >= step


class _Harvest:
    """A wave's results as its utterances end. Lanes release their utterances (their last step done, their
    counts moved to them) at refills; at each status point the kernels trace the best paths of those released
    since the last one, and hand over, in the status download, the paths and outputs of those released
    before it (traced then) and the lattice records made up to it, which hold all of theirs
    (`LaneKernels.status`). At the next status point, before its download (the device still running the
    steps enqueued since), their paths are read into results (`assemble_results`), and with lattices their
    records (grouped by utterance: `path_kernels.group_records`) are pruned on the decoder's worker threads
    (`lattice_paths.lane_lattices`), a result passed on once its lattice is ready."""

    def __init__(self, decoder: LaneDecoder, batch: LaneBatch) -> None:
        self.decoder, self.batch = decoder, batch
        self.placements: list[np.ndarray] = []
        self.held: dict[int, list[np.ndarray]] = {}  # utterance -> its records (frame, src, code) so far
        self.waiting: list[np.ndarray] = []  # released since the last status point
        self.complete = np.zeros(0, dtype=np.int64)  # released before the last status point, not yet taken
        self.downloaded: tuple[LaneOutput, np.ndarray] | None = None  # the last status download, unassembled
        self.pending: list[tuple[np.ndarray, list[DecodeResult], Future]] = []  # results awaiting lattices

    def placed(self, lanes: np.ndarray, step: int, utts: np.ndarray) -> None:
        self.placements.append(np.stack([lanes, np.full(lanes.shape[0], step), utts], axis=1))

    def released(self, utts: np.ndarray) -> None:
        if utts.shape[0]:
            self.waiting.append(utts)

    def status_point(self) -> Iterator[tuple[int, DecodeResult]]:
        """First what the last status download brought is assembled (while the device runs the frame steps
        enqueued since); then the status point: the best paths of the utterances released since the last one
        are traced on the device, and the status download takes those released before it (traced then; what
        was made up to it holds all of their lattice records); those released since wait for the next."""
        self._take_downloaded()
        utts = self.complete
        self.complete = np.concatenate(self.waiting) if self.waiting else np.zeros(0, dtype=np.int64)
        self.waiting = []
        with self.decoder.kernels.log.host_stage("status reads"):
            self.downloaded = (self.decoder.kernels.status(utts, self.complete), utts)
        yield from self.ready()

    def untaken(self) -> np.ndarray:
        """The utterances released and not yet taken."""
        return np.concatenate([self.complete, *self.waiting])

    def _take_downloaded(self) -> None:
        if self.downloaded is not None:
            self._take(*self.downloaded)
            self.downloaded = None

    def ready(self) -> Iterator[tuple[int, DecodeResult]]:
        yield from self._ready(wait=False)

    def finish(self, out: LaneOutput) -> Iterator[tuple[int, DecodeResult]]:
        """The rest, from the kernels' final output (every utterance's rows), then every lattice awaited."""
        self._take_downloaded()
        utts = self.untaken()
        self.complete, self.waiting = np.zeros(0, dtype=np.int64), []
        self._take(out.rows(utts), utts)
        yield from self._ready(wait=True)

    def _take(self, out: LaneOutput, utts: np.ndarray) -> None:
        """Results of `utts` from `out` (their rows, in that order, and what the kernels made since the last
        take); lattices handed to the worker threads."""
        with self.decoder.kernels.log.host_stage("assemble results"):
            self._assemble(out, utts)

    def _assemble(self, out: LaneOutput, utts: np.ndarray) -> None:
        """Results from the paths; with lattices, the records handed to the grouping thread (`_lattices`),
        which hands the utterances' records on to the pruning workers: the frame loop's thread only reads
        paths, so that it goes back to launching frame steps at once."""
        d, b = self.decoder, self.batch
        part = replace(b, utt_ids=[b.utt_ids[u] for u in utts.tolist()], lengths=b.lengths[utts],
                       first_row=b.first_row[utts])
        results = assemble_results(d.lane_graph, part, out) if utts.shape[0] else []
        if d.settings.lattice_beam is None:
            if utts.shape[0]:
                self.pending.append((utts, results, None))
            return
        records = out.lattice if out.lattice is not None and out.lattice.shape[0] else None
        if records is not None and len(self.placements) > 1:
            self.placements = [np.concatenate(self.placements)]
        if records is None and not utts.shape[0]:
            return
        job = d.lattice_threads()[0].submit(self._lattices, records, self.placements[0] if records is not None
                                            else None, utts, part)
        if utts.shape[0]:
            self.pending.append((utts, results, job))

    def _lattices(self, records: np.ndarray | None, placements: np.ndarray | None, utts: np.ndarray,
                  part: LaneBatch) -> list[Future]:
        """On the grouping thread (one, so takes are held in order): a take's records grouped by utterance
        (`path_kernels.group_records`, compiled, the GIL released) in chunks of at least GROUP_CHUNK_MIN
        records on the workers, and held; the records of `utts` (complete now) shared among the workers in
        pruning jobs of at least LATTICE_JOB_MIN utterances. Returns the pruning jobs, in order."""
        d = self.decoder
        if records is not None:  # in chunks on the workers; each chunk's pieces appended in order
            step = max(GROUP_CHUNK_MIN, -(-records.shape[0] // d.lattice_workers))
            chunks = [d.lattice_threads()[1].submit(self._grouped, records[lo:lo + step], placements)
                      for lo in range(0, records.shape[0], step)]
            for chunk in chunks:
                grouped, keys, bounds = chunk.result()
                for u, lo, hi in zip(keys.tolist(), bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
                    self.held.setdefault(u, []).append(grouped[lo:hi])  # views: no copy
        ready = [self._records_of(u) for u in utts.tolist()]
        if not utts.shape[0]:
            return []
        size = max(LATTICE_JOB_MIN, -(-len(ready) // d.lattice_workers))
        jobs = []
        for lo in range(0, len(ready), size):
            hi = min(lo + size, len(ready))
            chunk = replace(part, utt_ids=part.utt_ids[lo:hi], lengths=part.lengths[lo:hi],
                            first_row=part.first_row[lo:hi])
            jobs.append(d.lattice_threads()[1].submit(self._pruned, chunk, ready[lo:hi]))
        return jobs

    def _grouped(self, records: np.ndarray, placements: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """On a worker: `path_kernels.group_records` of a chunk of a take's records."""
        from specbench.decoder.path_kernels import group_records

        with self.decoder.kernels.log.thread_stage("group records"):
            return group_records(records, placements)

    def _pruned(self, part: LaneBatch, records: list[np.ndarray]) -> list:
        """On a pruning worker: the lattices of `part`'s utterances from their records."""
        from specbench.decoder.lattice_paths import lane_lattices  # lattices are optional

        d = self.decoder
        with d.kernels.log.thread_stage("prune lattices"):
            return lane_lattices(d.lane_graph.graph, part, records, d.settings.lattice_beam)

    def _records_of(self, u: int) -> np.ndarray:
        """Utterance u's lattice records (frame, src, code), taken from those held: a view of one take's
        grouped records when one take brought them all, else their concatenation."""
        pieces = self.held.pop(u, None)
        if not pieces:
            return np.zeros((0, 3), dtype=RECORD_DTYPE)
        return pieces[0] if len(pieces) == 1 else np.concatenate(pieces)

    def _ready(self, wait: bool) -> Iterator[tuple[int, DecodeResult]]:
        """The results whose lattices are ready (all of them with `wait`), in the order taken."""
        while self.pending:
            utts, results, job = self.pending[0]
            if job is not None and not wait and not (job.done() and all(j.done() for j in job.result())):
                return
            self.pending.pop(0)
            lattices = [lat for j in job.result() for lat in j.result()] if job is not None else [None] * len(results)
            for u, result, lattice in zip(utts.tolist(), results, lattices, strict=True):
                yield u, (replace(result, lattice=lattice) if result.ok and lattice is not None else result)


def records_by_utterance(records: np.ndarray, occupancy: np.ndarray) -> np.ndarray:
    """The numpy reference of `path_kernels.group_records` (which the lane decoder uses). Lattice records (lane, frame step, src, code) as (utterance, frame of the utterance, src, code), from
    the placements (lane, first step, utterance): a record belongs to its lane's last placement that began
    at or before its step (a lane's utterances are a step apart, so their records never share a step)."""
    if records.shape[0] == 0:
        return records
    span = int(max(records[:, 1].max(), occupancy[:, 1].max())) + 2
    keys = occupancy[:, 0] * span + occupancy[:, 1]
    order = np.argsort(keys, kind="stable")
    at = order[np.searchsorted(keys[order], records[:, 0] * span + records[:, 1], side="right") - 1]
    out = records.copy()
    out[:, 0] = occupancy[at, 2]
    out[:, 1] = records[:, 1] - occupancy[at, 1]
    return out


def assemble_results(lg: LaneGraph, batch: LaneBatch, out: LaneOutput) -> list[DecodeResult]:
    """Every utterance's DecodeResult from its best paths, traced on the device (final and partials, all read
    by one compiled call: `read_flat_paths`, their codes gathered from `out.paths` without a loop; lattices
    are attached by `_Harvest` once pruned). Runs on the frame loop's thread between two status points, so
    its cost per utterance bounds one decoder's stream (docs/decoders.md)."""
    from specbench.decoder.result import PartialHypothesis

    init_tokens = lg.init_dest.shape[0]
    count = len(batch.utt_ids)
    lengths = batch.lengths[:count].tolist()
    stats = []
    for u, row in enumerate(out.stats[:count].tolist()):
        # the frame-0 tokens (one epsilon round when the start state has closure moves), one round a frame
        row[_FRAMES] = lengths[u]
        row[_CREATED] += init_tokens
        row[_EPSILON] += lengths[u] + (1 if init_tokens else 0)
        stats.append(DecodeStats(*row))
    has_path = (out.stats[:count, _OVERFLOWS] == 0) & (out.final_id[:count] >= 0)
    utts, slots = has_path.nonzero()[0], np.full(int(has_path.sum()), -1, dtype=np.int64)
    states = out.final_state[utts]
    if batch.partial_frames:  # (utterance, slot) of every partial within its utterance that has a path
        frames = np.asarray(batch.partial_frames, dtype=np.int64)
        inside = (frames[None, :] < batch.lengths[utts][:, None]) & (out.partial_id[utts] >= 0)
        rows, cols = inside.nonzero()
        order = np.lexsort((np.concatenate([np.full(utts.shape[0], -1), cols]),
                            np.concatenate([utts, utts[rows]])))
        states = np.concatenate([states, out.partial_state[utts[rows], cols]])[order]
        utts, slots = np.concatenate([utts, utts[rows]])[order], np.concatenate([slots, cols])[order]
    end, length = out.path_end[utts, slots + 1], out.path_len[utts, slots + 1]
    if (length < 0).any():
        raise RuntimeError("a traced best path is longer than its room in the path buffer (one entry per "
                           "frame and at most one frame-0 epsilon move): the arena was overwritten; please "
                           "report this with the graph and the utterance")
    offsets = np.zeros(length.shape[0] + 1, dtype=np.int64)
    np.cumsum(length, out=offsets[1:])
    codes = out.paths[np.repeat(end - length - offsets[:-1], length) + np.arange(offsets[-1], dtype=np.int64)]
    paths = read_flat_paths(codes, offsets, lg.moves.num_moves + 1, lg.graph, lg.moves, batch.costs,
                            batch.first_row[utts], states)
    best: dict[int, BestPath] = {}
    partials: dict[int, list] = {}
    for u, slot, state, path in zip(utts.tolist(), slots.tolist(), states.tolist(), paths, strict=True):
        if slot < 0:
            best[u] = path
        else:
            words = partial_words(path.word_ids, state, lg.word_end)
            partials.setdefault(u, []).append(PartialHypothesis(frame=batch.partial_frames[slot], word_ids=words))
    results = []
    for u, utt_id in enumerate(batch.utt_ids):
        frames = lengths[u]
        if stats[u].queue_overflows:
            results.append(DecodeResult.failed(utt_id, STATUS_OVERFLOW, frames, stats[u]))
        elif u not in best:
            results.append(DecodeResult.failed(utt_id, STATUS_NO_FINAL, frames, stats[u]))
        else:
            path = best[u]
            results.append(DecodeResult(
                utt_id=utt_id, status=STATUS_OK, word_ids=path.word_ids, graph_cost=path.graph_cost,
                acoustic_cost=path.acoustic_cost, num_frames=frames, word_end_frames=path.word_end_frames,
                stats=stats[u], partials=tuple(partials.get(u, ()))))
    return results
