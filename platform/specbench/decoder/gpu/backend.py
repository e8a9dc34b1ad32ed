"""The GPU backend: the lane decoder (lanes.py) on CUDA kernels (kernels/lanes.cu) through cupy.

`GpuDecoder` decodes many utterances together (lanes), frame by frame, with the kernels of `lanes.cu`;
`twin.NumpyLaneKernels` is the same algorithm in numpy, tested against the CPU backend in CI. Per frame
step the host waits twice for the device: for the number of candidate arcs (to size the expansion) and
for the number of winners (the next token count); three times with lattices (the epsilon links). Besides,
it uploads the indices of the lanes refilled at a step (one upload) and takes the outputs made so far
every 32 utterances that end (`take_outputs`, one download). The lanes that end or take a partial
hypothesis at a step are found on the device from their placement, with no upload. Every launch and every
host read of the frame loop goes through `_on_device` and `_read`, which count them in `KernelLog` (the
twin counts the same; `tests/gpu` runs the loop with every other synchronization forbidden, where cupy
still has `cupyx.allow_synchronize`); `GpuDecoder(timing=True)` also times every launch with CUDA events.

cupy is imported lazily, only here: `gpu_available()` says whether a CUDA device is usable, and building a
`GpuDecoder` without one raises `GpuUnavailableError` with the reason. Several processes (or Ray actors
with fractional `num_gpus`) may each hold a GpuDecoder on one GPU, each with its own CUDA context.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

import numpy as np

from specbench.decoder.lanes import (
    STAT,
    KernelLog,
    LaneBatch,
    LaneDecoder,
    LaneGraph,
    LaneKernels,
    LaneOutput,
    LaneSettings,
    admitted_tokens,
)
from specbench.decoder.options import DEFAULT_OPTIONS, SearchOptions
from specbench.errors import SpecbenchError
from specbench.wfst.graph import CsrGraph

KERNEL_SOURCE = Path(__file__).with_name("kernels") / "lanes.cu"
BLOCK = 256
SELECT_BLOCK = 256  # threads of radix_select's block per lane
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


def _host_may_wait():
    """`cupyx.allow_synchronize(True)` where this cupy still has it (deprecated since CuPy 10), else nothing:
    the counted reads, and a batch's upload and download, may synchronize when the GPU tests forbid every
    other synchronization of the frame loop."""
    import contextlib

    import cupyx

    allow = getattr(cupyx, "allow_synchronize", None)
    return allow(True) if allow is not None else contextlib.nullcontext()


def peak_memory_bytes() -> int:
    """The most device memory cupy's pool held while GpuDecoders of this process decoded."""
    return _PEAK["bytes"]


