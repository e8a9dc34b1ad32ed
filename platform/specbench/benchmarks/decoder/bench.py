"""`specbench bench decoder`: the WFST decoders side by side, in one run, on the same graph, scores and beams.

The composition of the package: a workload (`workloads.py`: the graph and the held-out-voice test scores),
the in-process backends (`backends.py`: kaldi, cpu, cpu_lattice, twin, twin_lattice), the GPU backend as 1, 2, 4, 8
processes sharing the GPU (`gpu_processes.py`: modes gpu and gpu_lattice), and the comparison with its
`decoder.*` metrics (`agreement.py`). Each backend is skipped as "unavailable", with the reason, when its
module cannot be imported, and reported as an error (the others go on) when it fails.

The in-process backends run pinned to one core with the BLAS/OpenMP thread variables at 1. Decode times
exclude loading: the graph and scores are resident and every backend decodes one utterance (a GPU worker a
few) before its clock starts. This package imports only numpy, pyarrow and the decoders, so that it runs on
a GPU machine without ray, mlflow or polars.
"""

from __future__ import annotations

import shlex
import sys
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from specbench.benchmarks import harness
from specbench.benchmarks.decoder.agreement import Timed, agree, summary_metrics
from specbench.benchmarks.decoder.backends import BACKENDS as IN_PROCESS
from specbench.benchmarks.decoder.backends import (
    alternating_ratio,
    cuda_graphs_effect,
    gpu_profile,
    lane_refill_effect,
    one_best,
    single_utterance_latency,
)
from specbench.benchmarks.decoder.ceiling import gpu_arc_ceiling
from specbench.benchmarks.decoder.cpu_scaling import (
    CPU_MEASUREMENTS,
    scaling_metrics,
    startup_seconds,
    time_cpu_cores,
)
from specbench.benchmarks.decoder.gpu_processes import NO_STREAM, StreamPlan, gpu_state, run_gpu_processes
from specbench.benchmarks.decoder.partial_posteriors import CPU_PARTIAL_POSTERIORS, partial_posterior_cost
from specbench.benchmarks.decoder.workloads import Workload, load_scores, load_workload
from specbench.config import BenchDecoderConfig, EvalAmConfig, GraphConfig
from specbench.decoder.lane_tables import HASH_TABLE_SLOTS
from specbench.decoder.lanes import default_lattice_workers
from specbench.decoder.options import SearchOptions
from specbench.errors import DataError
from specbench.hardware import describe, limit_threads
from specbench.paths import from_root, work_dir

__all__ = ["backend_names", "bench_decoder", "execute", "load_scores", "measure", "scores_path", "summary"]

GPU_MODES = ("gpu", "gpu_lattice")
DEFAULT_WORKLOAD = "held_out_test"
DEFAULT_OPTIONS = SearchOptions(lattice_beam=8.0)


def backend_names() -> tuple[str, ...]:
    """Every backend the benchmark can run: the registered in-process ones, the GPU modes, then the compiled
    CPU backend's multi-core and start-up measurements, and what partial posteriors cost it."""
    return (*IN_PROCESS, *GPU_MODES, *CPU_MEASUREMENTS, CPU_PARTIAL_POSTERIORS)


def say(message: str) -> None:
    harness.say("decoder", message)


GPU_STEPS = ("gpu_profile", "gpu_stream_profile", "gpu_arc_ceiling", "gpu_single_utterance_latency",
             "gpu_lane_refill", "gpu_cuda_graphs")  # the measurements that run whenever gpu does


def step_fix(name: str) -> str | None:
    """The fix of a failed step that is not a backend (None for a backend: leave it out of `backends`): a
    template whose `{field}`s name the config's options (`harness.failed_backends_message` renders them as
    the verb's options or the job file's keys)."""
    if name in backend_names():
        return None
    if name == "cpu_vs_kaldi_rounds":
        return "set {ratio_rounds} to 0 to leave out the alternating rounds of kaldi and cpu"
    if name in ("gpu_lattice_profile", "gpu_stream_lattice_profile"):
        return f"leave gpu_lattice out of {{backends}} ({name} runs with it)"
    if name in GPU_STEPS:
        return f"leave gpu out of {{backends}} ({name} runs with it)"
    if name.startswith("gpu x"):
        return (f"leave {name[5:]} out of {{gpu_decoders}} (were it the only count, leave gpu and "
                f"gpu_lattice out of {{backends}} instead)")
    if name.startswith("gpu on "):
        copies = name.split()[2]
        if copies != "1":
            return f"leave {copies} out of {{graph_copies}}"
        return "leave gpu out of {backends} (the sweep over {graph_copies} runs one copy whenever it runs)"
    return None


