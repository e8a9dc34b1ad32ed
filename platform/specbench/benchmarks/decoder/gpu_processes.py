"""The decoder benchmark's GPU harness: 1, 2, 4, 8 ... lane decoders sharing the GPU as plain processes.

Each process (spawned: its own CUDA context) builds its decoders from a "module:Class" string (the GPU
backend; the tests substitute the twin) with the benchmark's `SearchOptions` (the lattice beam per mode),
decodes a few utterances to warm up, then per mode waits at a barrier, decodes its equal (strided) shard
and reports. A configuration is timed from the barrier all its workers pass once warm until the last one
finishes (`time.perf_counter`, a system-wide monotonic clock on Linux).

With a `StreamPlan`, that first pass over the shards is the warm-up of a throughput stream: after a second
barrier each process decodes its shard again and again (as Kaldi's CUDA benchmark repeats its data set with
`--iterations`) until the processes together have decoded the plan's utterances and its seconds have
passed; the stream's frames per second are its frames over the time from that barrier to the last end, and
every repeated 1-best is compared with the first pass's. The copies of the shard go to the decoder in
batches of about 8 utterances a lane (`stream_repeats`), so that lanes are refilled across the copies and
drain only at the end of a batch, as in a stream that does not end after every pass.
"""

from __future__ import annotations

import gc
import importlib
import multiprocessing as mp
import queue as queue_mod
import threading
import time
import traceback
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from specbench.benchmarks.decoder.agreement import Outcome, Timed, decoder_lane_use, lane_use, outcome_of
from specbench.decoder.options import SearchOptions

GPU_DECODER = "specbench.decoder.gpu.backend:GpuDecoder"
GPU_WARMUP_UTTERANCES = 4
GPU_TIMEOUT_S = 3600.0
STREAM_WAVES = 8  # utterances a lane in one batch of a throughput stream (`stream_repeats`)
STREAM_BATCH_MAX = 16384  # utterances in one batch of a stream at most (the batch's scores are uploaded at once)
Mode = tuple[str, "float | None"]  # (name, lattice beam or None)


