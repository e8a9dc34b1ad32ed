"""`specbench bench decoder`: the WFST decoders side by side, in one run, on the same graph, scores and beams.

Backends (each skipped as "unavailable", with the reason, when its module cannot be imported):
- `kaldi`: kaldi-decoder's C++ `FasterDecoder`, one utterance at a time, no lattice;
- `cpu`: our numpy `CpuDecoder`, 1-best only; `cpu_lattice`: the same with `lattice_beam` (lattice density and
  what lattices cost);
- `twin`: `TwinDecoder`, the numpy twin of the GPU algorithm, all utterances as lanes of one batch;
- `gpu`, `gpu_lattice`: `GpuDecoder`, with 1, 2, 4, 8 decoders sharing the GPU as plain processes (each its
  own CUDA context, each an equal shard), without and with lattices.

The CPU backends run pinned to one core with the BLAS/OpenMP thread variables at 1. Decode times exclude
loading: the graph and scores are resident and every backend decodes one utterance (a GPU worker a few)
before its clock starts; a GPU configuration is timed from a barrier all its workers pass once warm until
the last one finishes (`time.perf_counter`, a system-wide monotonic clock on Linux).

Utterances: the first `utterances` held-out-voice utterances of the scores file, sorted by id. Scores come from
a Parquet file (DESIGN.md's scores format) or a `.npz` of one (T, P) array per utterance (the frame shift then
from `frame_shift_ms`, else from the `manifest.json` beside it). This module imports only numpy, pyarrow and
the decoders, so that it runs on a GPU machine without ray, mlflow or polars.
"""

from __future__ import annotations

import importlib
import json
import math
import multiprocessing as mp
import queue as queue_mod
import re
import shlex
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from specbench.benchmarks import harness
from specbench.benchmarks.harness import one_core, progress
from specbench.config import BenchDecoderConfig, GraphConfig
from specbench.data.voices import VOICES
from specbench.errors import DataError
from specbench.hardware import describe, limit_threads
from specbench.paths import from_root

BACKENDS = ("kaldi", "cpu", "cpu_lattice", "twin", "gpu", "gpu_lattice")
HELD_OUT_SLUGS = tuple(v.slug for v in VOICES if v.held_out)  # ("espeak-en-us-f4", "flite-rms")
COST_TOLERANCE = 1e-3
GPU_WARMUP_UTTERANCES = 4
GPU_TIMEOUT_S = 3600.0
MAX_LISTED_MISMATCHES = 20
_HELD_OUT = re.compile(r"(?:^|-)(?:" + "|".join(map(re.escape, HELD_OUT_SLUGS)) + r")(?:-|$)")


# ---- utterances --------------------------------------------------------------------------------------

def is_held_out(utt_id: str) -> bool:
    """Whether an utterance id names a held-out voice (`...-flite-rms-...`, `...-espeak-en-us-f4-...`)."""
    return _HELD_OUT.search(utt_id) is not None


def select_utterances(utt_ids: Iterable[str], count: int) -> list[str]:
    """The first `count` held-out-voice ids in sorted order."""
    if count < 1:
        raise ValueError(f"utterances must be >= 1, got {count}")
    return sorted(u for u in set(utt_ids) if is_held_out(u))[:count]