def _attempt(status: dict[str, Any], name: str, fn: Callable[[], Any]) -> Any:
    """Run one backend or step: ImportError marks it unavailable, any other exception an error (with its
    traceback in the JSON, and for a step that is not a backend the fix that skips it: `step_fix`); the
    benchmark carries on with the others."""
    say(f"{name}: start")
    try:
        value = fn()
    except ImportError as err:
        status[name] = {"status": "unavailable", "reason": f"{type(err).__name__}: {err}"}
        say(f"{name}: unavailable ({status[name]['reason']})")
        return None
    except Exception as err:  # noqa: BLE001 - one backend's failure must not hide the others' numbers
        status[name] = {"status": "error", "reason": f"{type(err).__name__}: {err}",
                        "traceback": traceback.format_exc()}
        if step_fix(name) is not None:
            status[name]["fix"] = step_fix(name)
        say(f"{name}: ERROR {type(err).__name__}: {err}")
        return None
    status[name] = {"status": "ok"}
    return value


def _record(result: dict[str, Any], key: str, timed: Timed, audio_s: float) -> None:
    result[f"{key}_seconds"] = timed.seconds
    if "profile_seconds" in timed.extra:  # where the time went, per stage (the compiled CPU backend)
        result[f"{key}_profile_seconds"] = timed.extra["profile_seconds"]
    for name in ("lane_use", "kernel_log", "stream", "lane_refill"):  # the lane backends: lanes, launches, stream
        if name in timed.extra:
            result[f"{key}_{name}"] = timed.extra[name]
    result[f"{key}_rtfx"] = audio_s / timed.seconds
    say(f"{key}: {timed.seconds:.3f} s, {audio_s / timed.seconds:.0f}x real time")


def _time_in_process(workload: Workload, options: SearchOptions, include: Sequence[str],
                     status: dict[str, Any], result: dict[str, Any],
                     ratio_rounds: int = 0) -> dict[str, Timed]:
    """The in-process backends of `include`, in registry order, pinned to one core; then, with kaldi and cpu
    included, `ratio_rounds` rounds of the two (and cpu_lattice, when included) alternating
    (`backends.alternating_ratio`)."""
    runs: dict[str, Timed] = {}
    with harness.one_core() as core:
        result["threads"]["cpu_core"] = core
        for name, time_backend in IN_PROCESS.items():
            if name not in include:
                continue
            timed = _attempt(status, name, lambda fn=time_backend: fn(workload, options))
            if timed is not None:
                runs[name] = timed
                _record(result, name, timed, workload.audio_seconds)
        if ratio_rounds and "kaldi" in runs and "cpu" in runs:
            lattices = "cpu_lattice" in runs
            say(f"kaldi and cpu{' (and cpu with lattices)' if lattices else ''} alternating, {ratio_rounds} rounds")
            rounds = lambda: alternating_ratio(workload, options, ratio_rounds, lattices)  # noqa: E731
            result.update(_attempt(status, "cpu_vs_kaldi_rounds", rounds) or {})
    return runs


