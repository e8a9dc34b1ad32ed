"""The one registry keyed by job kind: kind -> config class -> runner -> the headline metrics the nightly
compares. `specbench run`, `validate`, the nightly and the convenience verbs all read it.

A runner is named as "module:function" and imported only when a job of its kind runs, so that loading and
validating job files stays light. Every runner has the signature
`execute(config, job_path: Path, run: TrackedRun | None, options: RunOptions) -> list[str]` (summary lines).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specbench import config as cfg
from specbench.config import load_job_file


@dataclass(frozen=True)
class RunOptions:
    """Command-line options every job sees."""

    tracking_uri: str | None = None
    ray_address: str | None = None
    force: bool = False  # rebuild cached artifacts (the graph) even when their input hash matches
    device: str = "auto"  # where `train mt` trains: auto (a CUDA device when usable), cpu or cuda


@dataclass(frozen=True)
class JobKind:
    """What one job kind is: its config class, its runner and the headline metrics it logs that the
    nightly compares (every one needs a `[[tolerance]]` in the nightly file).

    `metrics_version` counts changes of what those metrics mean (raised together with `metrics_change`, which
    says why). Runs are tagged with it, and the nightly compares a run only with baselines of the same version:
    the first nightly after a change resets the baseline and logs `metrics_change` as the reason."""

    config: type
    runner: str  # "module:function"
    nightly_metrics: tuple[str, ...] = ()
    metrics_version: int = 1
    metrics_change: str = ""
    # "module:function" called as f(config, job_path) when the job is validated and before its run opens: the
    # checks that read models or data (a few seconds at most), beyond the loader's and `check_inputs`'
    preflight: str = ""

    @property
    def kind(self) -> str:
        return self.config.KIND  # type: ignore[attr-defined, no-any-return]

    def load_runner(self) -> Callable[..., Any]:
        module, function = self.runner.split(":")
        return getattr(importlib.import_module(module), function)  # type: ignore[no-any-return]


_EXP = "specbench.experiments"
_BENCH = "specbench.benchmarks"
_CTC_GRAPH = f"{_EXP}.job_refs:ctc_graph_preflight"  # graph_job must build the CTC TLG (`job_refs.ctc_graph_job`)
# What version 4 of the predictive metrics and version 2 of the confidence models' changed
PARTIAL_RULE_CHANGE = ("a partial hypothesis keeps its last word when the path's graph state reaches a final state "
                       "through word-free epsilon arcs (before: only when the state itself is final, which in "
                       "G holds only for histories with an explicit </s> n-gram), so partials lag less, the "
                       "confidence models are retrained on the new partials, and success, gain and prefetch "
                       "times change")
# Absolute times (graph.build_seconds, seconds of a benchmark) are left out of the nightly metrics on
# purpose: speed is judged by ratios measured within one run.
JOBS: dict[str, JobKind] = {job.kind: job for job in (
    JobKind(cfg.GraphConfig, f"{_EXP}.graph:execute",
            ("graph.states", "graph.arcs", "graph.ppl_test", "graph.test_unseen_rate"),
            preflight=f"{_EXP}.graph:preflight"),
    JobKind(cfg.SpeechConfig, f"{_EXP}.speech:execute", ("speech.utterances",),
            preflight=f"{_EXP}.job_refs:speech_preflight"),
    JobKind(cfg.TrainAmConfig, f"{_EXP}.train_am:execute", ("am.best_devel_per",), preflight=_CTC_GRAPH),
    JobKind(cfg.EvalAmConfig, f"{_EXP}.eval_am:execute", ("asr.wer", "asr.per_greedy"), preflight=_CTC_GRAPH),
    JobKind(cfg.RealSpeechConfig, f"{_EXP}.real_speech.job:execute", ("asr.real.wer",),
            preflight=f"{_EXP}.job_refs:hclg_graph_preflight",
            metrics_version=3,
            metrics_change="the Asterisk references leave out descriptions in (...) and <...> too, as in [...]: "
                           "the ten silences and two beeps are not speech, and 29 never-spoken words of the test "
                           "half's 1,574 are gone (266 test and 285 tune prompts), so every Asterisk WER changes "
                           "(version 2: pocketsphinx's weight in all its passes, a fresh decoder per utterance)"),
    JobKind(cfg.WordConfidenceConfig, f"{_EXP}.word_confidence:execute",
            preflight=f"{_EXP}.job_refs:scores_job_graph_preflight",
            metrics_version=2,
            metrics_change="a run of repeated 1-best words shares one window and its j-th word gets the mass of "
                           "paths with at least j copies (before: each copy its own window), so NCE, AUC and "
                           "calibration can change where the 1-best repeats a word"),
    JobKind(cfg.TrainMtConfig, f"{_EXP}.train_mt:execute", preflight=f"{_EXP}.job_refs:bpe_model_preflight"),
    JobKind(cfg.SimultransConfig, f"{_EXP}.simultrans:execute", ("simul.bleu_full_pooled", "simul.speculation_gain_bleu"),
            metrics_version=5,
            metrics_change="the ranking ablation's scalars (simul.sbs_gain_bleu_*_ranking, "
                           "simul.sbs_length_ratio_*_ranking) are the four test sets pooled (before: "
                           "test_2016_flickr alone, now simul.test_2016_flickr.sbs_...), and the adaptive curves "
                           "and the ablation are decoded on every test set; version 4 made test-time wait-k "
                           "decode the committed prefix again over each new source view; the headline's figures "
                           "unchanged"),
    JobKind(cfg.TrainLmConfig, f"{_EXP}.train_lm:execute", ("lm.test_perplexity",)),
    JobKind(cfg.TrainConfidenceConfig, f"{_EXP}.train_confidence:execute",
            metrics_version=2,
            metrics_change=PARTIAL_RULE_CHANGE,
            preflight=f"{_EXP}.predictive_asr.checks:train_confidence_preflight"),
    JobKind(cfg.PredictiveAsrConfig, f"{_EXP}.predictive_asr.job:execute",
            ("prefetch.success_at_fail10", "prefetch.gain_ms_all_at_fail10", "prefetch.oracle_rate"),
            metrics_version=4,
            metrics_change=PARTIAL_RULE_CHANGE + "; version 3 (usage simulation 3) made one-offs other speakers' "
                           "texts only, version 2 made one-offs new to the user, rendered every request anew "
                           "and gave each split its own random streams",
            preflight=f"{_EXP}.predictive_asr.checks:preflight"),
    JobKind(cfg.NightlyConfig, f"{_EXP}.nightly:run_nightly"),
    JobKind(cfg.BenchGraphConfig, f"{_BENCH}.graph:execute",
            metrics_version=2,
            metrics_change="the loaders are timed alternately in --rounds rounds (3): times are medians over "
                           "rounds and speedups the medians of the per-round ratios (before: the median of 5 "
                           "CSR loads against one kaldifst arc walk timed after them)"),
    JobKind(cfg.BenchAcousticConfig, f"{_BENCH}.acoustic:execute", preflight=f"{_BENCH}.acoustic:preflight",
            metrics_version=2,
            metrics_change="CPU and CUDA inference are timed alternately in --rounds rounds (3): real-time "
                           "factors are medians over rounds and speedup_cuda_vs_cpu the median of the "
                           "per-round ratios (before: one pass of each, one after the other)"),
    JobKind(cfg.BenchDecoderConfig, f"{_BENCH}.decoder.bench:execute",
            ("decoder.onebest_identical", "decoder.cpu_vs_kaldi_median", "decoder.lattice_density")),
    JobKind(cfg.BenchSimultransConfig, f"{_BENCH}.simultrans:execute",
            metrics_version=2,
            metrics_change="batched, one sentence at a time and the whole set are timed alternately in "
                           "--rounds rounds (3): times are medians over rounds and simul.batched_speedup the "
                           "median of the per-round ratios (before: one pass of each, one after the other)"),
    JobKind(cfg.BenchCompletionConfig, f"{_BENCH}.completion:execute",
            metrics_version=2,
            metrics_change="the searches are timed alternately in --rounds rounds (3): times are medians over "
                           "rounds and speedups the medians of the per-round ratios (before: one pass of each, "
                           "the CPU search on a GPU machine timed cold), so speedup_gpu_vs_cpu_batched no longer "
                           "counts the CPU's warm-up"),
)}
# Compared when a run has them and the nightly file gives a tolerance (they need hardware CI lacks).
OPTIONAL_NIGHTLY_METRICS: tuple[str, ...] = ("decoder.speedup_vs_kaldi",)


def load_config(path: Path) -> Any:
    """Load a job or suite file into its frozen config (`GraphConfig`, ..., `SuiteConfig`)."""
    return load_job_file(path, {kind: job.config for kind, job in JOBS.items()})


def job_kind(kind: str) -> JobKind:
    """The registry entry of `kind` (KeyError for an unknown kind: load_config has refused it already)."""
    return JOBS[kind]


def preflight(path: Path, config: Any) -> None:
    """The job's `preflight` checks (see `JobKind`), or those of every job of a suite or nightly file."""
    from specbench.config.loader import member_jobs

    for job_path, job_config in member_jobs(Path(path), config, load_config):
        kind = JOBS.get(type(job_config).KIND)  # None: a suite listed in a nightly, which the nightly refuses
        checks = kind.preflight if kind else ""
        if checks:
            module, function = checks.split(":")
            getattr(importlib.import_module(module), function)(job_config, job_path)