def load_scores(path: Path, utterances: int, frame_shift_ms: float | None = None
                ) -> tuple[list[tuple[str, np.ndarray]], float]:
    """[(utt_id, (T, P) float32)] of the selected utterances, and the frame shift in ms."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"scores file {path} does not exist")
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        items, shift = _parquet_scores(path, utterances)
        frame_shift_ms = frame_shift_ms or shift
    elif suffix == ".npz":
        with np.load(path, allow_pickle=False) as data:
            items = [(u, _matrix(data[u], path, u)) for u in select_utterances(data.files, utterances)]
        frame_shift_ms = frame_shift_ms or _manifest_frame_shift(path)
    else:
        raise DataError(f"{path}: `bench decoder` reads .parquet or .npz scores, not {suffix!r}")
    if not items:
        raise DataError(f"{path}: no held-out-voice utterances (ids with {' or '.join(HELD_OUT_SLUGS)})")
    if not frame_shift_ms or frame_shift_ms <= 0:
        raise DataError(f"{path}: the scores carry no frame shift. Fix: pass --frame-shift-ms")
    return items, float(frame_shift_ms)


def _matrix(value: object, path: Path, utt_id: str) -> np.ndarray:
    mat = np.ascontiguousarray(value, dtype=np.float32)
    if mat.ndim != 2:
        raise DataError(f"{path}: scores of {utt_id!r} have shape {mat.shape}; expected (frames, columns)")
    return mat


def _parquet_scores(path: Path, utterances: int) -> tuple[list[tuple[str, np.ndarray]], float]:
    """Read with pyarrow alone (no polars, no kaldiio): rows with a status other than ok are left out."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except (OSError, pa.ArrowInvalid) as err:
        raise DataError(f"{path}: not a readable scores Parquet file ({err})") from err
    missing = {"utt_id", "num_frames", "num_classes", "loglikes"} - set(table.column_names)
    if missing:
        raise DataError(f"{path}: scores table lacks the columns {sorted(missing)}; see DESIGN.md's Interfaces")
    ids = table.column("utt_id").to_pylist()
    status = table.column("status").to_pylist() if "status" in table.column_names else [None] * len(ids)
    row_of = {u: i for i, (u, s) in enumerate(zip(ids, status)) if s in (None, "ok")}
    chosen = select_utterances(row_of, utterances)
    rows = [row_of[u] for u in chosen]
    frames = table.column("num_frames").to_numpy()
    classes = table.column("num_classes").to_numpy()
    loglikes = table.column("loglikes").combine_chunks()
    values = loglikes.values.to_numpy(zero_copy_only=False)
    offsets = loglikes.offsets.to_numpy()
    items = []
    for utt_id, row in zip(chosen, rows):
        shape = (int(frames[row]), int(classes[row]))
        flat = values[offsets[row]:offsets[row + 1]]
        if flat.size != shape[0] * shape[1]:
            raise DataError(f"{path}: utterance {utt_id!r} has {flat.size} scores, not {shape[0]} x {shape[1]}")
        items.append((utt_id, np.ascontiguousarray(flat, dtype=np.float32).reshape(shape)))
    shift = 0.0
    if "frame_shift_ms" in table.column_names and rows:
        shift = float(table.column("frame_shift_ms")[rows[0]].as_py() or 0.0)
    return items, shift


def _manifest_frame_shift(npz: Path) -> float | None:
    """The frame shift recorded for `npz` in a `manifest.json` beside it (the GPU carry folder's)."""
    manifest = npz.parent / "manifest.json"
    if not manifest.is_file():
        return None
    try:
        scores = json.loads(manifest.read_text()).get("scores", {})
    except (OSError, ValueError, AttributeError):
        return None
    if scores.get("file") != npz.name:
        return None
    return scores.get("frame_shift_ms")


# ---- what every backend reports ----------------------------------------------------------------------

class Outcome(NamedTuple):
    """The comparable part of one decoded utterance."""

    ok: bool
    word_ids: tuple[int, ...]
    total_cost: float
    max_active_binds: int
    lattice_arcs: int | None
    num_frames: int


@dataclass
class Timed:
    seconds: float
    outcomes: list[Outcome]
    extra: dict[str, Any]


def outcome_of(result: Any, num_frames: int) -> Outcome:
    """An Outcome from a DecodeResult."""
    lattice = getattr(result, "lattice", None)
    stats = getattr(result, "stats", None)
    return Outcome(bool(result.ok), tuple(int(w) for w in result.word_ids), float(result.total_cost),
                   int(getattr(stats, "max_active_binds", 0) or 0),
                   None if lattice is None else int(lattice.num_arcs), int(num_frames))


def _kaldi_outcome(result: Any, num_frames: int) -> Outcome:
    if result is None:
        return Outcome(False, (), math.inf, 0, None, num_frames)
    return Outcome(True, tuple(int(w) for w in result.word_ids), float(result.total_cost), 0, None, num_frames)


