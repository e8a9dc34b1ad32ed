"""The decoder benchmark's in-process backends: a registry name -> a function that times that backend.

Each registered function takes the workload and the benchmark's `SearchOptions` (whose `lattice_beam` is
the one the lattice backends use; the 1-best backends leave it out) and returns a `Timed`: the decode time
in seconds with one `Outcome` per utterance, in order. Every decoder is built by `decoder.backends.
make_decoder` and decodes one utterance before its clock starts (graph and scores are resident). Adding a
backend is registering one function here:

- `kaldi`: kaldi-decoder's C++ `FasterDecoder`, one utterance at a time, no lattice;
- `cpu`: our compiled CPU backend (`CompiledCpuDecoder`), 1-best only; `cpu_lattice`: the same with the
  lattice beam; `cpu_numpy`: the numpy reference (`CpuDecoder`), 1-best only;
- `twin`: `TwinDecoder`, the numpy twin of the GPU algorithm, all utterances as lanes of one batch;
  `twin_lattice`: the same with the lattice beam (what lattices cost the host).

The GPU backend runs in processes of its own (`gpu_processes.py`). A backend whose module cannot be
imported raises ImportError, which the benchmark reports as unavailable.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any
from dataclasses import replace

from specbench.benchmarks import harness
from specbench.benchmarks.decoder.agreement import Timed, decoder_lane_use, outcome_of
from specbench.benchmarks.decoder.gpu_processes import stream_repeats
from specbench.benchmarks.decoder.workloads import Workload
from specbench.decoder.backends import make_decoder
from specbench.decoder.options import SearchOptions

TimeBackend = Callable[[Workload, SearchOptions], Timed]
BACKENDS: dict[str, TimeBackend] = {}


def register(name: str) -> Callable[[TimeBackend], TimeBackend]:
    """Decorator: make `fn(workload, options) -> Timed` the benchmark backend `name`."""
    def add(fn: TimeBackend) -> TimeBackend:
        BACKENDS[name] = fn
        return fn

    return add


def one_best(options: SearchOptions) -> SearchOptions:
    """The options without a lattice."""
    return replace(options, lattice_beam=None)


def with_lattice(options: SearchOptions) -> SearchOptions:
    """The options, which must name a lattice beam."""
    if options.lattice_beam is None:
        raise ValueError("the lattice backends need SearchOptions.lattice_beam (None given). Fix: set "
                         "lattice_beam (--lattice-beam)")
    return options


def one_at_a_time(backend: str, label: str, workload: Workload, options: SearchOptions) -> Timed:
    """Time `backend` decoding the workload's utterances one after the other (progress as `label`)."""
    decoder = make_decoder(backend, workload.graph, options)
    items = workload.items
    decoder.decode(items[0][1], items[0][0])  # warm-up
    profile = getattr(decoder, "profile", None)  # seconds per stage, where a backend keeps them
    if profile is not None:
        profile.update(dict.fromkeys(profile, 0.0))
    seconds, results = harness.timed(lambda: [decoder.decode(mat, utt_id)
                                              for utt_id, mat in harness.progress(items, label)])
    extra = {"profile_seconds": dict(profile)} if profile is not None else {}
    return Timed(seconds, [outcome_of(r, len(m)) for r, (_, m) in zip(results, items)], extra)


def all_as_lanes(backend: str, workload: Workload, options: SearchOptions) -> Timed:
    """Time a lane backend decoding all the workload's utterances as one call of `decode_batch`."""
    decoder = make_decoder(backend, workload.graph, options)
    items = list(workload.items)
    decoder.decode_batch(items[:1])  # warm-up
    decoder.reset_counts()
    harness.say("decoder", f"{backend}: decoding {len(items)} utterances as lanes")
    seconds, results = harness.timed(lambda: decoder.decode_batch(items))
    return Timed(seconds, [outcome_of(r, len(m)) for r, (_, m) in zip(results, items)],
                 {"lane_use": decoder_lane_use(decoder),
                  "kernel_log": decoder.kernel_log.report(decoder.frame_steps, seconds)})