@dataclass(frozen=True)
class StreamPlan:
    """The steady state after the first pass: at least `utterances` decoded by the processes together
    (1-best modes; the lattice modes only run the time) and at least `seconds` of it; none when both are 0."""

    utterances: int = 0
    seconds: float = 0.0

    def __bool__(self) -> bool:
        return self.utterances > 0 or self.seconds > 0

    def per_process(self, processes: int, lattice: bool) -> int:
        return 0 if lattice else -(-self.utterances // processes)


NO_STREAM = StreamPlan()


def _stream(lanes: Any, items: list[tuple[str, np.ndarray]], first: list[Outcome], utterances: int,
            seconds: float, barrier: Any) -> dict[str, Any]:
    """Decode `items` again and again, after the barrier, until `utterances` and `seconds` are both reached:
    the start and end, passes, utterances and frames decoded, and the utterances whose outcome differs from
    the first pass's (`first`)."""
    repeats = stream_repeats(getattr(lanes, "max_lanes", 1), len(items))
    batch, expected = list(items) * repeats, list(first) * repeats
    frames = repeats * sum(len(m) for _, m in items)
    barrier.wait(timeout=GPU_TIMEOUT_S)
    start = time.perf_counter()
    done = {"passes": 0, "utterances": 0, "frames": 0, "repeat_mismatches": 0, "repeats_per_batch": repeats}
    while items and (done["utterances"] < utterances or time.perf_counter() - start < seconds):
        decoded = lanes.decode_batch(batch)
        done["passes"] += repeats
        done["utterances"] += len(batch)
        done["frames"] += frames
        done["repeat_mismatches"] += sum(outcome_of(r, len(m)) != o for r, (_, m), o in zip(decoded, batch, expected))
    return {"start": start, "end": time.perf_counter(), **done}


def stream_repeats(max_lanes: int, shard: int) -> int:
    """How many copies of a process's shard one batch of its stream holds: about STREAM_WAVES utterances a
    lane (at most STREAM_BATCH_MAX), so that lane refill keeps the lanes full and only the end of each batch
    drains them, as in a stream that never ends; at least one copy."""
    wanted = min(STREAM_BATCH_MAX, STREAM_WAVES * max(int(max_lanes), 1))
    return max(1, -(-wanted // max(shard, 1)))


def gpu_state() -> tuple[bool, str | None]:
    """(GPU decoding possible here, why not)."""
    try:
        from specbench.decoder.gpu import gpu_available
    except ImportError as err:
        return False, f"{type(err).__name__}: {err}"
    try:
        if gpu_available():
            return True, None
        return False, "gpu_available() is false: no CUDA device or cupy"
    except Exception as err:  # noqa: BLE001
        return False, f"{type(err).__name__}: {err}"


def _gpu_worker(rank: int, graph_path: str, items: list[tuple[str, np.ndarray]], options: SearchOptions,
                modes: list[Mode], barrier: Any, results: Any, decoder: str, plan: StreamPlan,
                processes: int, copies: int, settings: dict[str, Any]) -> None:
    """One decoder process: per mode build its decoder and warm it up, wait at the barrier, decode the shard,
    run the stream of `plan` (`_stream`), report (rank, mode, start, end, outcomes, peak GPU bytes, lane use,
    stream) and drop the decoder. The graph is `copies` disjoint copies of the file's (`wfst.graph.
    disjoint_copies`; 1: the file's); `settings` go to the decoder (e.g. `table_slots`). `decoder` names the lane
    decoder class as "module:Class" (the GPU backend; the tests use the twin); its module's
    `peak_memory_bytes()` is reported when it has one (else 0), after its `reset_peak_memory()` before each
    mode: a mode's peak holds its own decoder only, not the one of the mode before."""
    try:
        from specbench.wfst.graph import disjoint_copies, read_graph

        module_name, class_name = decoder.split(":")
        module = importlib.import_module(module_name)
        peak = getattr(module, "peak_memory_bytes", lambda: 0)
        graph = read_graph(graph_path)
        graph = disjoint_copies(graph, copies) if copies > 1 else graph
        for mode, lattice_beam in modes:
            lanes = None
            gc.collect()  # the mode before's decoder is gone before the peak starts again
            getattr(module, "reset_peak_memory", lambda: None)()
            lanes = getattr(module, class_name)(graph, replace(options, lattice_beam=lattice_beam), **settings)
            lanes.decode_batch(items[:GPU_WARMUP_UTTERANCES])
            counts = hasattr(lanes, "reset_counts")  # a lane decoder (the CPU scaling runs others)
            if counts:
                lanes.reset_counts()  # the timed call's alone
            barrier.wait(timeout=GPU_TIMEOUT_S)
            t0 = time.perf_counter()
            decoded = lanes.decode_batch(items)
            t1 = time.perf_counter()
            outcomes = [outcome_of(r, len(m)) for r, (_, m) in zip(decoded, items)]
            use = decoder_lane_use(lanes) if counts else None
            log = _host_log(lanes.kernel_log.report(lanes.frame_steps)) if counts else None
            lattice = lattice_beam is not None
            stream = (_stream(lanes, items, outcomes, plan.per_process(processes, lattice), plan.seconds, barrier)
                      if plan else None)
            results.put(("done", rank, mode, t0, t1, outcomes, int(peak()), use, stream, log))
    except threading.BrokenBarrierError:
        return  # another worker failed and reported it
    except BaseException:  # noqa: BLE001 - reported to the parent, which fails the configuration
        results.put(("error", rank, traceback.format_exc()))
        barrier.abort()


def run_gpu_processes(graph_path: Path, items: list[tuple[str, np.ndarray]], options: SearchOptions,
                      processes: int, modes: list[Mode], decoder: str = GPU_DECODER,
                      plan: StreamPlan = NO_STREAM, copies: int = 1,
                      settings: dict[str, Any] | None = None) -> dict[str, Timed]:
    """`processes` spawned decoder processes (own CUDA context each), each an equal (strided) shard of
    `items` ((utt_id, (T, P) float32)); per mode (name, lattice beam) a Timed whose outcomes are in the
    order of `items`, with the stream of `plan` in its extra's "stream" (`_stream_report`). Raises
    RuntimeError with a worker's traceback when one fails. `copies` > 1: each process decodes on that many
    disjoint copies of the graph (the same searches on a graph that many times the size); `settings`: keyword
    arguments of the decoder class (the lane decoders' `table_slots`)."""
    if any(beam is not None for _, beam in modes):
        from specbench.decoder.lattice_paths import warm_pruning

        warm_pruning()  # compiled once here, then loaded from numba's cache by every process
    ctx = mp.get_context("spawn")
    barrier, results = ctx.Barrier(processes), ctx.Queue()
    shards = [list(items[r::processes]) for r in range(processes)]
    workers = [ctx.Process(target=_gpu_worker, daemon=True, args=(
        r, str(graph_path), shards[r], options, modes, barrier, results, decoder, plan, processes, copies,
        dict(settings or {})))
        for r in range(processes)]
    for w in workers:
        w.start()
    try:
        done = _collect(results, workers, processes * len(modes), GPU_TIMEOUT_S * (2 * len(modes) + 1))
    finally:
        for w in workers:
            w.join(timeout=30)
            if w.is_alive():
                w.terminate()
                w.join(timeout=10)
    return {mode: _assemble(done, mode, processes, len(items)) for mode, _ in modes}


def _collect(results: Any, workers: list, expected: int, timeout_s: float) -> dict[tuple[str, int], tuple]:
    """(mode, rank) -> (start, end, outcomes, peak bytes, lane use, stream, host log) of every worker's report;
    RuntimeError when a worker reports an error, dies, or `timeout_s` passes."""
    done: dict[tuple[str, int], tuple] = {}
    deadline = time.monotonic() + timeout_s
    while len(done) < expected:
        try:
            message = results.get(timeout=5.0)
        except queue_mod.Empty:
            dead = [w for w in workers if w.exitcode not in (None, 0)]
            if dead:
                raise RuntimeError(f"a GPU decoder process exited with code {dead[0].exitcode}") from None
            if time.monotonic() > deadline:
                raise RuntimeError("GPU decoder processes gave no result in time") from None
            continue
        if message[0] == "error":
            raise RuntimeError(f"GPU decoder process {message[1]} failed:\n{message[2]}")
        _, rank, mode, *rest = message
        done[(mode, rank)] = tuple(rest)
    return done


def _assemble(done: dict[tuple[str, int], tuple], mode: str, processes: int, count: int) -> Timed:
    """One mode's Timed: first start to last end, outcomes back in item order, peak memory per process
    (the largest) and in total, the lanes' use (`lane_use`) over all processes, and their host logs
    (`_merged_logs`: the host's seconds by stage, on the frame loop's thread and the lattice threads)."""
    starts = [done[(mode, r)][0] for r in range(processes)]
    ends = [done[(mode, r)][1] for r in range(processes)]
    outcomes: list[Outcome | None] = [None] * count
    for r in range(processes):
        outcomes[r::processes] = done[(mode, r)][2]
    peaks = [done[(mode, r)][3] for r in range(processes)]
    uses = [done[(mode, r)][4] for r in range(processes)]
    extra: dict[str, Any] = {"peak_memory_bytes_per_process": max(peaks), "peak_memory_bytes_total": sum(peaks)}
    if all(u is not None for u in uses):
        extra["lane_use"] = lane_use(sum(u["frame_steps"] for u in uses), sum(u["lane_frames"] for u in uses),
                                     uses[0]["max_lanes"])
    streams = [done[(mode, r)][5] for r in range(processes)]
    if all(s is not None for s in streams):
        extra["stream"] = _stream_report(streams)
    logs = [done[(mode, r)][6] for r in range(processes)]
    if all(log is not None for log in logs):
        extra["kernel_log"] = _merged_logs(logs)
    return Timed(max(ends) - min(starts), outcomes, extra)  # type: ignore[arg-type]


HOST_LOG_FIELDS = ("launches_per_frame", "syncs_per_frame", "read_bytes_per_frame", "host_seconds",
                   "lattice_thread_cpu_seconds")


def _host_log(report: dict[str, Any]) -> dict[str, Any]:
    """What a process's timed call asked of the device and of its host (`KernelLog.report`'s per-frame
    counts, and seconds by host stage: the frame loop's thread, and the lattice threads)."""
    return {name: report[name] for name in HOST_LOG_FIELDS if name in report}


def _merged_logs(logs: list[dict[str, Any]]) -> dict[str, Any]:
    """The processes' host logs together: per-frame counts averaged, seconds summed per stage."""
    out: dict[str, Any] = {"processes": len(logs)}
    for name in HOST_LOG_FIELDS:
        values = [log[name] for log in logs if name in log]
        if not values:
            continue
        if isinstance(values[0], dict):
            stages = sorted(set().union(*values), key=lambda stage: -sum(v.get(stage, 0.0) for v in values))
            out[name] = {stage: sum(v.get(stage, 0.0) for v in values) for stage in stages}
        else:
            out[name] = sum(values) / len(values)
    return out


def _stream_report(streams: list[dict[str, Any]]) -> dict[str, Any]:
    """The processes' streams together: seconds from the common start to the last end, utterances, frames
    and passes (each process's), frames and utterances per second, and the share of repeated 1-bests
    identical to the first pass's."""
    seconds = max(s["end"] for s in streams) - min(s["start"] for s in streams)
    utterances, frames = sum(s["utterances"] for s in streams), sum(s["frames"] for s in streams)
    mismatches = sum(s["repeat_mismatches"] for s in streams)
    return {"seconds": seconds, "utterances": utterances, "frames": frames,
            "passes": [s["passes"] for s in streams],
            "repeats_per_batch": [s.get("repeats_per_batch", 1) for s in streams],
            "frames_per_second": frames / seconds if seconds > 0 else None,
            "utterances_per_second": utterances / seconds if seconds > 0 else None,
            "repeat_identical": 1.0 - mismatches / utterances if utterances else None}