def agree(a: Outcome, b: Outcome, costs: bool = True) -> bool:
    """Same word ids (and total cost within COST_TOLERANCE when `costs`); two failures agree."""
    if not a.ok or not b.ok:
        return a.ok == b.ok
    return a.word_ids == b.word_ids and (not costs or abs(a.total_cost - b.total_cost) <= COST_TOLERANCE)


def agreement(ours: list[Outcome], ref: list[Outcome], ids: Sequence[str], bound: Sequence[bool],
              costs: bool = True) -> dict[str, Any]:
    """Fraction of utterances that agree, over all, over those where max_active bound and over the others,
    and the first disagreeing ids."""
    same = [agree(a, b, costs) for a, b in zip(ours, ref)]

    def frac(mask: Iterable[bool]) -> float | None:
        picked = [s for s, m in zip(same, mask) if m]
        return sum(picked) / len(picked) if picked else None

    return {"all": frac([True] * len(same)), "bound": frac(bound), "free": frac([not b for b in bound]),
            "mismatches": [u for u, s in zip(ids, same) if not s][:MAX_LISTED_MISMATCHES]}


def say(message: str) -> None:
    harness.say("decoder", message)


# ---- the backends ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Params:
    beam: float
    max_active: int
    min_active: int
    acoustic_scale: float

    def kwargs(self) -> dict[str, Any]:
        return {"beam": self.beam, "max_active": self.max_active, "min_active": self.min_active,
                "acoustic_scale": self.acoustic_scale}


def run_kaldi(graph_path: Path, items: list[tuple[str, np.ndarray]], params: Params) -> Timed:
    from specbench.decoder.kaldi_reference import KaldiFasterDecoder

    decoder = KaldiFasterDecoder(graph_path, params.beam, params.max_active, params.min_active,
                                 params.acoustic_scale)
    decoder.decode(items[0][1])  # warm-up
    t0 = time.perf_counter()
    results = [decoder.decode(mat) for _, mat in progress(items, "kaldi")]
    seconds = time.perf_counter() - t0
    return Timed(seconds, [_kaldi_outcome(r, len(m)) for r, (_, m) in zip(results, items)], {})


def run_cpu(graph: Any, items: list[tuple[str, np.ndarray]], params: Params,
            lattice_beam: float | None = None) -> Timed:
    from specbench.decoder.cpu import CpuDecoder

    if lattice_beam is None:
        decoder = CpuDecoder(graph, **params.kwargs())
    else:
        decoder = CpuDecoder(graph, **params.kwargs(), lattice_beam=lattice_beam)
    decoder.decode(items[0][1], items[0][0])  # warm-up
    t0 = time.perf_counter()
    results = [decoder.decode(mat, utt_id) for utt_id, mat in progress(
        items, "cpu" if lattice_beam is None else "cpu lattice")]
    seconds = time.perf_counter() - t0
    return Timed(seconds, [outcome_of(r, len(m)) for r, (_, m) in zip(results, items)], {})


def run_twin(graph: Any, items: list[tuple[str, np.ndarray]], params: Params) -> Timed:
    from specbench.decoder.twin import TwinDecoder

    decoder = TwinDecoder(graph, **params.kwargs())
    decoder.decode_batch(items[:1])  # warm-up
    say(f"twin: decoding {len(items)} utterances as lanes")
    t0 = time.perf_counter()
    results = decoder.decode_batch(items)
    seconds = time.perf_counter() - t0
    return Timed(seconds, [outcome_of(r, len(m)) for r, (_, m) in zip(results, items)], {})


GPU_DECODER = "specbench.decoder.gpu.backend:GpuDecoder"


