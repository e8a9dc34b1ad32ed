"""The GPU backend: the lane decoder (lanes.py) on CUDA kernels (kernels/lanes.cu) through cupy.

`GpuDecoder` decodes many utterances together (lanes), frame by frame, with the kernels of `lanes.cu`;
`twin.NumpyLaneKernels` is the same algorithm in numpy, tested against the CPU backend in CI. The frame
loop does not wait for the device: the counts it needs stay in device memory (`ctr`), read by kernels on
fixed grids, and the buffers are allocated once per decoder. The host reads the device once per status
point (every `lane_tables.STATUS_EVERY` frame steps: the counts, the lattice records made up to the previous status
point, the best paths and outputs of the utterances released before it, which a kernel traced through the
backpointers then; the backpointers never leave the device) and uploads the refills planned for the next
steps then, asynchronously from pinned memory. Every launch and every host read of
the frame loop goes through `_on_device` and `_read`, which count them in `KernelLog` (the twin counts
the same; the CUDA-graph test of `tests/gpu` captures the frame steps, which fails on any host wait);
`GpuDecoder(timing=True)` also times every launch with CUDA events.

cupy is imported lazily, only here: `gpu_available()` says whether a CUDA device is usable, and building a
`GpuDecoder` without one raises `GpuUnavailableError` with the reason. Several processes (or Ray actors
with fractional `num_gpus`) may each hold a GpuDecoder on one GPU, each with its own CUDA context.
"""

from __future__ import annotations

import functools
import re
from functools import partial

import numpy as np

from specbench.decoder.gpu.nvrtc import thread_locale_kept
from specbench.decoder.gpu.sources import LANES, kernel_source
from specbench.decoder.lane_tables import (
    RECORD_DTYPE,
    STAT,
    KernelLog,
    LaneBatch,
    LaneGraph,
    LaneKernels,
    LaneOutput,
    LaneSettings,
    Refill,
    path_ends,
    path_layout,
)
from specbench.decoder.lanes import LaneDecoder
from specbench.decoder.options import DEFAULT_OPTIONS, SearchOptions
from specbench.errors import SpecbenchError
from specbench.wfst.graph import CsrGraph

BLOCK = 256  # threads per block of the fixed-grid kernels (at most lanes.cu's SCAN_BLOCK)
SELECT_BLOCK = 256  # threads of lane_select's block per lane
ONE_BLOCK = 1024  # threads of the one-block kernels (scan_partials, refill_lanes, set_taken)
I64_MAX = np.int64(2**63 - 1)
_PEAK = {"bytes": 0}


class GpuUnavailableError(SpecbenchError):
    """No usable CUDA device (or no cupy): the GPU backend cannot run here."""


def _cupy():
    try:
        import cupy
    except ImportError as err:
        raise GpuUnavailableError(f"the GPU backend needs cupy ({err}). Fix: pip install 'specbench[gpu]' on a "
                                  "machine with an NVIDIA GPU, or use --backend cpu") from err
    try:
        available = cupy.is_available()
    except Exception as err:  # noqa: BLE001 - any driver problem means "not available"
        raise GpuUnavailableError(f"cupy cannot reach a CUDA device: {err}. Fix: use --backend cpu") from err
    if not available:
        raise GpuUnavailableError("no CUDA device is available (cupy.is_available() is False). Fix: run on a "
                                  "machine with an NVIDIA GPU and driver, or use --backend cpu")
    return cupy


def gpu_available() -> bool:
    """Whether the GPU backend can run here."""
    try:
        _cupy()
    except GpuUnavailableError:
        return False
    return True


def _on_stream(method):
    """A CudaLaneKernels method whose work goes to the decoder's own stream (in order, and capturable)."""

    @functools.wraps(method)
    def run(self, *args, **kwargs):
        with self.stream:
            return method(self, *args, **kwargs)

    return run


def peak_memory_bytes() -> int:
    """The most device memory cupy's pool held while GpuDecoders of this process decoded (since the last
    `reset_peak_memory`)."""
    return _PEAK["bytes"]


