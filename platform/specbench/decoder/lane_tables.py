"""The host-side data of the lane algorithm (`lanes.py`): the graph tables (`LaneGraph`), the search settings
and queue capacities (`LaneSettings`), a wave's utterances (`LaneBatch`) and what the kernels hand back
(`LaneOutput`, lattice records of `RECORD_DTYPE`), the interface each backend's kernels implement
(`LaneKernels`, with `Refill`) and the log of what the frame loop asked of the device (`KernelLog`).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace

import numpy as np

from specbench.decoder.epsilon import ClosedArcs, EpsilonMoves, close_emitting_arcs, epsilon_closure, why_no_closure
from specbench.decoder.options import SearchOptions, require_options
from specbench.decoder.pruning import PruningConfig
from specbench.decoder.traceback import word_end_states
from specbench.wfst.graph import CsrGraph

STAT_NAMES = ("frames", "tokens_created", "tokens_pruned", "max_active_binds", "min_active_binds",
              "beam_narrowings", "epsilon_iterations", "queue_overflows")
STAT = {name: i for i, name in enumerate(STAT_NAMES)}
# Hash-table slots per lane that the benchmarks use (`LaneSettings.table_slots`): on the SLURP TLG at beam
# 15 a lane's frame reached at most 6,280 distinct states over 300 held-out-voice test utterances
HASH_TABLE_SLOTS = 1 << 15
# Frame steps between two status points of a wave: the host reads the device (the fill of the arena and the
# lattice records, and what is taken), plans the refills of the next steps and uploads them; nothing else
# in the frame loop waits for the device
STATUS_EVERY = 16
# the fewest utterances a lattice job takes (a take's utterances are shared among the lattice workers in
# jobs of at least this many)
LATTICE_JOB_MIN = 8
# a lattice record's four fields (lane, frame step, src state, code), as the kernels write them and the host
# reads them: 16 bytes a record (the codes are arc indices, which LaneDecoder checks fit)
RECORD_DTYPE = np.int32
# the fewest lattice records a grouping job takes (a take's records are grouped in chunks on the workers)
GROUP_CHUNK_MIN = 1 << 18
# The kernels the GPU backend launches at every frame step, at a step where lanes end or take a partial
# (each), and for the epsilon lattice links of a step (the twin counts the same in its `KernelLog`)
FRAME_LAUNCHES = ("frame_begin", "lane_reduce", "lane_select", "token_degree", "scan_partials", "scan_apply",
                  "expand_min", "expand_recombine", "resolve_cost", "resolve_index", "mark", "scan_partials",
                  "emit_winners")
BEST_LAUNCHES = ("best_cost", "best_state", "best_pick")
LINK_LAUNCHES = ("dense_tok_set", "eps_link_count", "scan_partials", "eps_link_write", "dense_tok_set")


@dataclass(frozen=True)
class LaneGraph:
    """Host tables of one graph for the lane algorithm (uploaded once per decoder).

    offsets (S + 1,) int64, degree (S,) int32: closed arcs per state (CSR). dest (E,) int32, weight (E,)
    float64 (arc weight + closure-move cost), column (E,) int32 score column, code (E,) int64 (the CPU
    decoder's backpointer code), bare_arc (E,) int64 (the emitting arc of an entry without a closure move,
    else -1: the emitting lattice links). final (S,) float64. init_dest, init_cost, init_move: the closure
    moves out of the start state (its tokens at frame 0). eps_offsets (S + 1,) int64, eps_degree (S,) int32,
    eps_dest (M,) int32, eps_weight (M,) float64: the epsilon arcs (the epsilon lattice links). word_end (S,)
    bool: the states between words (`traceback.word_end_states`; host only, for partial hypotheses).
    """

    graph: CsrGraph
    moves: EpsilonMoves
    closed: ClosedArcs
    offsets: np.ndarray
    degree: np.ndarray
    dest: np.ndarray
    weight: np.ndarray
    column: np.ndarray
    code: np.ndarray
    bare_arc: np.ndarray
    final: np.ndarray
    init_dest: np.ndarray
    init_cost: np.ndarray
    init_move: np.ndarray
    eps_offsets: np.ndarray
    eps_degree: np.ndarray
    eps_dest: np.ndarray
    eps_weight: np.ndarray
    word_end: np.ndarray

    @property
    def num_states(self) -> int:
        return self.graph.num_states

    @classmethod
    def build(cls, graph: CsrGraph) -> LaneGraph:
        if not isinstance(graph, CsrGraph):
            raise ValueError(f"the lane decoder needs a CsrGraph, got {type(graph).__name__}")
        if graph.start < 0:
            raise ValueError("the lane decoder's graph has no start state (an empty FST)")
        moves = epsilon_closure(graph.epsilon)
        if moves is None:
            raise ValueError("the lane (GPU) decoder needs the epsilon closure, which this graph does not allow "
                             f"({why_no_closure(graph.epsilon)}); use the CPU backend")
        closed = close_emitting_arcs(graph.emitting, moves)
        if closed.dest.shape[0] >= 2**32 - 1:
            raise ValueError(f"{closed.dest.shape[0]} closed arcs do not fit the 32-bit index of the packed keys")
        lo, hi = int(moves.offsets[graph.start]), int(moves.offsets[graph.start + 1])
        base = moves.num_moves + 1
        eps = graph.epsilon
        return cls(
            graph=graph, moves=moves, closed=closed, offsets=closed.offsets,
            degree=closed.degree.astype(np.int32), dest=closed.dest.astype(np.int32), weight=closed.weight,
            column=closed.column.astype(np.int32), code=closed.code,
            bare_arc=np.where(closed.code % base == 0, closed.code // base, -1),
            final=graph.final.astype(np.float64),
            init_dest=moves.dest[lo:hi].astype(np.int32), init_cost=moves.cost[lo:hi],
            init_move=np.arange(lo, hi, dtype=np.int64), eps_offsets=eps.offsets,
            eps_degree=eps.out_degree.astype(np.int32), eps_dest=eps.dest, eps_weight=eps.weight.astype(np.float64),
            word_end=word_end_states(graph),
        )


@dataclass(frozen=True)
class LaneSettings:
    """The search options (`options.SearchOptions`) and the queue capacities of one lane decoder.

    token_capacity: tokens per frame over all lanes; arc_capacity: candidate arcs per frame over all lanes;
    arena_capacity: backpointers per wave; lattice_capacity: lattice records per wave (ints in [1, 2^31);
    `LaneDecoder` raises the latter to 2^17 a lane where it has more than 512 lanes).
    table_slots: the recombination table of each lane: 0, one entry per graph state (dense: per-lane memory
    grows with the graph); else a hash table of that many slots (a power of two, 16 to 2^30), open
    addressing by state (on the GPU also the lattices' token-cost table; the twin keeps that one dense):
    per-lane memory grows with the distinct states a frame reaches, and a frame that
    reaches more in a lane overflows it (counted in `queue_overflows`, the lane retried alone).
    arena_window: the backpointers the device holds (a ring buffer, at most the capacity; by default 2^24
    entries, 256 MiB, or 2^16 a lane where `LaneDecoder` has more than 256 lanes, up to 2^30):
    every entry of the utterances in the lanes, from their first frame until their best paths are traced at
    the status point after they end, must fit (about lanes x tokens per lane and frame x the longest
    utterance's frames: on the 1,000 SLURP test utterances at beam 15, 256 lanes made 42,000 entries a frame
    step, 171 a lane, and the longest utterance has 201 frames), or the lanes that make more overflow
    (counted, retried as above; an utterance that fills the ring alone is decoded again alone with the ring
    doubled, up to `arena_capacity`). lattice_window: the lattice records the
    device holds until the host takes them at a status point (a ring buffer of 16-byte records, 512 MiB by
    default): what is made in about two status periods (33 frame steps) must fit (overflows likewise).
    """

    options: SearchOptions
    token_capacity: int = 1 << 21
    arc_capacity: int = 1 << 24
    arena_capacity: int = (1 << 31) - 1
    lattice_capacity: int = 1 << 26
    table_slots: int = 0
    arena_window: int = 1 << 24
    lattice_window: int = 1 << 25

    def __post_init__(self) -> None:
        require_options("LaneSettings", self.options)
        for name in ("token_capacity", "arc_capacity", "arena_capacity", "lattice_capacity", "arena_window",
                     "lattice_window"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1 or value >= 2**31:
                raise ValueError(f"{name} must be an int in [1, 2^31), got {value!r}")
        slots = self.table_slots
        if not isinstance(slots, int) or (slots and (slots < 16 or slots > 2**30 or slots & (slots - 1))):
            raise ValueError(f"table_slots must be 0 (dense) or a power of two from 16 to 2^30, got {slots!r}")

    def arena_room(self, size: int, taken: int) -> int:
        """Arena entries that may still be made, `size` made in the wave and the first `taken` of them freed
        (no utterance in a lane needs them: `set_taken`)."""
        ring = min(self.arena_window, self.arena_capacity)
        return max(0, min(self.arena_capacity - size, ring - (size - taken)))

    def lattice_room(self, size: int, taken: int) -> int:
        """Lattice records that may still be made (as `arena_room`)."""
        ring = min(self.lattice_window, self.lattice_capacity)
        return max(0, min(self.lattice_capacity - size, ring - (size - taken)))

    def table_size(self, num_states: int) -> int:
        """Entries of one lane's recombination table."""
        return self.table_slots or num_states

    @property
    def pruning(self) -> PruningConfig:
        return self.options.pruning

    @property
    def acoustic_scale(self) -> float:
        return float(self.options.acoustic_scale)

    @property
    def lattice_beam(self) -> float | None:
        return self.options.lattice_beam

    @property
    def link_beam(self) -> float | None:
        return self.options.link_beam


@dataclass
class LaneBatch:
    """The utterances one run of the frame loop decodes (a wave: more utterances than lanes when lanes are
    refilled), and which of their frames get partial hypotheses."""

    utt_ids: list[str]
    lengths: np.ndarray  # (U,) int32, all > 0
    costs: np.ndarray  # (R, P) float32 acoustic cost rows: utterance u's at first_row[u] ... + lengths[u]
    first_row: np.ndarray  # (U,) int64
    partial_frames: tuple[int, ...]  # sorted frame indices f of an utterance: a partial after its frames 0..f

    @classmethod
    def of(cls, utt_ids: list[str], costs: Sequence[np.ndarray], partial_frames: tuple[int, ...]) -> LaneBatch:
        """From each utterance's (T, P) costs (P may differ: narrower ones are zero-padded)."""
        lengths = np.array([c.shape[0] for c in costs], dtype=np.int32)
        width = max(c.shape[1] for c in costs)
        first_row = np.concatenate([[0], np.cumsum(lengths[:-1], dtype=np.int64)]).astype(np.int64)
        rows = np.zeros((int(lengths.sum()), width), dtype=np.float32)
        for begin, mat in zip(first_row.tolist(), costs, strict=True):
            rows[begin:begin + mat.shape[0], :mat.shape[1]] = mat
        return cls(list(utt_ids), lengths, rows, first_row, partial_frames)

    @property
    def partial_every(self) -> int:
        """Frames between partial hypotheses (0: none)."""
        return self.partial_frames[0] + 1 if self.partial_frames else 0

    def utterance_costs(self, u: int) -> np.ndarray:
        """(T_u, P) acoustic costs of utterance u."""
        begin = int(self.first_row[u])
        return self.costs[begin:begin + int(self.lengths[u])]


@dataclass
class LaneOutput:
    """What a backend's kernels hand over (host numpy arrays): best paths traced on the device, lattice records
    made since the last take (still by lane and frame step: `records_by_utterance` maps them to utterances),
    and per utterance (of the wave, or those taken) its outputs."""

    paths: np.ndarray  # (N,) int64 arena codes of traced paths, in path order (a span of the wave's `path_layout`)
    path_end: np.ndarray  # (U, 1 + len(partial_frames)) int64: where each path ends in `paths` (final, partials)
    path_len: np.ndarray  # (U, 1 + len(partial_frames)) int64: its length (0: no path; -1: longer than its room)
    final_id: np.ndarray  # (U,) int64 arena entry of the best final token, -1 when none
    final_state: np.ndarray  # (U,) int64
    partial_id: np.ndarray  # (U, len(partial_frames)) int64, -1 when none
    partial_state: np.ndarray  # (U, len(partial_frames)) int64
    stats: np.ndarray  # (U, 8) int64, STAT_NAMES order, as counted by the kernels
    lattice: np.ndarray | None  # (K, 4) RECORD_DTYPE records (lane, frame step, src state, code: see lattice_paths)

    def rows(self, at: np.ndarray) -> LaneOutput:
        """The same output with only the utterance rows `at` (in that order)."""
        return replace(self, path_end=self.path_end[at], path_len=self.path_len[at], final_id=self.final_id[at],
                       final_state=self.final_state[at], partial_id=self.partial_id[at],
                       partial_state=self.partial_state[at], stats=self.stats[at])

    def path(self, row: int, which: int) -> list[int]:
        """Row `row`'s traced path `which` (0: to the best final token; k: to partial slot k - 1's)."""
        end, length = int(self.path_end[row, which]), int(self.path_len[row, which])
        if length < 0:
            raise RuntimeError("a traced best path is longer than its room in the path buffer (one entry per "
                               "frame and at most one frame-0 epsilon move): the arena was overwritten; please "
                               "report this with the graph and the utterance")
        return self.paths[end - length:end].tolist()


def path_layout(lengths: np.ndarray, partial_frames: tuple[int, ...]) -> np.ndarray:
    """Where each utterance of a wave keeps its traced best paths in the device's path buffer: (U + 1,) offsets
    of its room, which holds its final path, then one path per partial frame within its length, each in
    `length + 1` entries (a path has one arena entry per frame and at most one frame-0 epsilon move)."""
    lengths = np.asarray(lengths, dtype=np.int64)
    partials = np.searchsorted(np.asarray(partial_frames, dtype=np.int64), lengths, side="left")
    return np.concatenate([[0], np.cumsum((1 + partials) * (lengths + 1))]).astype(np.int64)


def path_ends(base: np.ndarray, lengths: np.ndarray, utts: np.ndarray, slots: int, region_from: int) -> np.ndarray:
    """(len(utts), 1 + slots) ends of the utterances' paths (final, then each partial slot), counted from
    entry `region_from` of the path buffer (see `path_layout`; a path is written right-aligned in its room)."""
    width = lengths[utts].astype(np.int64) + 1
    return base[utts][:, None] + np.arange(1, slots + 2)[None, :] * width[:, None] - region_from


@dataclass
class KernelLog:
    """What the frame loop asked of the device: kernels run by name (ours and cupy's concatenations; the twin
    counts those its numpy steps stand for), host reads of device memory (synchronizations) by what they
    read, asynchronous uploads, CUDA graph launches (each runs a frame step's kernels, counted by name too),
    candidate arcs, the bytes the host reads (`read_bytes`), the backpointers made (`arena_entries`, which
    stay on the device), and when the GPU times them, milliseconds per kernel. A wave's upload and its
    final download are not counted."""

    launches: Counter = field(default_factory=Counter)
    syncs: Counter = field(default_factory=Counter)
    uploads: Counter = field(default_factory=Counter)
    graph_launches: int = 0
    arcs: int = 0
    read_bytes: int = 0
    arena_entries: int = 0
    kernel_ms: Counter = field(default_factory=Counter)
    host_seconds: Counter = field(default_factory=Counter)
    thread_cpu_seconds: Counter = field(default_factory=Counter)
    _thread_lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    @contextmanager
    def host_stage(self, name: str) -> Iterator[None]:
        """Wall seconds of the host in a stage of the loop (`host_seconds`: enqueueing the frames, the status
        reads, which wait for the device, assembling results, planning refills)."""
        begin = time.perf_counter()
        try:
            yield
        finally:
            self.host_seconds[name] += time.perf_counter() - begin

    @contextmanager
    def thread_stage(self, name: str) -> Iterator[None]:
        """CPU seconds of a lattice thread's work (`thread_cpu_seconds`: grouping records, pruning lattices),
        summed over the threads; it overlaps the frame loop. CPU time, not wall time: on a busy machine
        the threads wait for cores, which is not their cost."""
        begin = time.thread_time()
        try:
            yield
        finally:
            with self._thread_lock:
                self.thread_cpu_seconds[name] += time.thread_time() - begin

    def launch(self, name: str, times: int = 1) -> None:
        self.launches[name] += times

    def sync(self, what: str, nbytes: int = 0) -> None:
        self.syncs[what] += 1
        self.read_bytes += nbytes

    def upload(self, what: str) -> None:
        """An asynchronous upload (from pinned host memory: the host does not wait)."""
        self.uploads[what] += 1

    def report(self, frame_steps: int, seconds: float | None = None) -> dict:
        """Per frame step of the loop: launches and synchronizations (totals by name beside them), candidate
        arcs, and with `seconds` the arcs expanded per second; kernel milliseconds where they were timed."""
        steps = max(frame_steps, 1)
        out = {"frame_steps": frame_steps, "launches_per_frame": sum(self.launches.values()) / steps,
               "syncs_per_frame": sum(self.syncs.values()) / steps, "arcs": self.arcs,
               "launches": dict(sorted(self.launches.items())), "syncs": dict(sorted(self.syncs.items())),
               "uploads": dict(sorted(self.uploads.items())), "graph_launches": self.graph_launches,
               "read_bytes_per_frame": self.read_bytes / steps, "arena_entries": self.arena_entries}
        if seconds:
            out["arcs_per_second"] = self.arcs / seconds
        if self.kernel_ms:
            out["kernel_ms"] = dict(sorted(self.kernel_ms.items(), key=lambda kv: -kv[1]))
        out["host_seconds"] = dict(sorted(self.host_seconds.items(), key=lambda kv: -kv[1]))
        if self.thread_cpu_seconds:
            out["lattice_thread_cpu_seconds"] = dict(sorted(self.thread_cpu_seconds.items(), key=lambda kv: -kv[1]))
        return out


@dataclass(frozen=True)
class Refill:
    """Lanes released and placed before frame step `step`: the counts of `out_lanes` move to their
    utterances `out_utts`; utterances `in_utts` start on `in_lanes` (their frame-0 tokens join the queue)."""

    step: int
    out_lanes: np.ndarray
    out_utts: np.ndarray
    in_lanes: np.ndarray
    in_utts: np.ndarray


class LaneKernels:
    """The kernels of the lane algorithm; `twin.NumpyLaneKernels` and `gpu.CudaLaneKernels` implement them.

    `start(batch, num_lanes)` uploads a wave's costs and sets up `num_lanes` empty lanes. `plan(refills)`
    hands over the refills (`Refill`) of the next frame steps, planned at a status point: the GPU uploads them
    at once, without waiting. Between frame steps, `refill(step)` carries out the planned refill of `step`
    (if any); then `links(step)` records the epsilon lattice links of the tokens that step starts from (with
    lattices). `frame(f, finals, partials)` runs frame step f over every lane whose utterance is running; with
    `finals`, the lanes whose utterance ends at f put their best final token in the utterance's output slot
    (`LaneOutput.final_id`), with `partials` the lanes whose utterance takes a partial after f their best token
    in its slot (`partial_id`, every `batch.partial_every` frames): the kernels find those lanes from their
    placement. The counts of the frame loop (tokens, candidate arcs, arena entries, lattice records) stay on
    the device; the host learns them at status points. `status(take, trace)`: the best paths of `trace` (the
    utterances released since the last status point) are traced on the device through the arena (into each
    one's room of the path buffer, `path_layout`), the arena entries that no utterance in a lane still needs
    are freed (`set_taken`), and one download gives the arena's and the lattice records' fill (`known_arena`,
    `known_lattice`), the lattice records made up to the previous status point, and the rows of `take`
    (traced at the previous status point: their paths and outputs, `LaneOutput`, in that order).
    `finish(lanes, utts, untaken)` releases the lanes that still hold utterances (`utts`), traces every path
    not yet traced, and returns the rest: the lattice records made since the last take, every utterance's
    rows, and the paths of `untaken`. `log` counts what the frames asked of the device (`KernelLog`).
    """

    log: KernelLog
    known_arena: int
    known_lattice: int

    def start(self, batch: LaneBatch, num_lanes: int) -> None:
        raise NotImplementedError

    def plan(self, refills: list[Refill]) -> None:
        raise NotImplementedError

    def refill(self, step: int) -> None:
        raise NotImplementedError

    def links(self, step: int) -> None:
        raise NotImplementedError

    def frame(self, f: int, finals: bool, partials: bool) -> None:
        raise NotImplementedError

    def status(self, take: np.ndarray, trace: np.ndarray) -> LaneOutput:
        raise NotImplementedError

    def finish(self, lanes: np.ndarray, utts: np.ndarray, untaken: np.ndarray) -> LaneOutput:
        raise NotImplementedError


def admitted_tokens(lg: LaneGraph, lanes: np.ndarray, arena_base: int) -> tuple[np.ndarray, ...]:
    """The frame-0 tokens of utterances placed on `lanes` (the start state and its closure moves, per lane),
    numbered from arena entry `arena_base`: (lane int32, state int32, cost float64, arena id, arena prev,
    arena code) arrays; a closure move's backpointer is its lane's start-state entry."""
    per_lane = 1 + lg.init_dest.shape[0]
    count = lanes.shape[0]
    ids = arena_base + np.arange(count * per_lane, dtype=np.int64)
    prev = np.full((count, per_lane), -1, dtype=np.int64)
    prev[:, 1:] = ids[::per_lane, None]
    return (np.repeat(lanes.astype(np.int32), per_lane),
            np.tile(np.concatenate([[lg.graph.start], lg.init_dest]).astype(np.int32), count),
            np.tile(np.concatenate([[0.0], lg.init_cost]), count), ids, prev.ravel(),
            np.tile(np.concatenate([[0], -1 - lg.init_move]).astype(np.int64), count))


def partial_frame_indices(num_frames: int, every: int | None) -> tuple[int, ...]:
    """Frames f (0-based) after which a partial hypothesis is taken: every `every` frames, f = k*every - 1."""
    if not every:
        return ()
    if every < 1:
        raise ValueError(f"partial interval must be >= 1 frame, got {every}")
    return tuple(range(every - 1, num_frames, every))