def _gpu_worker(rank: int, graph_path: str, items: list[tuple[str, np.ndarray]], params: Params,
                modes: list[tuple[str, float | None]], barrier: Any, results: Any, decoder: str) -> None:
    """One decoder process: build its decoders and warm them up, then per mode wait at the barrier, decode
    the shard and report (rank, mode, start, end, outcomes, peak GPU bytes). `decoder` names the lane
    decoder class as "module:Class" (the GPU backend; the tests use the twin); its module's
    `peak_memory_bytes()` is reported when it has one (else 0)."""
    try:
        from specbench.wfst.graph import read_graph

        module_name, class_name = decoder.split(":")
        gpu = importlib.import_module(module_name)
        peak = getattr(gpu, "peak_memory_bytes", lambda: 0)
        graph = read_graph(graph_path)
        decoders = {}
        for mode, lattice_beam in modes:
            decoders[mode] = getattr(gpu, class_name)(graph, **params.kwargs(), lattice_beam=lattice_beam)
            decoders[mode].decode_batch(items[:GPU_WARMUP_UTTERANCES])
        for mode, _ in modes:
            barrier.wait(timeout=GPU_TIMEOUT_S)
            t0 = time.perf_counter()
            decoded = decoders[mode].decode_batch(items)
            t1 = time.perf_counter()
            outcomes = [outcome_of(r, len(m)) for r, (_, m) in zip(decoded, items)]
            results.put(("done", rank, mode, t0, t1, outcomes, int(peak())))
    except threading.BrokenBarrierError:
        return  # another worker failed and reported it
    except BaseException:  # noqa: BLE001 - reported to the parent, which fails the configuration
        results.put(("error", rank, traceback.format_exc()))
        barrier.abort()


def run_gpu_processes(graph_path: Path, items: list[tuple[str, np.ndarray]], params: Params, processes: int,
                      modes: list[tuple[str, float | None]], decoder: str = GPU_DECODER) -> dict[str, Timed]:
    """`processes` spawned decoder processes (own CUDA context each), each an equal (strided) shard; per mode
    (name, lattice beam) a Timed whose outcomes are in the order of `items`. Raises RuntimeError with a
    worker's traceback when one fails."""
    ctx = mp.get_context("spawn")
    barrier, results = ctx.Barrier(processes), ctx.Queue()
    shards = [items[r::processes] for r in range(processes)]
    workers = [ctx.Process(target=_gpu_worker, args=(r, str(graph_path), shards[r], params, modes, barrier,
                                                     results, decoder), daemon=True) for r in range(processes)]
    for w in workers:
        w.start()
    done: dict[tuple[str, int], tuple] = {}
    deadline = time.monotonic() + GPU_TIMEOUT_S * (len(modes) + 1)
    try:
        while len(done) < processes * len(modes):
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
    finally:
        for w in workers:
            w.join(timeout=30)
            if w.is_alive():
                w.terminate()
                w.join(timeout=10)
    out = {}
    for mode, _ in modes:
        starts = [done[(mode, r)][0] for r in range(processes)]
        ends = [done[(mode, r)][1] for r in range(processes)]
        outcomes: list[Outcome | None] = [None] * len(items)
        for r in range(processes):
            outcomes[r::processes] = done[(mode, r)][2]
        peaks = [done[(mode, r)][3] for r in range(processes)]
        out[mode] = Timed(max(ends) - min(starts), outcomes,  # type: ignore[arg-type]
                          {"peak_memory_bytes_per_process": max(peaks), "peak_memory_bytes_total": sum(peaks)})
    return out


# ---- the benchmark -----------------------------------------------------------------------------------

def _unavailable(err: BaseException) -> dict[str, Any]:
    return {"status": "unavailable", "reason": f"{type(err).__name__}: {err}"}


def _attempt(status: dict[str, Any], name: str, fn: Callable[[], Any]) -> Any:
    """Run one backend: ImportError marks it unavailable, any other exception an error (with its
    traceback in the JSON); the benchmark carries on with the others."""
    say(f"{name}: start")
    try:
        value = fn()
    except ImportError as err:
        status[name] = _unavailable(err)
        say(f"{name}: unavailable ({status[name]['reason']})")
        return None
    except Exception as err:  # noqa: BLE001 - one backend's failure must not hide the others' numbers
        status[name] = {"status": "error", "reason": f"{type(err).__name__}: {err}",
                        "traceback": traceback.format_exc()}
        say(f"{name}: ERROR {type(err).__name__}: {err}")
        return None
    status[name] = {"status": "ok"}
    return value