def gpu_profile(workload: Workload, options: SearchOptions, backend: str = "gpu", lattice: bool = False,
                lanes: dict[str, int] | None = None) -> dict:
    """One GPU decoder in this process with every launch of its frame loop timed by CUDA events (1-best, or
    with `lattice` the options' lattice beam; the workload's utterances in one `decode_batch` call after a
    warm-up): milliseconds per kernel, launches and host reads per frame step, candidate arcs per second of
    the timed call (`KernelLog.report`, events included; with lattices also the lattice threads' CPU seconds),
    and the lanes' use. A profile, not a speed figure: the events add work to every launch.
    With `lanes` (the decoder's max_lanes and table_slots, as the throughput stream uses them) the call
    decodes as many copies of the utterances as one batch of that stream holds (`stream_repeats`: about eight
    a lane), so the profile sees the lanes as full as the stream keeps them; the report then names `lanes`
    and `repeats`. `backend="twin"` gives the same report without kernel times (the tests' stand-in for the
    GPU)."""
    chosen = with_lattice(options) if lattice else one_best(options)
    settings = {k: int(v) for k, v in (lanes or {}).items() if v}
    decoder = make_decoder(backend, workload.graph, chosen, **settings,
                           **({"timing": True} if backend == "gpu" else {}))
    repeats = stream_repeats(settings["max_lanes"], len(workload.items)) if "max_lanes" in settings else 1
    items = list(workload.items) * repeats
    decoder.decode_batch(items[:4])  # warm-up: kernels compiled, memory pool filled
    decoder.reset_counts()
    harness.say("decoder", f"gpu profile{' with lattices' if lattice else ''}: decoding {len(items)} utterances "
                f"with every launch timed{f' ({settings})' if settings else ''}")
    seconds, _ = harness.timed(lambda: decoder.decode_batch(items))
    report = {"seconds": seconds, **decoder.kernel_log.report(decoder.frame_steps, seconds),
              "lane_use": decoder_lane_use(decoder)}
    if lanes is not None:
        report.update(lanes=settings, repeats=repeats, utterances=len(items))
    return report


def _side_by_side(decoders: dict[str, Any], items: list, rounds: int) -> tuple[dict[str, float], bool]:
    """Each decoder decoding `items` in one call, alternating `rounds` times after a warm-up (counts reset
    before each call): the fastest seconds of each, and whether every decoder's results are the same."""
    for decoder in decoders.values():
        decoder.decode_batch(items[:4])  # warm-up: kernels compiled (graphs captured), memory pool filled
    seconds: dict[str, list[float]] = {mode: [] for mode in decoders}
    outcomes = {}
    for _ in range(rounds):
        for mode, decoder in decoders.items():
            decoder.reset_counts()
            took, results = harness.timed(lambda d=decoder: d.decode_batch(items))
            seconds[mode].append(took)
            outcomes[mode] = [outcome_of(r, len(m)) for r, (_, m) in zip(results, items)]
    first = next(iter(outcomes.values()))
    return {mode: min(times) for mode, times in seconds.items()}, all(o == first for o in outcomes.values())