def _profile_against_ceiling(workload: Workload, options: SearchOptions, gpu_runs: dict[str, Timed],
                             status: dict[str, Any], result: dict[str, Any], lattices: bool = False,
                             lanes: dict[str, int] | None = None) -> None:
    """`gpu_profile` (kernel times, launches and host reads per frame; with `lattices` also with the lattice
    beam: `gpu_lattice_profile`); where the stream's decoders have `lanes` of their own (`--gpu-lanes`), the
    same at those lanes with the lanes as full as the stream keeps them (`gpu_stream_profile`,
    `gpu_stream_lattice_profile`, `gpu_stream_arc_ceiling_fraction`); the arc-rate ceiling of this GPU
    (`gpu_arc_ceiling`), one utterance's latency, what lane refill buys (`gpu_lane_refill`) and what CUDA
    graphs buy (`gpu_cuda_graphs`); each 1-best configuration's candidate arcs per second (the profile's arcs,
    the same for every configuration, over its time) and its fraction of the ceiling."""
    profile = _attempt(status, "gpu_profile", lambda: gpu_profile(workload, options))
    if lattices:
        lattice_profile = _attempt(status, "gpu_lattice_profile", lambda: gpu_profile(workload, options,
                                                                                       lattice=True))
        if lattice_profile is not None:
            result["gpu_lattice_profile"] = lattice_profile
    stream_lanes = {k: v for k, v in (lanes or {}).items() if v and k != "cuda_graphs"}  # timed: no graphs
    for name, with_lattices in (("gpu_stream_profile", False), ("gpu_stream_lattice_profile", True)):
        if stream_lanes.get("max_lanes") and (lattices or not with_lattices):
            entry = _attempt(status, name, lambda w=with_lattices: gpu_profile(workload, options, lattice=w,
                                                                               lanes=stream_lanes))
            if entry is not None:
                result[name] = entry
    ceiling = _attempt(status, "gpu_arc_ceiling", lambda: gpu_arc_ceiling(workload, options))
    if ceiling is not None and "gpu_stream_profile" in result:
        result["gpu_stream_arc_ceiling_fraction"] = (result["gpu_stream_profile"]["arcs_per_second"]
                                                     / ceiling["arcs_per_second"])
    latency = _attempt(status, "gpu_single_utterance_latency", lambda: single_utterance_latency(workload, options))
    if latency is not None:
        result["gpu_single_utterance_latency"] = latency
    refill = _attempt(status, "gpu_lane_refill", lambda: lane_refill_effect(workload, options))
    if refill is not None:
        result["gpu_lane_refill"] = refill
        result["decoder.gpu_lane_refill_speedup"] = refill["refill_speedup"]
    graphs = _attempt(status, "gpu_cuda_graphs", lambda: cuda_graphs_effect(workload, options))
    if graphs is not None:
        result["gpu_cuda_graphs"] = graphs
        for key, entry in graphs.items():
            if key.startswith("lanes_"):
                result[f"decoder.gpu_cuda_graphs_speedup_{key}"] = entry["graphs_speedup"]
    if profile is not None:
        result["gpu_profile"] = profile
    if ceiling is not None:
        result["gpu_arc_ceiling"] = ceiling
    for key, timed in gpu_runs.items():
        if profile is not None and not key.endswith("_lattice"):
            result[f"{key}_arcs_per_second"] = profile["arcs"] / timed.seconds
            if ceiling is not None:
                result[f"decoder.{key}_arc_ceiling_fraction"] = result[f"{key}_arcs_per_second"] / ceiling[
                    "arcs_per_second"]


def _time_gpu(workload: Workload, options: SearchOptions, include: Sequence[str], gpu_decoders: Sequence[int],
              status: dict[str, Any], result: dict[str, Any], plan: StreamPlan = NO_STREAM,
              graph_copies: Sequence[int] = (), lanes: dict[str, int] | None = None) -> dict[str, Timed]:
    """The GPU modes of `include` with each number of processes in `gpu_decoders`, each process's decoder
    with `lanes` (max_lanes and table_slots; the decoder's defaults where absent): runs named gpu4,
    gpu4_lattice, ...; `result` gets their times (the first pass), real-time factors, peak memory and
    throughput streams (`plan`); then the graph-size sweep over `graph_copies` (`_graph_size_sweep`)."""
    modes = [(m, None if m == "gpu" else options.lattice_beam) for m in GPU_MODES if m in include]
    gpu_ok, why = gpu_state() if modes else (False, "not requested")
    result["gpu"] = "available" if gpu_ok else "unavailable"
    if modes and not gpu_ok:
        result["gpu_unavailable_reason"] = why
        for mode, _ in modes:
            status[mode] = {"status": "unavailable", "reason": why}
    if not gpu_ok:
        return {}
    gpu_runs: dict[str, Timed] = {}
    peak = 0
    for n in sorted({int(n) for n in gpu_decoders}):
        timed = _attempt(status, f"gpu x{n}", lambda n=n: run_gpu_processes(  # the cores shared by the processes
            workload.graph_path, list(workload.items), options, n, modes, plan=plan,
            settings={"lattice_workers": default_lattice_workers(n), **(lanes or {})}))
        for mode, t in (timed or {}).items():
            key = mode.replace("gpu", f"gpu{n}", 1)  # gpu4, gpu4_lattice
            gpu_runs[key] = t
            _record(result, key, t, workload.audio_seconds)
            result[f"{key}_mode_peak_memory_bytes_total"] = t.extra["peak_memory_bytes_total"]
            peak = max(peak, t.extra["peak_memory_bytes_per_process"])
    result["gpu_mode_peak_memory_bytes"] = peak  # "mode_": one mode's decoder per process (each mode had both)
    result["gpu_lanes"] = dict(lanes or {})
    if "gpu" in include and graph_copies:
        _graph_size_sweep(workload, options, graph_copies, plan, status, result, gpu_runs.get("gpu1"), lanes or {})
    if "gpu" in include:  # last, in this process: where the frame loop's time goes, against what the GPU can
        _profile_against_ceiling(workload, options, gpu_runs, status, result,
                                 lattices="gpu_lattice" in include, lanes=lanes)
    for mode, _ in modes:
        if any(k.endswith("_lattice") == (mode == "gpu_lattice") for k in gpu_runs):
            status.setdefault(mode, {"status": "ok"})
        else:
            status.setdefault(mode, {"status": "error", "reason": "no GPU configuration finished"})
    return gpu_runs


