"""What the decoder benchmark compares, and the `decoder.*` metrics (DESIGN.md's names) it reports.

`Outcome`: the comparable part of one decoded utterance; `Timed`: one backend's (or GPU configuration's)
decode time with its outcomes, in the order of the workload's utterances. `agree` / `agreement`: 1-best
agreement between two backends; `summary_metrics`: speed ratios, lattice density and agreement, under the
names the result JSON, the nightly and the README use.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

COST_TOLERANCE = 1e-3
MAX_LISTED_MISMATCHES = 20


class Outcome(NamedTuple):
    """The comparable part of one decoded utterance: found a hypothesis, its word ids and total cost,
    frames where max_active bound, lattice arcs (None without a lattice), frames decoded."""

    ok: bool
    word_ids: tuple[int, ...]
    total_cost: float
    max_active_binds: int
    lattice_arcs: int | None
    num_frames: int


@dataclass
class Timed:
    """seconds: wall time of the decoding (float, s); outcomes: one per utterance, in the workload's order;
    extra: what else a run reports (the GPU runs: peak device memory in bytes; the lane backends:
    `lane_use`)."""

    seconds: float
    outcomes: list[Outcome]
    extra: dict[str, Any]


def lane_use(frame_steps: int, lane_frames: int, max_lanes: int) -> dict[str, Any]:
    """How busy a lane decoder's lanes were: frame steps the kernels ran (every batch runs as many as its
    longest utterance), frames of the utterances decoded, and their ratio to frame steps x max_lanes (1.0:
    every lane busy at every step)."""
    return {"frame_steps": frame_steps, "lane_frames": lane_frames, "max_lanes": max_lanes,
            "occupancy": lane_frames / (frame_steps * max_lanes) if frame_steps else None}


def decoder_lane_use(decoder: Any) -> dict[str, Any]:
    """`lane_use` of a lane decoder's counts since its last `reset_counts()`."""
    return lane_use(decoder.frame_steps, decoder.lane_frames, decoder.max_lanes)


def outcome_of(result: Any, num_frames: int) -> Outcome:
    """An Outcome from a DecodeResult (any backend's)."""
    lattice = getattr(result, "lattice", None)
    stats = getattr(result, "stats", None)
    return Outcome(bool(result.ok), tuple(int(w) for w in result.word_ids), float(result.total_cost),
                   int(getattr(stats, "max_active_binds", 0) or 0),
                   None if lattice is None else int(lattice.num_arcs), int(num_frames))


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


def summary_metrics(runs: dict[str, Timed], gpu_runs: dict[str, Timed], ids: list[str],
                    audio_s: float) -> dict[str, Any]:
    """The `decoder.*` metrics and their companions from the timed runs: `runs` by backend name (kaldi,
    cpu, cpu_lattice, twin), `gpu_runs` by configuration (gpu4, gpu4_lattice, ...); `ids` the utterance ids,
    `audio_s` the seconds of audio decoded."""
    onebest_gpu = {k: t for k, t in gpu_runs.items() if not k.endswith("_lattice")}
    lattice_gpu = {k: t for k, t in gpu_runs.items() if k.endswith("_lattice")}
    out = _speed(runs, onebest_gpu, lattice_gpu, audio_s)
    out.update(_stream_speed(runs, onebest_gpu, lattice_gpu))
    out.update(_density(runs, lattice_gpu))
    if "cpu" in runs or "cpu_numpy" in runs:
        out.update(_agreement_with_cpu(runs, gpu_runs, ids))
    if "kaldi" in runs:
        out["kaldi_failed_utterances"] = sum(not o.ok for o in runs["kaldi"].outcomes)
    return out


def _fastest(timed: dict[str, Timed]) -> str:
    return min(timed, key=lambda k: timed[k].seconds)