def reset_peak_memory() -> None:
    """Return the pool's free blocks to the device and start the peak again from what is still held: a
    benchmark's next configuration, once the decoders of the one before are gone."""
    if _PEAK["bytes"]:  # a decoder ran, so cupy is there
        import cupy

        cupy.get_default_memory_pool().free_all_blocks()
        _PEAK["bytes"] = cupy.get_default_memory_pool().total_bytes()


CTR = {"live": 0, "arena": 1, "lattice": 2, "arcs_sum": 5}  # fields of the device counts (C_* in lanes.cu)
NCTR = 16


class CudaLaneKernels(LaneKernels):
    """The lane algorithm's kernels on the GPU (mirrors twin.NumpyLaneKernels method by method).

    Buffers are allocated once (grown only when a wave has more lanes than any before), sized by the
    capacities: two token queues, the candidate arrays, the recombination tables, and the rings of arena
    entries and lattice records. The counts live in the device array `ctr`; every kernel runs on a fixed grid
    (`grid` blocks, a few per multiprocessor), so the frame loop launches without reading anything back.
    """

    def __init__(self, lg: LaneGraph, settings: LaneSettings, timing: bool = False, graphs: bool = False) -> None:
        cp = self.cp = _cupy()
        self.lg, self.s = lg, settings
        self.log, self.timing, self._events = KernelLog(), timing, []
        if graphs and timing:
            raise ValueError("GpuDecoder: cuda_graphs and timing exclude each other (a replayed graph has no "
                             "per-kernel events). Fix: time without cuda_graphs")
        self.graphs: dict | None = {} if graphs else None  # (parity, key) -> the captured frame (CUDA graph)
        self.stream = cp.cuda.Stream(non_blocking=True)  # all of the decoder's work, in order
        source = kernel_source(LANES)
        self.module = cp.RawModule(code=source, options=("--std=c++14",))
        with thread_locale_kept():  # compiled by NVRTC here (unless cupy's cache has it)
            self.fn = {name: self.module.get_function(name)  # loaded now: a graph capture may not load a module
                       for name in re.findall(r'extern "C" __global__ void (\w+)\(', source)}
        self.per_lane = 1 + lg.init_dest.shape[0]
        cfg = settings.pruning
        self.max_active, self.min_active = np.int64(cfg.max_active), np.int64(cfg.min_active)
        self.beam32, self.beam_delta = np.float64(cfg.beam32), np.float64(cfg.beam_delta32)
        sms = cp.cuda.Device().attributes["MultiProcessorCount"]
        self.grid = int(min(4 * sms, 1024))  # blocks of every fixed-grid kernel (scan_partials scans their sums)
        self.arena_ring = min(settings.arena_window, settings.arena_capacity)
        self.lattice_ring = min(settings.lattice_window, settings.lattice_capacity)
        self.capacities = tuple(np.int64(v) for v in (settings.arc_capacity, settings.token_capacity,
                                                      settings.arena_capacity, self.arena_ring))
        self._pinned = np.zeros(0, np.int64)
        self._lanes = 0  # the lanes the per-lane buffers and queues are sized for
        self._clean_tables = 0  # the lanes of the recombination tables kept from the last wave (0: none)
        with self.stream:  # set up on the decoder's stream, complete before it decodes
            self._upload_graph(lg)
            self._allocate()
        self.stream.synchronize()

    def _upload_graph(self, lg: LaneGraph) -> None:
        cp, g = self.cp, {}
        for name, array, dtype in (("offsets", lg.offsets, np.int64), ("degree", lg.degree, np.int32),
                                   ("dest", lg.dest, np.int32), ("weight", lg.weight, np.float64),
                                   ("column", lg.column, np.int32), ("code", lg.code, np.int64),
                                   ("bare_arc", lg.bare_arc, np.int64), ("final", lg.final, np.float64),
                                   ("eps_offsets", lg.eps_offsets, np.int64), ("eps_dest", lg.eps_dest, np.int32),
                                   ("eps_weight", lg.eps_weight, np.float64),
                                   ("init_state", np.concatenate([[lg.graph.start], lg.init_dest]), np.int32),
                                   ("init_cost", np.concatenate([[0.0], lg.init_cost]), np.float64),
                                   ("init_code", np.concatenate([[0], -1 - lg.init_move]), np.int64)):
            g[name] = cp.asarray(np.ascontiguousarray(array, dtype=dtype))
        self.g = g

    def _allocate(self) -> None:
        """The buffers whose sizes follow the capacities alone: counts, block sums, candidate arrays, rings."""
        cp, s, slots = self.cp, self.s, self.s.arc_capacity
        self.costs = cp.zeros(1, cp.float32)  # the waves' cost rows, grown as needed (kept: graphs hold it)
        self.ctr = cp.zeros(NCTR, cp.int64)
        self.partial = cp.zeros(2 * self.grid, cp.uint64)
        self.c_tok, self.c_entry = cp.empty(slots, cp.int32), cp.empty(slots, cp.uint32)
        self.c_cost, self.c_index = cp.empty(slots, cp.float64), cp.empty(slots, cp.int64)
        self.c_key, self.c_keep = cp.empty(slots, cp.uint64), cp.empty(slots, cp.uint8)
        self.flags = cp.empty(slots, cp.uint8)
        self.arena_prev, self.arena_code = cp.empty(self.arena_ring, cp.int64), cp.empty(self.arena_ring, cp.int64)
        # lattice records: 4 int32 each (lane_tables.RECORD_DTYPE), downloaded as 2 int64 each beside the int64 outputs
        self.records = cp.empty(4 * self.lattice_ring if s.lattice_beam is not None else 4, cp.int32)

    def _launch(self, name: str, blocks: int, *args, block: int | None = None) -> None:
        """Kernel `name` on `blocks` blocks of `block` threads (default BLOCK)."""
        fn = self.fn[name]
        threads = block or BLOCK
        self._on_device(name, lambda: fn((int(blocks),), (threads,), args))

    def _on_device(self, name: str, call):
        """`call()`: one kernel launch (ours, or a cupy concatenation), counted in `log` under `name`; with
        `timing`, between two CUDA events that `_collect_times` reads."""
        self.log.launch(name)
        if not self.timing:
            return call()
        start, end = self.cp.cuda.Event(), self.cp.cuda.Event()
        start.record()
        out = call()
        end.record()
        self._events.append((name, start, end))
        return out

    def _read(self, array, what: str) -> np.ndarray:
        """A device array on the host: the host waits for the device, counted in `log` under `what`."""
        self.log.sync(what, int(array.nbytes))
        return array.get()

    def _collect_times(self) -> None:
        """Milliseconds per kernel name from the recorded CUDA events (after the last one completes)."""
        if self._events:
            self._events[-1][2].synchronize()
            for name, start, end in self._events:
                self.log.kernel_ms[name] += self.cp.cuda.get_elapsed_time(start, end)
            self._events.clear()

    def _size_for(self, lanes: int) -> None:
        """The per-lane buffers and the token queues (emitted tokens, plus every lane's frame-0 tokens)."""
        if lanes <= self._lanes:
            return
        cp, u64 = self.cp, self.cp.uint64
        self._lanes = lanes
        self._reallocated()
        queue = self.s.token_capacity + lanes * self.per_lane
        self.queues = [(cp.empty(queue, cp.int32), cp.empty(queue, cp.int32), cp.empty(queue, cp.float64),
                        cp.empty(queue, cp.int64)) for _ in range(2)]
        self.deg, self.cum = cp.empty(queue, cp.int64), cp.empty(queue, cp.int64)
        self.links_of, self.tok_slot = cp.empty(queue, cp.int64), cp.empty(queue, cp.int64)
        self.lane_end, self.lane_start = cp.zeros(lanes, cp.int32), cp.zeros(lanes, cp.int32)
        self.lane_row, self.lane_utt = cp.zeros(lanes, cp.int64), cp.full(lanes, -1, cp.int64)
        self.lane_first = cp.full(lanes, I64_MAX, cp.int64)
        self.lane_u64 = [cp.empty(lanes, u64) for _ in range(9)]  # frame_begin's per-lane scratch
        self.cutoff, self.adaptive = cp.empty(lanes, cp.float64), cp.empty(lanes, cp.float64)
        self.stats = cp.zeros(lanes * len(STAT), u64)
        self._clean_tables = 0

    @_on_stream
    def start(self, batch: LaneBatch, num_lanes: int) -> None:
        self._start(batch, num_lanes)  # the wave's upload, outside the frame loop

    def _start(self, batch: LaneBatch, num_lanes: int) -> None:
        cp, lg, lanes, count = self.cp, self.lg, num_lanes, len(batch.utt_ids)
        self._size_for(lanes)
        self.batch, self.num_lanes = batch, lanes
        self.P = int(batch.costs.shape[1])
        rows = np.ascontiguousarray(batch.costs, dtype=np.float32).ravel()
        if self.costs.shape[0] < rows.shape[0]:
            self.costs = cp.empty(max(rows.shape[0], 2 * self.costs.shape[0]), cp.float32)
            self._reallocated()
        self.costs[:rows.shape[0]].set(rows, stream=self.stream)
        self.lane_end.fill(0)
        self.lane_start.fill(0)
        self.lane_row.fill(0)
        self.lane_utt.fill(-1)
        self.lane_first.fill(I64_MAX)
        self.stats.fill(0)
        table = self._lanes * self.s.table_size(lg.num_states)
        if self._clean_tables != self._lanes:  # a wave leaves every entry it touched reset
            self._reallocated()
            self.dense_key = cp.full(table, np.uint64(2**64 - 1), dtype=cp.uint64)
            self.dense_cost = cp.full(table, np.uint64(2**64 - 1), dtype=cp.uint64)
            self.dense_entry = cp.full(table, np.uint32(2**32 - 1), dtype=cp.uint32)
            self.hash_state = cp.full(table if self.s.table_slots else 1, -1, dtype=cp.int32)
            if self.s.lattice_beam is not None:
                self.dense_tok = cp.full(table, np.inf, cp.float64)
                self.tok_hash = cp.full(table if self.s.table_slots else 1, -1, dtype=cp.int32)
        self._clean_tables = 0  # until the wave finishes
        self.utt_stats = cp.zeros(count * len(STAT), cp.uint64)
        slots = self.slots = max(len(batch.partial_frames), 1)
        self.final_id = cp.full(count, -1, cp.int64)
        self.final_state = cp.full(count, -1, cp.int64)
        self.partial_id = cp.full(count * slots, -1, cp.int64)
        self.partial_state = cp.full(count * slots, -1, cp.int64)
        self.utt_done = cp.full(count, -1, cp.int64)  # the step of the refill that released the utterance
        self.path_base_host = path_layout(batch.lengths, batch.partial_frames)
        self.path_base = cp.asarray(self.path_base_host)
        self.lengths = cp.asarray(batch.lengths.astype(np.int32))
        self.paths = cp.zeros(max(int(self.path_base_host[-1]), 1), cp.int64)
        self.path_len = cp.zeros(count * (1 + slots), cp.int64)
        self.since = self.next_step = 0  # the first step of the status period; the step the next frame runs
        self.ctr.fill(0)
        self.current = 0  # which of the two queues holds the live tokens
        self.known_arena = self.lattice_taken = self.known_lattice = 0
        self.arcs_seen = 0
        self.planned: dict[int, tuple[int, int, int]] = {}  # step -> (offset in plan_dev, n_out, n_in)
        self.plan_dev = cp.zeros(1, cp.int64)

    @_on_stream
    def plan(self, refills: list[Refill]) -> None:
        """The refills of the next frame steps in one upload from pinned host memory, which the host does not
        wait for (called at the wave's start and at status points, when the last upload has completed)."""
        if not refills:
            return
        cp = self.cp
        parts, at = [], 0
        for r in refills:
            ends = r.step + self.batch.lengths[r.in_utts].astype(np.int64)
            rows = self.batch.first_row[r.in_utts] - r.step
            event = [r.out_lanes, r.out_utts, r.in_lanes, r.in_utts, ends, rows]
            self.planned[r.step] = (at, int(r.out_lanes.shape[0]), int(r.in_lanes.shape[0]))
            parts.extend(event)
            at += sum(int(x.shape[0]) for x in event)
        size = max(at, 1)
        if self._pinned.shape[0] < size:
            import cupyx

            self._pinned = cupyx.empty_pinned(max(size, 2 * self._pinned.shape[0]), np.int64)
        host = self._pinned[:size]
        host[:at] = np.concatenate([np.asarray(x, dtype=np.int64) for x in parts]) if at else 0
        self.plan_dev = cp.empty(size, cp.int64)
        self.plan_dev.set(host, stream=self.stream)
        self.log.upload("refill plan")

    @_on_stream
    def refill(self, step: int) -> None:
        """The planned refill of `step`: one launch of `refill_lanes` (one block)."""
        planned = self.planned.pop(step, None)
        if planned is None:
            return
        at, n_out, n_in = planned
        i32 = np.int32
        lane, state, cost, ids = self.queues[self.current]
        self._launch("refill_lanes", 1, self.ctr, self.plan_dev[at:], i32(n_out), i32(n_in),
                     i32(self.per_lane), self.g["init_state"], self.g["init_cost"], self.g["init_code"],
                     *self.capacities[2:], self.stats, self.utt_stats, self.lane_end,
                     self.lane_start, self.lane_row, self.lane_utt, lane, state, cost, ids, self.arena_prev,
                     self.arena_code, self.lane_first, self.utt_done, block=ONE_BLOCK)

    def _scan(self, cols: int, which: int) -> None:
        """`scan_partials`: the fixed grid's block sums into offsets, and the counts that follow (lanes.cu)."""
        s, i64 = self.s, np.int64
        self._launch("scan_partials", 1, self.ctr, np.int32(self.grid), np.int32(cols), self.partial,
                     np.int32(which), *self.capacities, i64(s.lattice_capacity), i64(self.lattice_ring),
                     block=ONE_BLOCK)

    @_on_stream
    def links(self, step: int) -> None:
        if self.s.lattice_beam is not None:
            self._epsilon_links(step)

    @_on_stream
    def frame(self, f: int, finals: bool, partials: bool) -> None:
        self.next_step = f + 1
        if self.graphs is None:
            self._frame_launches()
        else:
            self._frame_graph()
        self.current = 1 - self.current
        targets = self.lane_u64[5:]
        if finals:
            self._lane_best(True, self.final_id, self.final_state, targets[0], targets[1])
        if partials:
            self._lane_best(False, self.partial_id, self.partial_state, targets[2], targets[3])
        _PEAK["bytes"] = max(_PEAK["bytes"], self.cp.get_default_memory_pool().total_bytes())

    def _reallocated(self) -> None:
        """A buffer the captured graphs point to is replaced: they are captured again."""
        if self.graphs:
            self.graphs.clear()

    def _frame_graph(self) -> None:
        """The frame's launches as a CUDA graph: captured once per queue parity (and per wave shape and
        buffers), then replayed with one launch; the kernels read the step and the counts from `ctr`."""
        key = (self.current, self.num_lanes, self.P)  # graphs are dropped whenever a buffer is reallocated
        captured = self.graphs.get(key)
        if captured is None:
            before = self.log.launches.copy()
            self.stream.begin_capture()
            try:
                self._frame_launches()
            finally:
                graph = self.stream.end_capture()
            captured = self.graphs[key] = (graph, self.log.launches - before)
        else:
            self.log.launches.update(captured[1])
        captured[0].launch(self.stream)
        self.log.graph_launches += 1

    def _frame_launches(self) -> None:
        """The kernels of one frame step, up to the winners (lane_tables.FRAME_LAUNCHES), with the same arguments at
        every step of a parity (`current`)."""
        g, lanes, grid, ctr = self.g, self.num_lanes, self.grid, self.ctr
        i32, i64 = np.int32, np.int64
        best, worst, count, min_new, first, *targets = self.lane_u64
        tok_lane, tok_state, tok_cost, tok_id = self.queues[self.current]
        self._launch("frame_begin", _blocks(lanes), i32(lanes), ctr, best, worst, count, min_new, first, *targets)
        self._launch("lane_reduce", grid, ctr, tok_lane, tok_cost, self.lane_end, best, worst, count, first)
        self._launch("lane_select", lanes, i32(lanes), self.max_active, self.min_active, self.beam32,
                     self.beam_delta, best, worst, count, first, tok_cost, self.cutoff, self.adaptive, self.stats,
                     block=SELECT_BLOCK)
        self._launch("token_degree", grid, ctr, tok_lane, tok_state, tok_cost, self.lane_end, self.cutoff,
                     g["degree"], self.deg, self.partial, self.stats)
        self._scan(1, 0)
        self._launch("scan_apply", grid, ctr, tok_lane, self.deg, self.partial, self.cum, self.stats)
        self._launch("expand_min", grid, ctr, self.lane_row, i32(self.P), tok_lane, tok_state, tok_cost,
                     self.deg, self.cum, g["offsets"], g["weight"], g["column"], self.costs, min_new, self.c_tok,
                     self.c_entry, self.c_cost)
        self._launch("expand_recombine", grid, ctr, i32(self.lg.num_states), tok_lane, self.c_tok, self.c_entry,
                     self.c_cost, min_new, self.adaptive, g["dest"], self.dense_key, self.c_index, self.c_key,
                     self.c_keep, self.stats, i32(self.s.table_slots), self.hash_state)
        self._launch("resolve_cost", grid, ctr, self.c_keep, self.c_key, self.c_index, self.c_cost, self.dense_key,
                     self.dense_cost)
        self._launch("resolve_index", grid, ctr, self.c_keep, self.c_key, self.c_index, self.c_cost, self.c_entry,
                     self.dense_key, self.dense_cost, self.dense_entry)
        with_lattice = self.s.lattice_beam is not None
        self._launch("mark", grid, ctr, i32(with_lattice), np.float64(self.s.link_beam or 0.0), self.c_keep,
                     self.c_key, self.c_index, self.c_cost, self.c_entry, g["bare_arc"], self.dense_key,
                     self.dense_cost, self.dense_entry, self.flags, self.partial)
        self._scan(2, 1)
        out = self.queues[1 - self.current]
        self._launch("emit_winners", grid, ctr, i64(self.arena_ring), i64(self.lattice_ring), self.flags,
                     self.partial, self.c_tok, self.c_entry, self.c_cost, self.c_index, tok_lane, tok_state, tok_id,
                     g["dest"], g["code"], g["bare_arc"], *out, self.arena_prev, self.arena_code, self.records,
                     self.dense_key, self.dense_cost, self.dense_entry, self.stats, i32(self.s.table_slots),
                     self.hash_state)

    def _epsilon_links(self, frame: int) -> None:
        """Epsilon lattice links among the live tokens (twin.NumpyLaneKernels.epsilon_links)."""
        g, grid, ctr, i32 = self.g, self.grid, self.ctr, np.int32
        states = i32(self.lg.num_states)
        tok_lane, tok_state, tok_cost, _ = self.queues[self.current]
        common = (tok_lane, tok_state, tok_cost)
        beam = np.float64(self.s.link_beam)
        arcs = (g["eps_offsets"], g["eps_dest"], g["eps_weight"], self.dense_tok)
        table = (i32(self.s.table_slots), self.tok_hash)
        self._launch("dense_tok_set", grid, ctr, states, *common, self.dense_tok, i32(0), *table, self.tok_slot,
                     self.stats)
        self._launch("eps_link_count", grid, ctr, states, beam, *common, *arcs, self.links_of, self.partial, *table)
        self._scan(1, 2)
        self._launch("eps_link_write", grid, ctr, states, beam, np.int64(self.lattice_ring), *common,
                     *arcs, self.links_of, self.partial, self.records, self.stats, *table)
        self._launch("dense_tok_set", grid, ctr, states, *common, self.dense_tok, i32(1), *table, self.tok_slot,
                     self.stats)

    def _lane_best(self, finals: bool, out_id, out_state, best, low) -> None:
        """Best tokens of the lanes that end (`finals`) or take a partial at step f, into their utterances'
        slots: the kernels find the lanes from their placement (`lane_target` in lanes.cu), nothing uploaded."""
        i32 = np.int32
        tok_lane, tok_state, tok_cost, tok_id = self.queues[self.current]
        common = (self.ctr, i32(finals), i32(self.batch.partial_every), i32(self.slots), self.lane_end,
                  self.lane_start, self.lane_utt, tok_lane, tok_state, tok_cost, self.g["final"])
        self._launch("best_cost", self.grid, *common, best)
        self._launch("best_state", self.grid, *common, best, low)
        self._launch("best_pick", self.grid, *common, best, low, tok_id, out_id, out_state)

    def _ring_slices(self, ring, begin: int, end: int, width: int = 1) -> list:
        """Entries begin..end - 1 of a wave (rows of `width`) from their ring buffer: one or two slices."""
        size = ring.shape[0] // width
        if end <= begin:
            return []
        lo, hi = begin % size, (end - 1) % size + 1
        if lo < hi:
            return [ring[lo * width:hi * width]]
        return [ring[lo * width:], ring[:hi * width]]

    def _rows(self, lo: int, hi: int) -> list:
        """The output rows of utterances lo..hi - 1 (device slices)."""
        width, paths = self.slots, 1 + self.slots
        return [self.final_id[lo:hi], self.final_state[lo:hi], self.partial_id[lo * width:hi * width],
                self.partial_state[lo * width:hi * width],
                self.utt_stats[lo * len(STAT):hi * len(STAT)].view(self.cp.int64),
                self.path_len[lo * paths:hi * paths]]

    def _download(self, parts: list, what: str | None) -> np.ndarray:
        """Device arrays concatenated on the device and read in one download (counted as `what`)."""
        cp = self.cp
        if what is None:  # the wave's final download, outside the frame loop
            return cp.concatenate(parts).get()
        return self._read(self._on_device("concatenate", lambda: cp.concatenate(parts)), what)

    def _take(self, lattice: int, span: np.ndarray, lo: int, hi: int, head: list,
              what: str | None) -> tuple[np.ndarray, LaneOutput]:
        """One download: `head` (device arrays, returned first), the lattice records from the last take up to
        the wave's `lattice`-th (the take advanced), the traced paths over the span of `span`'s rooms, and the
        rows of utterances lo..hi - 1."""
        with_lattice = self.s.lattice_beam is not None
        records = (self._ring_slices(self.records.view(self.cp.int64), self.lattice_taken, lattice, 2)
                   if with_lattice else [])
        base = self.path_base_host
        first, last = (int(span.min()), int(span.max()) + 1) if span.shape[0] else (0, 0)
        paths = [self.paths[int(base[first]):int(base[last])]]
        sizes = [sum(int(p.shape[0]) for p in head), 2 * (lattice - self.lattice_taken) * with_lattice,
                 int(base[last] - base[first])]
        host = self._download([*head, *records, *paths, *self._rows(lo, hi)], what)
        self.lattice_taken = lattice
        count, width, slots = hi - lo, self.slots, len(self.batch.partial_frames)
        bounds = np.cumsum([*sizes, count, count, count * width, count * width, count * len(STAT)])
        head_part, flat, codes, final_id, final_state, partial_id, partial_state, stats, path_len = \
            np.split(host, bounds)
        rows = np.arange(lo, hi)
        return head_part, LaneOutput(
            paths=codes, path_end=path_ends(base, self.batch.lengths, rows, slots, int(base[first])),
            path_len=path_len.reshape(count, 1 + width)[:, :1 + slots], final_id=final_id, final_state=final_state,
            partial_id=partial_id.reshape(count, width)[:, :slots],
            partial_state=partial_state.reshape(count, width)[:, :slots], stats=stats.reshape(count, len(STAT)),
            lattice=flat.view(RECORD_DTYPE).reshape(-1, 4) if with_lattice else None)

    def _trace_paths(self, utts: np.ndarray, unreleased: bool) -> None:
        """`trace_paths` over the span of `utts`: the utterances released since the status period began (with
        `unreleased`, also those never released)."""
        i32 = np.int32
        lo, hi = (int(utts.min()), int(utts.max()) + 1) if utts.shape[0] else (0, 0)
        blocks = min(self.grid, _blocks((hi - lo) * (1 + self.slots)))
        self._launch("trace_paths", blocks, i32(lo), i32(hi), i32(self.slots), np.int64(self.since),
                     i32(unreleased), self.utt_done, self.path_base, self.lengths, self.final_id, self.partial_id,
                     self.arena_prev, self.arena_code, np.int64(self.arena_ring), self.paths, self.path_len)

    @_on_stream
    def status(self, take: np.ndarray, trace: np.ndarray) -> LaneOutput:
        """The status point (the one host read of STATUS_EVERY frame steps): the paths of `trace` (released
        since the last one) traced, the arena freed up to what the lanes hold (`set_taken`), and one download:
        the counts, the lattice records made up to the previous status point, and the paths and rows of `take`
        (their span: they were released close together)."""
        self._trace_paths(trace, unreleased=False)
        self.since = self.next_step
        self._launch("set_taken", 1, self.ctr, np.int64(self.known_lattice), np.int32(self.num_lanes),
                     self.lane_utt, self.lane_first, self.utt_done, block=ONE_BLOCK)
        lo, hi = (int(take.min()), int(take.max()) + 1) if take.shape[0] else (0, 0)
        ctr, out = self._take(self.known_lattice, take, lo, hi, [self.ctr], "status")
        self._counts(ctr)
        return out.rows(take - lo)

    def _counts(self, ctr: np.ndarray) -> None:
        self.known_arena, self.known_lattice = int(ctr[CTR["arena"]]), int(ctr[CTR["lattice"]])
        self.log.arcs += int(ctr[CTR["arcs_sum"]]) - self.arcs_seen
        self.arcs_seen = int(ctr[CTR["arcs_sum"]])

    @_on_stream
    def finish(self, lanes: np.ndarray, utts: np.ndarray, untaken: np.ndarray) -> LaneOutput:
        return self._finish(lanes, utts, untaken)  # the wave's download, outside the frame loop

    def _finish(self, lanes: np.ndarray, utts: np.ndarray, untaken: np.ndarray) -> LaneOutput:
        count = len(self.batch.utt_ids)
        self._clean_tables = self._lanes
        self._trace_paths(untaken, unreleased=True)
        self._collect_times()
        self._counts(self.ctr.get())
        self.log.arena_entries += self.known_arena
        lane_stats, out = self._take(self.known_lattice, untaken, 0, count, [self.stats.view(self.cp.int64)], None)
        out.stats[utts] = lane_stats.reshape(self._lanes, len(STAT))[lanes]
        return out