def _graph_size_sweep(workload: Workload, options: SearchOptions, graph_copies: Sequence[int], plan: StreamPlan,
                      status: dict[str, Any], result: dict[str, Any], one_copy: Timed | None,
                      lanes: dict[str, int]) -> None:
    """One GPU decoder process (1-best, with the stream of `plan`) on k disjoint copies of the graph for each
    k of `graph_copies` (`wfst.graph.disjoint_copies`: the same searches on a graph k times the size), with
    the dense recombination tables and with hash tables of HASH_TABLE_SLOTS slots (`LaneSettings.
    table_slots`): `graph_size_sweep` lists per run the states, the first pass's seconds, the stream's frames
    per second, the peak device memory and the share of 1-bests equal to gpu1's (`one_copy`, which is the
    run of k = 1 with the configuration's table; run here first when gpu1 did not). Every run has the
    configuration's lanes (`lanes`)."""
    graph = workload.graph.csr
    rows = []
    own_slots = int(lanes.get("table_slots", 0))

    def run(k: int, slots: int) -> Timed | None:
        return _attempt(status, f"gpu on {k} graph copies" + (f", {slots} table slots" if slots else ""), lambda: (
            run_gpu_processes(workload.graph_path, list(workload.items), options, 1, [("gpu", None)],
                              plan=plan, copies=k, settings={**lanes, "table_slots": slots})["gpu"]))

    one_copy = one_copy or run(1, own_slots)
    for slots in (0, HASH_TABLE_SLOTS):
        for k in sorted({1, *(int(c) for c in graph_copies)}):
            timed = one_copy if (k, slots) == (1, own_slots) else run(k, slots)
            if timed is not None:
                rows.append(_size_row(k, slots, graph, timed, one_copy))
    result["graph_size_sweep"] = rows


def _size_row(k: int, slots: int, graph: Any, timed: Timed, one_copy: Timed | None) -> dict[str, Any]:
    same = [agree(a, b) for a, b in zip(timed.outcomes, one_copy.outcomes, strict=True)] if one_copy else []
    return {"copies": k, "table_slots": slots, "states": k * graph.num_states, "arcs": k * graph.num_arcs,
            "first_pass_seconds": timed.seconds,
            "stream_frames_per_second": timed.extra.get("stream", {}).get("frames_per_second"),
            "mode_peak_memory_bytes": timed.extra["peak_memory_bytes_per_process"],
            "onebest_equal_to_one_copy": sum(same) / len(same) if same else None}


def _time_cpu_cores(workload: Workload, options: SearchOptions, include: Sequence[str], cores: Sequence[int],
                    status: dict[str, Any], result: dict[str, Any], rounds: int = 1) -> dict[str, Timed]:
    """`cpu_scaling` (the compiled backend on 1, 2, ..., all cores; `rounds` alternating rounds),
    `cpu_startup` and `cpu_partial_posteriors` (`partial_posteriors.py`, `rounds` rounds) when included."""
    runs: dict[str, Timed] = {}
    if "cpu_scaling" in include:
        scaling = lambda: time_cpu_cores(workload, one_best(options), cores, rounds)  # noqa: E731
        runs, seconds = _attempt(status, "cpu_scaling", scaling) or ({}, {})
        for key, timed in runs.items():
            _record(result, key, timed, workload.audio_seconds)
        result.update(scaling_metrics(runs, seconds))
    if "cpu_startup" in include:
        probe = lambda: startup_seconds(workload.graph_path, workload.items[0][1])  # noqa: E731
        result.update(_attempt(status, "cpu_startup", probe) or {})
    if CPU_PARTIAL_POSTERIORS in include:
        result.update(_attempt(status, CPU_PARTIAL_POSTERIORS,
                               lambda: partial_posterior_cost(workload, options, rounds)) or {})
    return runs