def _gpu_state() -> tuple[bool, str | None]:
    """(GPU decoding possible, why not)."""
    try:
        from specbench.decoder.gpu import gpu_available
    except ImportError as err:
        return False, f"{type(err).__name__}: {err}"
    try:
        return (True, None) if gpu_available() else (False, "gpu_available() is false: no CUDA device or cupy")
    except Exception as err:  # noqa: BLE001
        return False, f"{type(err).__name__}: {err}"


def bench_decoder(graph_path: Path, scores_path: Path, utterances: int = 1000, beam: float = 15.0,
                  max_active: int = 10000, lattice_beam: float = 8.0, acoustic_scale: float = 1.0,
                  gpu_decoders: Sequence[int] = (1, 2, 4, 8), include: Sequence[str] = BACKENDS,
                  min_active: int = 20, frame_shift_ms: float | None = None,
                  command: str | None = None) -> dict[str, Any]:
    """Measure the backends in `include` (see BACKENDS); returns the JSON-able result. Backends that
    cannot be imported are reported unavailable; those that fail, as errors (`errors` lists them)."""
    from specbench.wfst.graph import read_graph

    unknown = set(include) - set(BACKENDS)
    if unknown:
        raise ValueError(f"unknown backends {sorted(unknown)}; allowed: {', '.join(BACKENDS)}")
    if any(int(n) < 1 for n in gpu_decoders):
        raise ValueError(f"gpu_decoders must be >= 1, got {list(gpu_decoders)}")
    threads = limit_threads()
    graph_path, scores_path = Path(graph_path), Path(scores_path)
    if not graph_path.is_file():
        raise DataError(f"--graph {graph_path}: no such file")
    params = Params(float(beam), int(max_active), int(min_active), float(acoustic_scale))
    say(f"reading {scores_path} ({utterances} held-out-voice utterances)")
    items, shift_ms = load_scores(scores_path, utterances, frame_shift_ms)
    graph = read_graph(graph_path)
    ids = [u for u, _ in items]
    frames = sum(len(m) for _, m in items)
    audio_s = frames * shift_ms / 1000.0
    result: dict[str, Any] = {
        "bench": "decoder", "hardware": describe(),
        "command": command if command is not None else shlex.join(getattr(sys, "orig_argv", sys.argv)),
        "graph": str(graph_path), "scores": str(scores_path), "graph_states": graph.num_states,
        "graph_arcs": graph.num_arcs, "utterances": len(items), "frames": frames, "frame_shift_ms": shift_ms,
        "audio_seconds": audio_s, "beam": params.beam, "max_active": params.max_active,
        "min_active": params.min_active, "lattice_beam": lattice_beam, "acoustic_scale": params.acoustic_scale,
        "threads": dict(threads),
    }
    status: dict[str, dict[str, Any]] = {}
    runs: dict[str, Timed] = {}

    with one_core() as core:
        result["threads"]["cpu_core"] = core
        for name, fn in (("kaldi", lambda: run_kaldi(graph_path, items, params)),
                         ("cpu", lambda: run_cpu(graph, items, params)),
                         ("cpu_lattice", lambda: run_cpu(graph, items, params, lattice_beam)),
                         ("twin", lambda: run_twin(graph, items, params))):
            if name in include:
                timed = _attempt(status, name, fn)
                if timed is not None:
                    runs[name] = timed
                    result[f"{name}_seconds"] = timed.seconds
                    result[f"{name}_rtfx"] = audio_s / timed.seconds
                    say(f"{name}: {timed.seconds:.2f} s, {audio_s / timed.seconds:.0f}x real time")

    gpu_modes = [(m, None if m == "gpu" else lattice_beam) for m in ("gpu", "gpu_lattice") if m in include]
    gpu_ok, why = _gpu_state() if gpu_modes else (False, "not requested")
    result["gpu"] = "available" if gpu_ok else "unavailable"
    if gpu_modes and not gpu_ok:
        result["gpu_unavailable_reason"] = why
        for mode, _ in gpu_modes:
            status[mode] = {"status": "unavailable", "reason": why}
    gpu_runs: dict[str, Timed] = {}
    if gpu_ok:
        peak = 0
        for n in sorted({int(n) for n in gpu_decoders}):
            timed = _attempt(status, f"gpu x{n}", lambda n=n: run_gpu_processes(graph_path, items, params, n,
                                                                                gpu_modes))
            if timed is None:
                continue
            for mode, t in timed.items():
                key = f"{mode.replace('gpu', f'gpu{n}', 1)}"  # gpu4, gpu4_lattice
                gpu_runs[key] = t
                result[f"{key}_seconds"] = t.seconds
                result[f"{key}_rtfx"] = audio_s / t.seconds
                result[f"{key}_peak_memory_bytes_total"] = t.extra["peak_memory_bytes_total"]
                peak = max(peak, t.extra["peak_memory_bytes_per_process"])
                say(f"{key}: {t.seconds:.3f} s, {audio_s / t.seconds:.0f}x real time")
        result["gpu_peak_memory_bytes"] = peak
        for mode, _ in gpu_modes:
            if any(k.endswith("_lattice") == (mode == "gpu_lattice") for k in gpu_runs):
                status.setdefault(mode, {"status": "ok"})
            else:
                status.setdefault(mode, {"status": "error", "reason": "no GPU configuration finished"})

    result.update(_summary(result, runs, gpu_runs, ids, audio_s))
    result["backends"] = status
    result["errors"] = sorted(k for k, v in status.items() if v["status"] == "error")
    return result