def _blocks(count: int) -> int:
    return max(1, (count + BLOCK - 1) // BLOCK)


class GpuDecoder(LaneDecoder):
    """The lane decoder on the GPU: same arguments and results as `twin.TwinDecoder`.

    options: the search settings (`SearchOptions`); max_lanes, refill, lattice_workers and the queue capacities
    (`LaneSettings`): see `lanes.LaneDecoder`. device: the CUDA device ordinal to use (default: cupy's current
    device, which Ray sets through CUDA_VISIBLE_DEVICES for an actor with a GPU fraction). timing: time every
    kernel launch of the frame loop with CUDA events (`kernel_log.kernel_ms`; for profiles, it adds two events a
    launch). cuda_graphs: capture each frame step's kernels (lane_tables.FRAME_LAUNCHES) as a CUDA graph, once per
    queue parity and wave shape, and replay it with one launch a step (`kernel_log.graph_launches`).
    """

    def __init__(self, graph: CsrGraph, options: SearchOptions = DEFAULT_OPTIONS, device: int | None = None,
                 max_lanes: int = 256, refill: bool = True, lattice_workers: int | None = None, timing: bool = False,
                 cuda_graphs: bool = False, **capacities: int) -> None:
        cp = _cupy()
        if device is not None:
            cp.cuda.Device(device).use()
        super().__init__(graph, partial(CudaLaneKernels, timing=timing, graphs=cuda_graphs), options,
                         max_lanes=max_lanes, refill=refill, lattice_workers=lattice_workers, **capacities)