def _speed(runs: dict[str, Timed], onebest_gpu: dict[str, Timed], lattice_gpu: dict[str, Timed],
           audio_s: float) -> dict[str, Any]:
    """Real-time factors and speed ratios: decoder.rtfx (the fastest GPU configuration, else the CPU
    backend), decoder.speedup_vs_kaldi, decoder.cpu_vs_kaldi, decoder.twin_vs_kaldi, lattice overheads."""
    out: dict[str, Any] = {}
    kaldi, cpu = runs.get("kaldi"), runs.get("cpu")
    if onebest_gpu:
        best = _fastest(onebest_gpu)
        out["decoder.rtfx"] = audio_s / onebest_gpu[best].seconds
        out["decoder.rtfx_backend"] = best
        if kaldi:
            out["decoder.speedup_vs_kaldi"] = kaldi.seconds / onebest_gpu[best].seconds
    elif cpu:
        out["decoder.rtfx"] = audio_s / cpu.seconds
        out["decoder.rtfx_backend"] = "cpu"
    if lattice_gpu:
        best = _fastest(lattice_gpu)
        out["decoder.lattice_rtfx"] = audio_s / lattice_gpu[best].seconds
        if kaldi:
            out["decoder.lattice_speedup_vs_kaldi"] = kaldi.seconds / lattice_gpu[best].seconds
    elif "cpu_lattice" in runs:
        out["decoder.lattice_rtfx"] = audio_s / runs["cpu_lattice"].seconds
    if kaldi and cpu:
        out["decoder.cpu_vs_kaldi"] = kaldi.seconds / cpu.seconds
    if kaldi and "twin" in runs:
        out["decoder.twin_vs_kaldi"] = kaldi.seconds / runs["twin"].seconds
    if kaldi and "cpu_numpy" in runs:
        out["decoder.cpu_numpy_vs_kaldi"] = kaldi.seconds / runs["cpu_numpy"].seconds
    if cpu and "cpu_numpy" in runs:
        out["cpu_vs_cpu_numpy"] = runs["cpu_numpy"].seconds / cpu.seconds
    if cpu and "cpu_lattice" in runs:
        out["cpu_lattice_overhead"] = runs["cpu_lattice"].seconds / cpu.seconds
    for key, t in lattice_gpu.items():
        plain = onebest_gpu.get(key.removesuffix("_lattice"))
        if plain:
            out[f"{key}_overhead"] = t.seconds / plain.seconds
    return out


def _frames_per_second(t: Timed) -> float:
    return sum(o.num_frames for o in t.outcomes) / t.seconds


def _stream_speed(runs: dict[str, Timed], onebest_gpu: dict[str, Timed],
                  lattice_gpu: dict[str, Timed]) -> dict[str, Any]:
    """Steady-state GPU throughput (the configurations' streams) against one core's pass over the workload,
    frames per second against frames per second: decoder.stream_frames_per_second of the fastest 1-best
    configuration (decoder.stream_backend), decoder.stream_speedup_vs_kaldi and _vs_cpu, the same for the
    lattice configurations (decoder.stream_lattice_*), decoder.stream_lattice_fraction (the fastest lattice
    stream over the fastest 1-best one) and decoder.stream_repeat_identical (the lowest share of repeated
    1-bests equal to the first pass's)."""
    out: dict[str, Any] = {f"{k}_frames_per_second": _frames_per_second(runs[k])
                           for k in ("kaldi", "cpu", "cpu_lattice") if k in runs}
    streams = {k: t.extra["stream"] for k, t in {**onebest_gpu, **lattice_gpu}.items()
               if t.extra.get("stream", {}).get("frames_per_second")}
    for prefix, gpu in (("stream", onebest_gpu), ("stream_lattice", lattice_gpu)):
        fps = {k: streams[k]["frames_per_second"] for k in gpu if k in streams}
        if not fps:
            continue
        best = max(fps, key=lambda k: fps[k])
        out[f"decoder.{prefix}_frames_per_second"], out[f"decoder.{prefix}_backend"] = fps[best], best
        for ref in ("kaldi", "cpu"):
            if ref in runs:
                out[f"decoder.{prefix}_speedup_vs_{ref}"] = fps[best] / out[f"{ref}_frames_per_second"]
    if "decoder.stream_frames_per_second" in out and "decoder.stream_lattice_frames_per_second" in out:
        out["decoder.stream_lattice_fraction"] = (out["decoder.stream_lattice_frames_per_second"]
                                                  / out["decoder.stream_frames_per_second"])
    identical = [s["repeat_identical"] for s in streams.values() if s["repeat_identical"] is not None]
    if identical:
        out["decoder.stream_repeat_identical"] = min(identical)
    return out