def _summary(result: dict[str, Any], runs: dict[str, Timed], gpu_runs: dict[str, Timed], ids: list[str],
             audio_s: float) -> dict[str, Any]:
    """The `decoder.*` metrics (DESIGN.md's names) from the timed runs."""
    out: dict[str, Any] = {}
    onebest_gpu = {k: t for k, t in gpu_runs.items() if not k.endswith("_lattice")}
    lattice_gpu = {k: t for k, t in gpu_runs.items() if k.endswith("_lattice")}
    kaldi, cpu = runs.get("kaldi"), runs.get("cpu")
    if onebest_gpu:
        best = min(onebest_gpu, key=lambda k: onebest_gpu[k].seconds)
        out["decoder.rtfx"] = audio_s / onebest_gpu[best].seconds
        out["decoder.rtfx_backend"] = best
        if kaldi:
            out["decoder.speedup_vs_kaldi"] = kaldi.seconds / onebest_gpu[best].seconds
    elif cpu:
        out["decoder.rtfx"] = audio_s / cpu.seconds
        out["decoder.rtfx_backend"] = "cpu"
    if lattice_gpu:
        best = min(lattice_gpu, key=lambda k: lattice_gpu[k].seconds)
        out["decoder.lattice_rtfx"] = audio_s / lattice_gpu[best].seconds
        if kaldi:
            out["decoder.lattice_speedup_vs_kaldi"] = kaldi.seconds / lattice_gpu[best].seconds
    elif "cpu_lattice" in runs:
        out["decoder.lattice_rtfx"] = audio_s / runs["cpu_lattice"].seconds
    if kaldi and cpu:
        out["decoder.cpu_vs_kaldi"] = kaldi.seconds / cpu.seconds
    if kaldi and "twin" in runs:
        out["decoder.twin_vs_kaldi"] = kaldi.seconds / runs["twin"].seconds
    if cpu and "cpu_lattice" in runs:
        out["cpu_lattice_overhead"] = runs["cpu_lattice"].seconds / cpu.seconds
    for key, t in lattice_gpu.items():
        plain = onebest_gpu.get(key.removesuffix("_lattice"))
        if plain:
            out[f"{key}_overhead"] = t.seconds / plain.seconds

    def density(t: Timed) -> float | None:
        arcs = [o.lattice_arcs for o in t.outcomes if o.lattice_arcs is not None]
        counted = sum(o.num_frames for o in t.outcomes if o.lattice_arcs is not None)
        return sum(arcs) / counted if arcs and counted else None

    if "cpu_lattice" in runs:
        out["cpu_lattice_density"] = density(runs["cpu_lattice"])
    if lattice_gpu:
        out["gpu_lattice_density"] = density(next(iter(lattice_gpu.values())))
    lattice_density = out.get("gpu_lattice_density", out.get("cpu_lattice_density"))
    if lattice_density is not None:
        out["decoder.lattice_density"] = lattice_density

    if cpu:
        bound = [o.max_active_binds > 0 for o in cpu.outcomes]
        out["decoder.max_active_bound_utterances"] = sum(bound)
        out["decoder.max_active_free_utterances"] = len(bound) - sum(bound)
        mismatches: dict[str, list[str]] = {}
        if kaldi:
            a = agreement(cpu.outcomes, kaldi.outcomes, ids, bound, costs=False)
            out["decoder.cpu_kaldi_identical"] = a["all"]
            out["decoder.cpu_kaldi_identical_max_active_bound"] = a["bound"]
            out["decoder.cpu_kaldi_identical_max_active_free"] = a["free"]
            mismatches["cpu_vs_kaldi"] = a["mismatches"]
        compared = dict(gpu_runs, **({"twin": runs["twin"]} if "twin" in runs else {}))
        per_run = {k: agreement(t.outcomes, cpu.outcomes, ids, bound) for k, t in compared.items()}
        for k, a in per_run.items():
            out[f"{k}_onebest_identical"] = a["all"]
            mismatches[f"{k}_vs_cpu"] = a["mismatches"]
        headline = {k: a for k, a in per_run.items() if (k != "twin") == bool(gpu_runs)}
        if headline:
            worst = min(headline, key=lambda k: headline[k]["all"])
            out["decoder.onebest_identical"] = headline[worst]["all"]
            out["decoder.onebest_identical_max_active_bound"] = headline[worst]["bound"]
            out["decoder.onebest_identical_max_active_free"] = headline[worst]["free"]
            out["decoder.onebest_compared"] = (f"gpu: the lowest of {', '.join(sorted(headline))} ({worst})"
                                               if gpu_runs else "twin (no GPU)")
        if "cpu_lattice" in runs:
            a = agreement(runs["cpu_lattice"].outcomes, cpu.outcomes, ids, bound)
            out["cpu_lattice_onebest_identical"] = a["all"]
        if mismatches:
            out["mismatches"] = mismatches
        for name, t in (("cpu", cpu), *((k, v) for k, v in runs.items() if k in ("twin", "cpu_lattice")),
                        *gpu_runs.items()):
            out[f"{name}_failed_utterances"] = sum(not o.ok for o in t.outcomes)
    if kaldi:
        out["kaldi_failed_utterances"] = sum(not o.ok for o in kaldi.outcomes)
    return out