class CudaLaneKernels(LaneKernels):
    """The lane algorithm's kernels on the GPU (mirrors twin.NumpyLaneKernels method by method)."""

    def __init__(self, lg: LaneGraph, settings: LaneSettings, timing: bool = False) -> None:
        cp = self.cp = _cupy()
        self.lg, self.s = lg, settings
        self.log, self.timing, self._events = KernelLog(), timing, []
        self.module = cp.RawModule(code=KERNEL_SOURCE.read_text(encoding="utf-8"), options=("--std=c++14",))
        self.fn = {}
        g = {}
        for name, array, dtype in (("offsets", lg.offsets, np.int64), ("degree", lg.degree, np.int32),
                                   ("dest", lg.dest, np.int32), ("weight", lg.weight, np.float64),
                                   ("column", lg.column, np.int32), ("code", lg.code, np.int64),
                                   ("bare_arc", lg.bare_arc, np.int64), ("final", lg.final, np.float64),
                                   ("eps_offsets", lg.eps_offsets, np.int64), ("eps_dest", lg.eps_dest, np.int32),
                                   ("eps_weight", lg.eps_weight, np.float64)):
            g[name] = cp.asarray(np.ascontiguousarray(array, dtype=dtype))
        self.g = g
        cfg = settings.pruning
        self.max_active, self.min_active = np.int64(cfg.max_active), np.int64(cfg.min_active)
        self.beam32, self.beam_delta = np.float64(cfg.beam32), np.float64(cfg.beam_delta)
        self._clean_tables = 0  # the lanes of the recombination tables kept from the last wave (0: none)

    def _launch(self, name: str, count: int, *args, block: int = BLOCK) -> None:
        """Kernel `name` over `count` threads in blocks of `block`."""
        if count <= 0:
            return
        fn = self.fn.get(name)
        if fn is None:
            fn = self.fn[name] = self.module.get_function(name)
        self._on_device(name, lambda: fn(((int(count) + block - 1) // block,), (block,), args))

    def _on_device(self, name: str, call):
        """`call()`: one kernel launch (ours, or a cupy scan, stack or fill), counted in `log` under `name`;
        with `timing`, between two CUDA events that `_collect_times` reads."""
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
        self.log.sync(what)
        with _host_may_wait():
            return array.get()

    def _collect_times(self) -> None:
        """Milliseconds per kernel name from the recorded CUDA events (after the last one completes)."""
        if self._events:
            self._events[-1][2].synchronize()
            for name, start, end in self._events:
                self.log.kernel_ms[name] += self.cp.cuda.get_elapsed_time(start, end)
            self._events.clear()

    def start(self, batch: LaneBatch, num_lanes: int) -> None:
        with _host_may_wait():  # the wave's upload, outside the frame loop
            self._start(batch, num_lanes)

    def _start(self, batch: LaneBatch, num_lanes: int) -> None:
        cp, lg, lanes, count = self.cp, self.lg, num_lanes, len(batch.utt_ids)
        self.batch, self.num_lanes = batch, lanes
        self.P = int(batch.costs.shape[1])
        self.costs = cp.asarray(np.ascontiguousarray(batch.costs))
        self.lane_end, self.lane_start = cp.zeros(lanes, dtype=cp.int32), cp.zeros(lanes, dtype=cp.int32)
        self.lane_row, self.lane_utt = cp.zeros(lanes, dtype=cp.int64), cp.full(lanes, -1, dtype=cp.int64)
        table = lanes * self.s.table_size(lg.num_states)
        if self._clean_tables != lanes:  # a wave leaves every entry it touched reset
            self.dense_key = cp.full(table, np.uint64(2**64 - 1), dtype=cp.uint64)
            self.dense_cost = cp.full(table, np.uint64(2**64 - 1), dtype=cp.uint64)
            self.dense_entry = cp.full(table, np.uint32(2**32 - 1), dtype=cp.uint32)
            self.hash_state = cp.full(table if self.s.table_slots else 1, -1, dtype=cp.int32)
            if self.s.lattice_beam is not None:
                self.dense_tok = cp.full(table, np.inf, cp.float64)
                self.tok_hash = cp.full(table if self.s.table_slots else 1, -1, dtype=cp.int32)
        self._clean_tables = 0  # until the wave finishes
        self.best, self.worst = cp.empty(lanes, cp.uint64), cp.empty(lanes, cp.uint64)
        self.count, self.min_new = cp.empty(lanes, cp.uint64), cp.empty(lanes, cp.uint64)
        self.first = cp.empty(lanes, cp.uint64)
        self.need, self.prefix = cp.zeros(2 * lanes, cp.uint32), cp.zeros(2 * lanes, cp.uint32)
        self.remaining = cp.zeros(2 * lanes, cp.int64)
        self.cutoff, self.adaptive = cp.empty(lanes, cp.float64), cp.empty(lanes, cp.float64)
        self.stats = cp.zeros(lanes * len(STAT), cp.uint64)
        self.utt_stats = cp.zeros(count * len(STAT), cp.uint64)
        slots = self.slots = max(len(batch.partial_frames), 1)
        self.final_id = cp.full(count, -1, cp.int64)
        self.final_state = cp.full(count, -1, cp.int64)
        self.partial_id = cp.full(count * slots, -1, cp.int64)
        self.partial_state = cp.full(count * slots, -1, cp.int64)
        self.init_cost = cp.asarray(np.concatenate([[0.0], lg.init_cost]))
        self.n_tok = 0
        self.tok_lane, self.tok_state = cp.zeros(0, cp.int32), cp.zeros(0, cp.int32)
        self.tok_cost, self.tok_id = cp.zeros(0, cp.float64), cp.zeros(0, cp.int64)
        self.arena_prev, self.arena_code = [], []
        self.arena_size = 0
        self.records: list | None = [] if self.s.lattice_beam is not None else None
        self.lattice_size = 0

    def refill(self, step: int, out_lanes: np.ndarray, out_utts: np.ndarray, in_lanes: np.ndarray,
               in_utts: np.ndarray) -> None:
        """Lanes released and placed (twin.NumpyLaneKernels.refill): every index in one upload, then one launch
        of `refill_lanes` (counts moved, placements set, the queue copied with the frame-0 tokens after it)."""
        cp, i32 = self.cp, np.int32
        lane, state, _, ids, prev, code = admitted_tokens(self.lg, in_lanes, self.arena_size)
        ends = step + self.batch.lengths[in_utts].astype(np.int64)
        rows = self.batch.first_row[in_utts] - step
        parts = (out_lanes, out_utts, in_lanes, in_utts, ends, rows, lane, state, ids, prev, code)
        sizes = np.cumsum([0] + [x.shape[0] for x in parts])
        if step:  # at step 0, part of the wave's upload
            self.log.sync("lane refill upload")
        with _host_may_wait():
            packed = cp.asarray(np.concatenate([np.asarray(x, dtype=np.int64) for x in parts]))
        o_lanes, o_utts, i_lanes, i_utts, i_ends, i_rows, t_lane, t_state, t_id, a_prev, a_code = (
            packed[sizes[i]:sizes[i + 1]] for i in range(len(parts)))
        new = int(ids.shape[0])
        old = self.n_tok if new else 0  # the queue is rebuilt only where tokens join it
        size = old + new
        queue = ((cp.empty(size, cp.int32), cp.empty(size, cp.int32), cp.empty(size, cp.float64),
                  cp.empty(size, cp.int64)) if new else (self.tok_lane, self.tok_state, self.tok_cost, self.tok_id))
        threads = max(out_lanes.shape[0], in_lanes.shape[0], old + new)
        self._launch("refill_lanes", threads, i32(out_lanes.shape[0]), o_lanes, o_utts, self.stats, self.utt_stats,
                     i32(in_lanes.shape[0]), i_lanes, i_utts, i_ends, i_rows, i32(step), self.lane_end,
                     self.lane_start, self.lane_row, self.lane_utt, i32(old), i32(new), t_lane, t_state, t_id,
                     self.init_cost, i32(self.init_cost.shape[0]), self.tok_lane, self.tok_state, self.tok_cost,
                     self.tok_id, *queue)
        if new:
            self.tok_lane, self.tok_state, self.tok_cost, self.tok_id = queue
            self.arena_prev.append(a_prev)
            self.arena_code.append(a_code)
            self.arena_size += new
            self.n_tok = old + new

    def links(self, step: int) -> None:
        if self.records is not None:
            self._epsilon_links(step)

    def frame(self, f: int, finals: bool, partials: bool) -> None:
        cp, lanes, n = self.cp, self.num_lanes, self.n_tok
        i32, i64 = np.int32, np.int64
        if n:
            self._launch("lane_reset", lanes, i32(lanes), self.best, self.worst, self.count, self.min_new,
                         self.first)
            self._launch("lane_reduce", n, i32(n), i32(f), self.tok_lane, self.tok_cost, self.lane_end, self.best,
                         self.worst, self.count, self.first)
            self._launch("select_setup", lanes, i32(lanes), self.max_active, self.min_active, self.beam32,
                         self.best, self.worst, self.count, self.need, self.remaining, self.prefix)
            self._launch("radix_select", lanes * SELECT_BLOCK, i32(lanes), self.first, self.count, self.tok_cost,
                         self.need, self.remaining, self.prefix, block=SELECT_BLOCK)
            self._launch("lane_cutoff", lanes, i32(lanes), self.max_active, self.min_active, self.beam32,
                         self.beam_delta, self.best, self.worst, self.count, self.need, self.prefix, self.cutoff,
                         self.adaptive, self.stats)
            deg = cp.empty(n, cp.int64)
            self._launch("token_degree", n, i32(n), i32(f), self.tok_lane, self.tok_state, self.tok_cost,
                         self.lane_end, self.cutoff, self.g["degree"], deg, self.stats)
            cum = self._on_device("cumsum", lambda: cp.cumsum(deg))
            total = int(self._read(cum[-1:], "candidate arcs")[0])
            slots = min(total, self.s.arc_capacity)
            self.log.arcs += slots
            if total > slots:
                self._launch("count_lost", n, i32(n), i64(slots), self.tok_lane, deg, cum, self.stats)
            self._expand(f, n, slots, deg, cum)
        if finals:
            self._lane_best(f, True, self.final_id, self.final_state)
        if partials:
            self._lane_best(f, False, self.partial_id, self.partial_state)

    def _expand(self, f: int, n: int, slots: int, deg, cum) -> None:
        cp, g, s = self.cp, self.g, self.s
        i32, i64 = np.int32, np.int64
        if slots == 0:
            self.n_tok = 0
            return
        c_tok, c_entry, c_cost = cp.empty(slots, cp.int32), cp.empty(slots, cp.uint32), cp.empty(slots, cp.float64)
        self._launch("expand_min", slots, i64(slots), i32(n), i32(f), self.lane_row, i32(self.P), self.tok_lane,
                     self.tok_state, self.tok_cost, deg, cum, g["offsets"], g["weight"], g["column"], self.costs,
                     self.min_new, c_tok, c_entry, c_cost)
        c_index, c_key, c_keep = cp.empty(slots, cp.int64), cp.empty(slots, cp.uint64), cp.empty(slots, cp.uint8)
        self._launch("expand_recombine", slots, i64(slots), i32(self.lg.num_states), self.tok_lane, c_tok, c_entry,
                     c_cost, self.min_new, self.adaptive, g["dest"], self.dense_key, c_index, c_key, c_keep,
                     self.stats, i32(self.s.table_slots), self.hash_state)
        self._launch("resolve_cost", slots, i64(slots), c_keep, c_key, c_index, c_cost, self.dense_key,
                     self.dense_cost)
        self._launch("resolve_index", slots, i64(slots), c_keep, c_key, c_index, c_cost, c_entry, self.dense_key,
                     self.dense_cost, self.dense_entry)
        win, lat = cp.empty(slots, cp.int64), cp.empty(slots, cp.int64)
        with_lattice = s.lattice_beam is not None
        self._launch("mark", slots, i64(slots), i32(with_lattice), np.float64(s.lattice_beam or 0.0), c_keep,
                     c_key, c_index, c_cost, c_entry, g["bare_arc"], self.dense_key, self.dense_cost, self.dense_entry,
                     win, lat)
        cum_win = self._on_device("cumsum", lambda: cp.cumsum(win))
        cum_lat = self._on_device("cumsum", lambda: cp.cumsum(lat))
        both = self._on_device("stack", lambda: cp.stack([cum_win[-1], cum_lat[-1]]))
        winners, near = (int(v) for v in self._read(both, "winners and lattice links"))
        room = max(0, min(s.token_capacity, s.arena_capacity - self.arena_size))
        emitted = min(winners, room)
        lattice_room = max(0, s.lattice_capacity - self.lattice_size)
        recorded = min(near, lattice_room)
        out_lane, out_state = cp.empty(emitted, cp.int32), cp.empty(emitted, cp.int32)
        out_cost, out_id = cp.empty(emitted, cp.float64), cp.empty(emitted, cp.int64)
        prev, code = cp.empty(emitted, cp.int64), cp.empty(emitted, cp.int64)
        records = cp.empty(4 * recorded, cp.int64)
        self._launch("emit_winners", slots, i64(slots), i32(f), i64(room), i64(self.arena_size), i64(lattice_room),
                     win, cum_win, lat, cum_lat, c_tok, c_entry, c_cost, c_index, self.tok_lane, self.tok_state,
                     self.tok_id, g["dest"], g["code"], g["bare_arc"], out_lane, out_state, out_cost, out_id, prev, code,
                     records,
                     self.dense_key, self.dense_cost, self.dense_entry, self.stats, i32(self.s.table_slots),
                     self.hash_state)
        self.arena_prev.append(prev)
        self.arena_code.append(code)
        self.arena_size += emitted
        if self.records is not None and recorded:
            self.records.append(records.reshape(recorded, 4))
            self.lattice_size += recorded
        self.tok_lane, self.tok_state, self.tok_cost, self.tok_id = out_lane, out_state, out_cost, out_id
        self.n_tok = emitted
        _PEAK["bytes"] = max(_PEAK["bytes"], self.cp.get_default_memory_pool().total_bytes())

    def _epsilon_links(self, frame: int) -> None:
        """Epsilon lattice links among the current tokens (twin.NumpyLaneKernels.epsilon_links)."""
        cp, g, n, i32 = self.cp, self.g, self.n_tok, np.int32
        if n == 0:
            return
        states = self.lg.num_states
        common = (self.tok_lane, self.tok_state, self.tok_cost)
        table = (i32(self.s.table_slots), self.tok_hash)
        tok_slot = cp.empty(n, cp.int64)
        self._launch("dense_tok_set", n, i32(n), i32(states), *common, self.dense_tok, i32(0), *table, tok_slot,
                     self.stats)
        links = cp.empty(n, cp.int64)
        beam = np.float64(self.s.lattice_beam)
        self._launch("eps_link_count", n, i32(n), i32(states), beam, *common, g["eps_offsets"], g["eps_dest"],
                     g["eps_weight"], self.dense_tok, links, *table)
        cum = self._on_device("cumsum", lambda: cp.cumsum(links))
        total = int(self._read(cum[-1:], "epsilon links")[0])
        room = max(0, self.s.lattice_capacity - self.lattice_size)
        kept = min(total, room)
        records = cp.empty(4 * max(kept, 1), cp.int64)
        self._launch("eps_link_write", n, i32(n), i32(states), i32(frame), beam, np.int64(room), *common,
                     g["eps_offsets"], g["eps_dest"], g["eps_weight"], self.dense_tok, links, cum, records,
                     self.stats, *table)
        self._launch("dense_tok_set", n, i32(n), i32(states), *common, self.dense_tok, i32(1), *table, tok_slot,
                     self.stats)
        if kept:
            self.records.append(records[:4 * kept].reshape(kept, 4))
            self.lattice_size += kept

    def _lane_best(self, f: int, finals: bool, out_id, out_state) -> None:
        """Best tokens of the lanes that end (`finals`) or take a partial at step f, into their utterances'
        slots: the kernels find the lanes from their placement (`lane_target` in lanes.cu), nothing uploaded."""
        cp, n, i32 = self.cp, self.n_tok, np.int32
        if n == 0:
            return
        best = self._on_device("fill", lambda: cp.full(self.num_lanes, np.uint64(2**64 - 1), cp.uint64))
        low = self._on_device("fill", lambda: cp.full(self.num_lanes, np.uint64(2**64 - 1), cp.uint64))
        common = (i32(n), i32(f), i32(finals), i32(self.batch.partial_every), i32(self.slots), self.lane_end,
                  self.lane_start, self.lane_utt, self.tok_lane, self.tok_state, self.tok_cost, self.g["final"])
        self._launch("best_cost", n, *common, best)
        self._launch("best_state", n, *common, best, low)
        self._launch("best_pick", n, *common, best, low, self.tok_id, out_id, out_state)

    def take_outputs(self, utts: np.ndarray) -> LaneOutput:
        """What was made since the last take and the rows of utterances lo..hi - 1 (the span of `utts`: they
        were placed at most a wave of lanes apart), packed by one concatenation into one download."""
        cp = self.cp
        lo, hi = (int(utts.min()), int(utts.max()) + 1) if utts.shape[0] else (0, 0)
        slots, width = len(self.batch.partial_frames), self.slots
        rows = [self.final_id[lo:hi], self.final_state[lo:hi], self.partial_id[lo * width:hi * width],
                self.partial_state[lo * width:hi * width], self.utt_stats[lo * len(STAT):hi * len(STAT)].view(cp.int64)]
        records = [r.ravel() for r in self.records] if self.records is not None else []
        parts = [*self.arena_prev, *self.arena_code, *rows, *records]
        packed = self._on_device("concatenate", lambda: cp.concatenate(parts))
        made = sum(int(chunk.shape[0]) for chunk in self.arena_prev)
        self.arena_prev, self.arena_code = [], []
        if self.records is not None:
            self.records = []
        host = self._read(packed, "outputs download")
        bounds = np.cumsum([2 * made] + [int(r.shape[0]) for r in rows])
        _, final_id, final_state, partial_id, partial_state, stats, flat = np.split(host, bounds)
        at = utts - lo
        return LaneOutput(
            arena_prev=host[:made], arena_code=host[made:2 * made], final_id=final_id[at], final_state=final_state[at],
            partial_id=partial_id.reshape(hi - lo, width)[at, :slots],
            partial_state=partial_state.reshape(hi - lo, width)[at, :slots],
            stats=stats.reshape(hi - lo, len(STAT))[at],
            lattice=flat.reshape(-1, 4) if self.records is not None else None)

    def _made_since(self):
        """The arena entries and lattice records made since the last take (device arrays; their lists emptied,
        so that the device memory they held is freed once taken)."""
        cp = self.cp
        empty = cp.zeros(0, cp.int64)
        prev = cp.concatenate(self.arena_prev) if self.arena_prev else empty
        code = cp.concatenate(self.arena_code) if self.arena_code else empty
        records = cp.concatenate(self.records) if self.records else cp.zeros((0, 4), cp.int64)
        self.arena_prev, self.arena_code = [], []
        if self.records is not None:
            self.records = []
        return prev, code, records

    def finish(self, lanes: np.ndarray, utts: np.ndarray) -> LaneOutput:
        with _host_may_wait():  # the wave's download, outside the frame loop
            return self._finish(lanes, utts)

    def _finish(self, lanes: np.ndarray, utts: np.ndarray) -> LaneOutput:
        count = len(self.batch.utt_ids)
        self._clean_tables = self.num_lanes
        self._collect_times()
        stats = self.utt_stats.get().reshape(count, len(STAT)).astype(np.int64)
        stats[utts] = self.stats.get().reshape(self.num_lanes, len(STAT))[lanes].astype(np.int64)
        prev, code, records = self._made_since()
        slots = len(self.batch.partial_frames)
        return LaneOutput(
            arena_prev=prev.get(), arena_code=code.get(), final_id=self.final_id.get(),
            final_state=self.final_state.get(),
            partial_id=self.partial_id.get().reshape(count, -1)[:, :slots],
            partial_state=self.partial_state.get().reshape(count, -1)[:, :slots],
            stats=stats, lattice=records.get() if self.records is not None else None)


class GpuDecoder(LaneDecoder):
    """The lane decoder on the GPU: same arguments and results as `twin.TwinDecoder`.

    options: the search settings (`SearchOptions`); max_lanes, refill, lattice_workers and the queue capacities
    (`LaneSettings`): see `lanes.LaneDecoder`. device: the CUDA device ordinal to use (default: cupy's current
    device, which Ray sets through CUDA_VISIBLE_DEVICES for an actor with a GPU fraction). timing: time every
    kernel launch of the frame loop with CUDA events (`kernel_log.kernel_ms`; for profiles, it adds two events a
    launch).
    """

    def __init__(self, graph: CsrGraph, options: SearchOptions = DEFAULT_OPTIONS, device: int | None = None,
                 max_lanes: int = 256, refill: bool = True, lattice_workers: int = 2, timing: bool = False,
                 **capacities: int) -> None:
        cp = _cupy()
        if device is not None:
            cp.cuda.Device(device).use()
        super().__init__(graph, partial(CudaLaneKernels, timing=timing), options, max_lanes=max_lanes, refill=refill,
                         lattice_workers=lattice_workers, **capacities)