def _header(workload: Workload, options: SearchOptions, scores_path: Path, command: str | None,
            threads: dict[str, Any]) -> dict[str, Any]:
    """The result's description of the run: hardware, command, graph, scores, utterances, search options."""
    graph = workload.graph.csr
    return {
        "bench": "decoder", "hardware": describe(),
        "command": command if command is not None else shlex.join(getattr(sys, "orig_argv", sys.argv)),
        "graph": str(workload.graph_path), "scores": str(scores_path), "workload": workload.name,
        "graph_states": graph.num_states, "graph_arcs": graph.num_arcs, "utterances": len(workload.items),
        "frames": workload.frames, "frame_shift_ms": workload.frame_shift_ms,
        "audio_seconds": workload.audio_seconds, "beam": options.beam, "max_active": options.max_active,
        "min_active": options.min_active, "lattice_beam": options.lattice_beam,
        "acoustic_scale": options.acoustic_scale, "threads": dict(threads),
    }


def bench_decoder(graph_path: Path, scores_path: Path, options: SearchOptions = DEFAULT_OPTIONS,
                  utterances: int = 1000, gpu_decoders: Sequence[int] = (1, 2, 4, 8),
                  include: Sequence[str] | None = None, frame_shift_ms: float | None = None,
                  command: str | None = None, workload: str = DEFAULT_WORKLOAD,
                  cpu_cores: Sequence[int] = (1, 2), ratio_rounds: int = 3,
                  stream: StreamPlan = NO_STREAM, graph_copies: Sequence[int] = (),
                  gpu_lanes: dict[str, int] | None = None) -> dict[str, Any]:
    """Measure the backends in `include` (default: all, see `backend_names`) on the workload `workload`
    with `options` (its lattice beam for the lattice backends), each GPU configuration with the throughput
    stream `stream` after its first pass, and one GPU process on each number of disjoint graph copies in
    `graph_copies` (`_graph_size_sweep`), the GPU decoders with `gpu_lanes` (max_lanes, table_slots and, where
    given, cuda_graphs);
    returns the JSON-able result. Backends
    that cannot be imported are reported unavailable; those that fail, as errors (`errors` lists them)."""
    include = backend_names() if include is None else tuple(include)
    unknown = set(include) - set(backend_names())
    if unknown:
        raise ValueError(f"unknown backends {sorted(unknown)}; allowed: {', '.join(backend_names())}")
    if any(int(n) < 1 for n in gpu_decoders):
        raise ValueError(f"gpu_decoders must be >= 1, got {list(gpu_decoders)}")
    threads = limit_threads()
    say(f"reading {scores_path} ({utterances} utterances, workload {workload})")
    work = load_workload(workload, Path(graph_path), Path(scores_path), utterances, frame_shift_ms)
    result = _header(work, options, Path(scores_path), command, threads)
    status: dict[str, dict[str, Any]] = {}
    runs = _time_in_process(work, options, include, status, result, ratio_rounds)
    gpu_runs = _time_gpu(work, options, include, gpu_decoders, status, result, stream, graph_copies, gpu_lanes)
    result["stream_plan"] = {"utterances": stream.utterances, "seconds": stream.seconds}
    _time_cpu_cores(work, options, include, cpu_cores, status, result, max(ratio_rounds, 1))
    result.update(summary_metrics(runs, gpu_runs, work.ids, work.audio_seconds))
    result.update(_against_kaldi_best_pass(runs, result))
    result["backends"] = status
    result["errors"] = sorted(k for k, v in status.items() if v["status"] == "error")
    return result


def _against_kaldi_best_pass(runs: dict[str, Timed], result: dict[str, Any]) -> dict[str, Any]:
    """The streams against Kaldi's fastest pass over the workload: its timed pass and every pass of the
    alternating rounds (`kaldi_round_seconds`), all on the same pinned core. One pass on a shared machine
    can run slowly (Kaldi's took 2.86 to 3.80 s on the same H200 machine type), and the fastest of several
    is the steadier reference: `kaldi_best_seconds`, `decoder.stream_speedup_vs_kaldi_best_pass` and
    `decoder.stream_lattice_speedup_vs_kaldi_best_pass` (`decoder.stream_speedup_vs_kaldi` keeps the timed
    pass alone)."""
    if "kaldi" not in runs:
        return {}
    best = min([runs["kaldi"].seconds, *result.get("kaldi_round_seconds", [])])
    out: dict[str, Any] = {"kaldi_best_seconds": best}
    frames = sum(o.num_frames for o in runs["kaldi"].outcomes)
    for prefix in ("stream", "stream_lattice"):
        if f"decoder.{prefix}_frames_per_second" in result:
            out[f"decoder.{prefix}_speedup_vs_kaldi_best_pass"] = (
                result[f"decoder.{prefix}_frames_per_second"] * best / frames)
    return out