def _lattice_density(t: Timed) -> float | None:
    """Lattice arcs per frame over the utterances that have a lattice (None without any)."""
    arcs = [o.lattice_arcs for o in t.outcomes if o.lattice_arcs is not None]
    counted = sum(o.num_frames for o in t.outcomes if o.lattice_arcs is not None)
    return sum(arcs) / counted if arcs and counted else None


def _density(runs: dict[str, Timed], lattice_gpu: dict[str, Timed]) -> dict[str, Any]:
    """cpu_lattice_density, gpu_lattice_density and decoder.lattice_density (the GPU's, else the CPU's)."""
    out: dict[str, Any] = {}
    if "cpu_lattice" in runs:
        out["cpu_lattice_density"] = _lattice_density(runs["cpu_lattice"])
    if lattice_gpu:
        out["gpu_lattice_density"] = _lattice_density(next(iter(lattice_gpu.values())))
    lattice_density = out.get("gpu_lattice_density", out.get("cpu_lattice_density"))
    if lattice_density is not None:
        out["decoder.lattice_density"] = lattice_density
    return out


def _agreement_with_cpu(runs: dict[str, Timed], gpu_runs: dict[str, Timed], ids: list[str]) -> dict[str, Any]:
    """1-best agreement with the CPU backend (`runs["cpu"]`; the numpy reference `cpu_numpy` where the
    compiled one did not run): Kaldi's (words only), the compiled and numpy backends' with each other, the
    twin's and every GPU configuration's (words and costs); decoder.onebest_identical is the lowest GPU
    configuration's (the twin's without a GPU), split by whether max_active bound; `mismatches` lists
    disagreeing ids."""
    cpu = runs.get("cpu") or runs["cpu_numpy"]
    bound = [o.max_active_binds > 0 for o in cpu.outcomes]
    out: dict[str, Any] = {"decoder.max_active_bound_utterances": sum(bound),
                           "decoder.max_active_free_utterances": len(bound) - sum(bound)}
    mismatches: dict[str, list[str]] = {}
    if "kaldi" in runs:
        a = agreement(cpu.outcomes, runs["kaldi"].outcomes, ids, bound, costs=False)
        out["decoder.cpu_kaldi_identical"] = a["all"]
        out["decoder.cpu_kaldi_identical_max_active_bound"] = a["bound"]
        out["decoder.cpu_kaldi_identical_max_active_free"] = a["free"]
        mismatches["cpu_vs_kaldi"] = a["mismatches"]
    compared = dict(gpu_runs, **{k: runs[k] for k in ("twin", "cpu_numpy")
                                 if k in runs and runs[k] is not cpu})
    per_run = {k: agreement(t.outcomes, cpu.outcomes, ids, bound) for k, t in compared.items()}
    for k, a in per_run.items():
        out[f"{k}_onebest_identical"] = a["all"]
        mismatches[f"{k}_vs_cpu"] = a["mismatches"]
    headline = {k: a for k, a in per_run.items() if k != "cpu_numpy" and (k != "twin") == bool(gpu_runs)}
    if headline:
        worst = min(headline, key=lambda k: headline[k]["all"])
        out["decoder.onebest_identical"] = headline[worst]["all"]
        out["decoder.onebest_identical_max_active_bound"] = headline[worst]["bound"]
        out["decoder.onebest_identical_max_active_free"] = headline[worst]["free"]
        out["decoder.onebest_compared"] = (f"gpu: the lowest of {', '.join(sorted(headline))} ({worst})"
                                           if gpu_runs else "twin (no GPU)")
    if "cpu_lattice" in runs:
        out["cpu_lattice_onebest_identical"] = agreement(runs["cpu_lattice"].outcomes, cpu.outcomes, ids,
                                                         bound)["all"]
    if mismatches:
        out["mismatches"] = mismatches
    others = ((k, v) for k, v in runs.items() if k in ("twin", "cpu_lattice", "cpu_numpy"))
    for name, t in (("cpu", cpu), *others, *gpu_runs.items()):
        out[f"{name}_failed_utterances"] = sum(not o.ok for o in t.outcomes)
    return out