def lane_refill_effect(workload: Workload, options: SearchOptions, backend: str = "gpu",
                       max_lanes: int | None = None, rounds: int = 2) -> dict:
    """What lane refill buys, side by side in one process: one decoder with lanes refilled as utterances end
    and one with length-sorted batches (`refill=False`), `max_lanes` lanes each (default: a quarter of the
    utterances, at most 256, so that each lane takes about four), each decoding the workload's utterances in
    one call (1-best), alternating `rounds` times after a warm-up. Seconds (the fastest round), frame steps
    and lane occupancy of each, the speedup of refill, and whether every result is the same."""
    items = list(workload.items)
    max_lanes = max_lanes or min(256, max(1, len(items) // 4))
    decoders = {mode: make_decoder(backend, workload.graph, one_best(options), max_lanes=max_lanes,
                                   refill=mode == "refill") for mode in ("refill", "batches")}
    harness.say("decoder", f"{backend}: {len(items)} utterances on {max_lanes} lanes, refilled and in batches, "
                           f"{rounds} rounds")
    seconds, identical = _side_by_side(decoders, items, rounds)
    report: dict[str, Any] = {"max_lanes": max_lanes, "rounds": rounds, "identical": identical}
    for mode, decoder in decoders.items():
        report[mode] = {"seconds": seconds[mode], **decoder_lane_use(decoder)}
    report["refill_speedup"] = report["batches"]["seconds"] / report["refill"]["seconds"]
    return report


def cuda_graphs_effect(workload: Workload, options: SearchOptions, lanes: tuple[int, ...] = (16, 256),
                       rounds: int = 2, backend: str = "gpu") -> dict:
    """What CUDA graphs buy, side by side in one process: for each lane count, one GPU decoder that launches a
    frame step's kernels one by one and one that replays them as a CUDA graph (`cuda_graphs=True`), each
    decoding the workload's utterances in one call (1-best), alternating `rounds` times after a warm-up.
    Seconds (the fastest round) of each, the speedup, launches and graph launches per frame step, the host's
    stages, and whether every result is the same. `backend="twin"` runs the harness with two twins (no
    graphs: the tests' stand-in for the GPU)."""
    items = list(workload.items)
    report: dict[str, Any] = {"rounds": rounds}
    for count in lanes:
        decoders = {mode: make_decoder(backend, workload.graph, one_best(options), max_lanes=count,
                                       **({"cuda_graphs": mode == "graphs"} if backend == "gpu" else {}))
                    for mode in ("launches", "graphs")}
        harness.say("decoder", f"{backend}: {len(items)} utterances on {count} lanes, with and without CUDA graphs, "
                               f"{rounds} rounds")
        seconds, identical = _side_by_side(decoders, items, rounds)
        entry: dict[str, Any] = {"identical": identical}
        for mode, decoder in decoders.items():
            log = decoder.kernel_log.report(decoder.frame_steps)
            entry[mode] = {"seconds": seconds[mode], "frame_steps": decoder.frame_steps,
                           "launches_per_frame": log["launches_per_frame"],
                           "graph_launches_per_frame": log["graph_launches"] / max(decoder.frame_steps, 1),
                           "host_seconds": log["host_seconds"]}
        entry["graphs_speedup"] = entry["launches"]["seconds"] / entry["graphs"]["seconds"]
        report[f"lanes_{count}"] = entry
    return report


def single_utterance_latency(workload: Workload, options: SearchOptions, backend: str = "gpu",
                             count: int = 20) -> dict:
    """Latency of one utterance decoded alone (a batch of one, 1-best) on one decoder after a warm-up: the
    `count` utterances nearest the median length, each timed; milliseconds (median, 90th percentile by
    nearest rank, most) and the median utterance's frames."""
    decoder = make_decoder(backend, workload.graph, one_best(options))
    items = sorted(workload.items, key=lambda item: len(item[1]))
    middle = len(items) // 2
    picked = items[max(middle - count // 2, 0):][:count]
    decoder.decode_batch(picked[:1])  # warm-up
    ms = sorted(harness.timed(lambda u=u, m=m: decoder.decode_batch([(u, m)]))[0] * 1e3 for u, m in picked)
    return {"utterances": len(ms), "median_frames": len(items[middle][1]), "median_ms": statistics.median(ms),
            "p90_nearest_rank_ms": ms[-(-9 * len(ms) // 10) - 1], "max_ms": ms[-1]}  # nearest rank: 90% at or below


def _register_one_at_a_time(name: str, backend: str,
                            options_of: Callable[[SearchOptions], SearchOptions]) -> None:
    """Register `name`: `backend` decoding one utterance after the other with `options_of(options)`."""
    def time_backend(workload: Workload, options: SearchOptions) -> Timed:
        return one_at_a_time(backend, name.replace("_", " "), workload, options_of(options))

    register(name)(time_backend)


for _name, _backend, _options_of in (("kaldi", "kaldi", one_best), ("cpu", "cpu", one_best),
                                     ("cpu_lattice", "cpu", with_lattice),
                                     ("cpu_numpy", "cpu_numpy", one_best)):
    _register_one_at_a_time(_name, _backend, _options_of)


@register("twin")
def time_twin(workload: Workload, options: SearchOptions) -> Timed:
    """All utterances as lanes, and what lane refill buys in frame steps and occupancy (`lane_refill`; the
    twin's seconds are numpy's, not the GPU's)."""
    timed = all_as_lanes("twin", workload, one_best(options))
    timed.extra["lane_refill"] = lane_refill_effect(workload, options, backend="twin", rounds=1)
    return timed


@register("twin_lattice")
def time_twin_lattice(workload: Workload, options: SearchOptions) -> Timed:
    """The twin with the lattice beam, all utterances as lanes: its `kernel_log` says what lattices cost the
    host beside the device work (`host_seconds` on the frame loop's thread, `lattice_thread_cpu_seconds` on the
    grouping and pruning threads, `read_bytes_per_frame`), the same host code the GPU backend runs."""
    return all_as_lanes("twin", workload, with_lattice(options))


def alternating_ratio(workload: Workload, options: SearchOptions, rounds: int,
                      lattices: bool = False) -> dict[str, object]:
    """Kaldi and the compiled CPU backend (and, with `lattices`, the compiled backend with lattices) timed one
    after the other `rounds` times over the workload (each decoder built and warmed once), so that a busy
    machine slows them alike: the per-round ratios of Kaldi's seconds to ours (`cpu_vs_kaldi_rounds`) and
    their median (`decoder.cpu_vs_kaldi_median`); with lattices also Kaldi's 1-best seconds to ours with
    lattices (`cpu_lattice_vs_kaldi_rounds`, `decoder.cpu_lattice_vs_kaldi_median`) and our lattice time
    over our 1-best time (`cpu_lattice_overhead_rounds`, `decoder.cpu_lattice_overhead_median`); each
    decoder's seconds in each round (`kaldi_round_seconds`, `cpu_round_seconds`, `cpu_lattice_round_seconds`),
    from which the ratios are computed."""
    one = one_best(options)
    decoders = {"kaldi": make_decoder("kaldi", workload.graph, one), "cpu": make_decoder("cpu", workload.graph, one)}
    if lattices:
        decoders["cpu_lattice"] = make_decoder("cpu", workload.graph, with_lattice(options))
    items = workload.items
    for decoder in decoders.values():
        decoder.decode(items[0][1], items[0][0])  # warm-up
    seconds: dict[str, list[float]] = {name: [] for name in decoders}
    for _ in range(rounds):
        for name, decoder in decoders.items():
            took, _ = harness.timed(lambda d=decoder: [d.decode(mat, utt_id) for utt_id, mat in items])
            seconds[name].append(took)
    out: dict[str, object] = {f"{name}_round_seconds": times for name, times in seconds.items()}
    pairs = [("cpu_vs_kaldi", "kaldi", "cpu")]
    if lattices:
        pairs += [("cpu_lattice_vs_kaldi", "kaldi", "cpu_lattice"), ("cpu_lattice_overhead", "cpu_lattice", "cpu")]
    for metric, numerator, denominator in pairs:
        ratios = [n / d for n, d in zip(seconds[numerator], seconds[denominator], strict=True)]
        out[f"{metric}_rounds"] = ratios
        out[f"decoder.{metric}_median"] = statistics.median(ratios)
    return out
