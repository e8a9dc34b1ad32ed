"""Run a job or a suite: load and validate, open one MLflow run per job, run it, print a summary."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specbench.config import SuiteConfig, config_kind, config_to_dict, flatten, load_config
from specbench.tracking.runs import TrackedRun


@dataclass(frozen=True)
class RunOptions:
    """Command-line options every job sees."""

    tracking_uri: str | None = None
    ray_address: str | None = None
    force: bool = False  # rebuild cached artifacts (the graph) even when their input hash matches
    device: str = "auto"  # where `train mt` trains: auto (a CUDA device when usable), cpu or cuda


def _graph(config: Any, path: Path, run: TrackedRun, opts: RunOptions) -> list[str]:
    from specbench.pipelines import graph

    return graph.summary(graph.run_graph(config, run, force=opts.force))


def _speech(config: Any, path: Path, run: TrackedRun, opts: RunOptions) -> list[str]:
    from specbench.pipelines import speech

    return speech.summary(speech.build_corpus(config, run, opts.ray_address, path))


def _train_am(config: Any, path: Path, run: TrackedRun, opts: RunOptions) -> list[str]:
    from specbench.pipelines import train_am

    card = train_am.run_train_am(config, path, run, opts.ray_address)
    return [f"acoustic model {train_am.output_path(config)}: {card['parameters']:,} parameters, best devel PER "
            f"{card['best_devel_per']:.3f} at epoch {card['best_epoch']} ({card['stopped_because']})"]


def _eval_am(config: Any, path: Path, run: TrackedRun, opts: RunOptions) -> list[str]:
    from specbench.pipelines import acoustic_eval

    m = acoustic_eval.run_eval_am(config, path, run, opts.ray_address)
    lines = [f"acoustic model {config.checkpoint}: test WER {m['asr.wer']:.3f} (acoustic scale "
             f"{m['asr.acoustic_scale']}, devel WER {m['asr.devel_wer']:.3f}), greedy PER {m['asr.per_greedy']:.3f}"]
    for prefix, without in (("asr.no_speaker_transform", "speaker transform"), ("asr.no_vtln", "VTLN")):
        if f"{prefix}.wer" in m:
            lines.append(f"  without {without}: test WER {m[f'{prefix}.wer']:.3f}, "
                         f"greedy PER {m[f'{prefix}.per_greedy']:.3f}")
    shown = ("asr.wer.", "asr.no_vtln.wer.", "asr.no_speaker_transform.wer.", "asr.vtln_warp.")
    lines += [f"  {k}: {v:.4g}" for k, v in sorted(m.items())
              if k.startswith(shown) or "real" in k or "unseen" in k or "in_lm_text" in k]
    return lines


def _train_mt(config: Any, path: Path, run: TrackedRun, opts: RunOptions) -> list[str]:
    from specbench.pipelines import train_mt

    return train_mt.summary(config, train_mt.run_train_mt(config, path, run, opts.device))


def _simultrans(config: Any, path: Path, run: TrackedRun, opts: RunOptions) -> list[str]:
    from specbench.pipelines import simultrans

    return simultrans.summary(simultrans.run_simultrans(config, path, run, opts.ray_address))


def _bench_decoder(config: Any, path: Path, run: TrackedRun, opts: RunOptions) -> list[str]:
    from specbench.config import GraphConfig
    from specbench.paths import project_root
    from specbench.pipelines.bench_decoder import bench_decoder
    from specbench.pipelines.refs import referenced_job
    from specbench.wfst.build import build_graph

    graph = build_graph(referenced_job(path, "graph_job", config.graph_job, GraphConfig))
    scores = config.scores if config.scores.is_absolute() else project_root() / config.scores
    result = bench_decoder(graph.tlg, scores, config.utterances, config.beam, config.max_active,
                           config.lattice_beam, gpu_decoders=config.gpu_decoders)
    run.log_metrics({k if k.startswith("decoder.") else f"bench.decoder.{k}": float(v) for k, v in result.items()
                     if isinstance(v, (int, float)) and not isinstance(v, bool)})
    run.log_dict(result, "bench_decoder.json")
    return [f"decoder benchmark on {result['utterances']} utterances: 1-best identical "
            f"{result.get('decoder.onebest_identical', float('nan')):.3f}, CPU backend "
            f"{result.get('decoder.cpu_vs_kaldi', float('nan')):.2f}x Kaldi, GPU {result['gpu']}"]


def _train_lm(config: Any, path: Path, run: TrackedRun, opts: RunOptions) -> list[str]:
    from specbench.paths import project_root
    from specbench.pipelines import train_lm

    out = config.output if config.output.is_absolute() else project_root() / config.output
    return train_lm.summary(train_lm.run_train_lm(config, run), out)


def _train_confidence(config: Any, path: Path, run: TrackedRun, opts: RunOptions) -> list[str]:
    from specbench.pipelines import train_confidence

    return train_confidence.summary(train_confidence.run_train_confidence(config, path, run, opts.ray_address))


def _predictive_asr(config: Any, path: Path, run: TrackedRun, opts: RunOptions) -> list[str]:
    from specbench.pipelines import predictive_asr

    return predictive_asr.summary(predictive_asr.run_predictive_asr(config, path, run, opts.ray_address))


RUNNERS: dict[str, Callable[[Any, Path, TrackedRun, RunOptions], list[str]]] = {
    "graph": _graph,
    "speech": _speech,
    "train_am": _train_am,
    "eval_am": _eval_am,
    "train_mt": _train_mt,
    "simultrans": _simultrans,
    "bench_decoder": _bench_decoder,
    "train_lm": _train_lm,
    "train_confidence": _train_confidence,
    "predictive_asr": _predictive_asr,
}


def run_job(path: Path, config: Any, opts: RunOptions, suite: str | None,
            extra_tags: dict[str, str] | None = None) -> tuple[list[str], str]:
    """Run one loaded job in its own MLflow run; returns (summary lines, run id)."""
    kind = config_kind(config)
    tags = {"kind": kind, "job_file": str(path), **(extra_tags or {})}
    if suite:
        tags["suite"] = suite
    with TrackedRun(config.tracking.experiment, f"{kind}-{config.name}", opts.tracking_uri, tags) as run:
        resolved = config_to_dict(config)
        run.log_params(flatten(resolved))
        run.log_dict(resolved, "config.resolved.json")
        run.log_artifact(path, "config")
        lines = RUNNERS[kind](config, path, run, opts)
        lines.append(f"  MLflow run {run.run_id} in experiment '{config.tracking.experiment}' ({run.tracking_uri})")
        return lines, run.run_id


def run_file(path: Path, opts: RunOptions = RunOptions()) -> list[str]:
    """Run a job or suite file; returns the summary lines. Raises on the first failing job."""
    path = Path(path)
    config = load_config(path)
    if isinstance(config, SuiteConfig):
        jobs = [(job, load_config(job)) for job in config.jobs]  # validate every job before running any
        lines = []
        for job, job_config in jobs:
            lines += run_job(job, job_config, opts, suite=config.name)[0]
        return lines
    if config_kind(config) == "nightly":
        from specbench.pipelines.nightly import run_nightly

        return run_nightly(path, config, opts)
    return run_job(path, config, opts, suite=None)[0]