def measure(config: BenchDecoderConfig, job_path: Path) -> dict[str, Any]:
    """The benchmark of a `bench_decoder` config (see `benchmarks.harness`): the graph is `config.graph`,
    else the TLG of `graph_job` (built when missing)."""
    limit_threads()
    if config.graph is not None:
        graph = from_root(config.graph)
    else:
        from specbench.experiments.graph_recipe import build_graph
        from specbench.experiments.job_refs import referenced_job

        graph = build_graph(referenced_job(job_path, "graph_job", config.graph_job, GraphConfig)).tlg
    scores = from_root(config.scores)
    if not scores.is_file():
        raise DataError(f"scores file {scores} does not exist. Fix: write it with `specbench run "
                        "jobs/am_eval.toml`, or name another with `scores` (--scores)")
    return bench_decoder(graph, scores, utterances=config.utterances, beam=config.beam,
                         max_active=config.max_active, lattice_beam=config.lattice_beam,
                         acoustic_scale=config.acoustic_scale, gpu_decoders=config.gpu_decoders,
                         include=config.backends, min_active=config.min_active,
                         frame_shift_ms=config.frame_shift_ms)


def summary(result: dict[str, Any]) -> list[str]:
    return [f"decoder benchmark on {result['utterances']} utterances: 1-best identical "
            f"{result.get('decoder.onebest_identical', float('nan')):.3f}, CPU backend "
            f"{result.get('decoder.cpu_vs_kaldi', float('nan')):.2f}x Kaldi, GPU {result['gpu']}"]


execute = harness.runner(measure, summary)