def measure(config: BenchDecoderConfig, job_path: Path) -> dict[str, Any]:
    """The benchmark of a `bench_decoder` config (see `benchmarks.harness`): the graph is `config.graph`,
    else the graph (TLG or HCLG) of `graph_job` (built when missing)."""
    limit_threads()
    scores = scores_path(config, job_path)  # before the graph, which may take minutes to build
    if config.graph is not None:
        graph = from_root(config.graph)
    else:
        from specbench.experiments.graph_recipe import build_graph
        from specbench.experiments.job_refs import referenced_job
        from specbench.experiments.stage_clock import stage_printer

        graph_config = referenced_job(job_path, "graph_job", config.graph_job, GraphConfig)
        graph = build_graph(graph_config, step=stage_printer(f"graph {graph_config.name}")).fst
    options = SearchOptions(beam=float(config.beam), max_active=int(config.max_active),
                            min_active=int(config.min_active), acoustic_scale=float(config.acoustic_scale),
                            lattice_beam=float(config.lattice_beam))
    return bench_decoder(graph, scores, options, utterances=config.utterances,
                         gpu_decoders=config.gpu_decoders, include=config.backends,
                         frame_shift_ms=config.frame_shift_ms, cpu_cores=config.cpu_cores,
                         ratio_rounds=config.ratio_rounds, workload=config.workload,
                         stream=StreamPlan(config.stream_utterances, config.stream_seconds),
                         graph_copies=config.graph_copies,
                         gpu_lanes={"max_lanes": config.gpu_lanes, "table_slots": config.gpu_table_slots,
                                    **({"cuda_graphs": True} if config.gpu_cuda_graphs else {})})


def scores_path(config: BenchDecoderConfig, job_path: Path) -> Path:
    """The scores to decode: the test scores of the `eval_am` job `scores_job` names (where that job writes
    them: the work directory's `scores/<its name>/test.parquet`, used only while their record says that job
    and its checkpoint would write them now: `experiments.scores_record`), else `scores`; a missing file is
    an error that says which job writes it."""
    if config.scores_job is None:
        scores = from_root(config.scores)
        if not scores.exists():
            writer = "real_speech.toml" if config.workload == "real_speech" else "am_eval.toml"
            raise DataError(f"scores {scores} do not exist. Fix: write them with `specbench run "
                            f"jobs/{writer}`, or name others with `scores` (--scores)")
        return scores
    from specbench.experiments import scores_record
    from specbench.experiments.job_refs import referenced_job

    evaluation = referenced_job(job_path, "scores_job", config.scores_job, EvalAmConfig)
    scores = work_dir() / "scores" / evaluation.name / "test.parquet"
    if not scores.is_file():
        raise DataError(f"scores file {scores} of scores_job = '{config.scores_job}' does not exist. Fix: run "
                        f"that job first (`specbench run {config.scores_job}`; a suite lists it before this one)")
    eval_path = config.scores_job if config.scores_job.is_absolute() else job_path.parent / config.scores_job
    scores_record.check(scores.parent, evaluation, from_root(evaluation.checkpoint), eval_path)
    return scores


def summary(result: dict[str, Any]) -> list[str]:
    gpu = (f"GPU {result['decoder.speedup_vs_kaldi']:.2f}x Kaldi" if "decoder.speedup_vs_kaldi" in result
           else f"GPU {result['gpu']}")
    agreement = (f"1-best identical {result['decoder.onebest_identical']:.3f}" if "decoder.onebest_identical" in result
                 else f"CPU 1-best = Kaldi's {result.get('decoder.cpu_kaldi_identical', float('nan')):.3f}")
    return [(f"decoder benchmark ({result.get('workload', DEFAULT_WORKLOAD)}) on {result['utterances']} utterances: "
             f"{agreement}, CPU backend {result.get('decoder.cpu_vs_kaldi', float('nan')):.2f}x Kaldi, {gpu}")]


execute = harness.runner(measure, summary)
