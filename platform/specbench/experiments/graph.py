"""The `graph` job: build the SLURP TLG or the Sphinx HCLG (`graph_recipe`, `sphinx_graph_recipe`) and log its
statistics."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from specbench.config import GraphConfig
from specbench.errors import ConfigError
from specbench.experiments.graph_recipe import GraphArtifacts, build_graph
from specbench.experiments.registry import RunOptions
from specbench.experiments.sphinx_graph_recipe import SphinxGraphStats
from specbench.experiments.stage_clock import stage_printer

if TYPE_CHECKING:
    from specbench.tracking.runs import TrackedRun


def preflight(config: GraphConfig, job_path: Path) -> None:
    """The graph job's preflight (`registry.JobKind.preflight`): the CTC recipe's espeak-ng voice, which
    pronounces the words CMUdict lacks, must be an English voice that espeak-ng has (it would fall back to
    another voice silently, or give phonemes the lexicon cannot map). Without espeak-ng the build says so."""
    import shutil

    from specbench.data.voices import espeak_voice_problem

    voice = config.lexicon.espeak_voice
    if config.recipe != "ctc_tlg" or shutil.which("espeak-ng") is None:
        return
    problem = espeak_voice_problem(voice) or (None if voice.partition("+")[0].split("-")[0] == "en" else (
        "not an English voice (the lexicon maps espeak-ng's English phonemes to CMUdict's)"))
    if problem is not None:
        raise ConfigError(f"{job_path}: key 'lexicon.espeak_voice' = {voice!r}: {problem}. Fix: name an English "
                          "espeak-ng voice, e.g. \"en-us\" (`espeak-ng --voices=en` lists them).")


def run_graph(config: GraphConfig, run: TrackedRun | None, force: bool = False) -> GraphArtifacts:
    """Build or reuse the graph; log `graph.*` metrics and small artifacts to `run` when given."""
    art = build_graph(config, step=stage_printer("graph"), force=force)
    if run is not None:
        run.log_metrics({f"graph.{k}": v for k, v in art.stats.metrics().items()})
        run.set_tags({"graph_dir": str(art.directory), "graph_reused": str(art.reused).lower()})
        for name in ("stats.json", "tokens.txt", "phones.txt", "words.txt", "lexicon.txt"):
            if (art.directory / name).is_file():
                run.log_artifact(art.directory / name, "graph")
    return art


def _sphinx_summary(art: GraphArtifacts) -> list[str]:
    s = art.stats
    return [
        f"graph {art.directory} ({'reused, built before in' if art.reused else 'built in'} "
        f"{s.build_seconds:.1f} s, peak {s.peak_rss_gb:.1f} GB)",
        f"  HCLG: {s.states:,} states, {s.arcs:,} arcs ({s.epsilon_arcs:,} epsilon); {s.context_windows:,} "
        f"triphone windows ({s.context_windows_backed_off:,} backed off), {s.entry_labels:,} HMM-state labels",
        f"  LM: n-grams {', '.join(f'{c:,}' for c in s.ngrams)} (from {', '.join(f'{c:,}' for c in s.ngrams_before)}); "
        f"vocabulary {s.vocabulary:,} ({s.words_without_pronunciation:,} without a pronunciation)",
        f"  perplexity Asterisk {s.ppl_asterisk:.1f} (OOV {s.oov_rate_asterisk:.1%}), LibriVox "
        f"{s.ppl_librivox:.1f} (OOV {s.oov_rate_librivox:.1%})",
        f"  stages{' of that build' if art.reused else ''}: "
        + ", ".join(f"{k} {v:.0f} s" for k, v in s.stage_seconds.items()),
    ]


def summary(art: GraphArtifacts) -> list[str]:
    s = art.stats
    if isinstance(s, SphinxGraphStats):
        return _sphinx_summary(art)
    return [
        f"graph {art.directory} ({'reused' if art.reused else f'built in {s.build_seconds:.1f} s'})",
        f"  TLG: {s.states:,} states, {s.arcs:,} arcs ({s.epsilon_arcs:,} epsilon)",
        f"  vocabulary {s.vocabulary:,} words ({s.vocabulary_train:,} in the LM text, "
        f"{s.lexicon_from_espeak:,} pronounced by espeak-ng)",
        f"  {len(s.ngrams)}-gram LM: n-grams {', '.join(f'{c:,}' for c in s.ngrams)}; perplexity devel "
        f"{s.ppl_devel:.1f}, test {s.ppl_test:.1f}; test tokens unseen in training {s.test_unseen_rate:.1%}"
        + (f"; OOVs left out: devel {s.devel_tokens_oov:,}, test {s.test_tokens_oov:,}"
           if s.devel_tokens_oov or s.test_tokens_oov else ""),
    ]


def execute(config: Any, path: Path, run: TrackedRun | None, opts: RunOptions) -> list[str]:
    """The job's runner (see `experiments.registry`): run it, return the summary lines."""
    return summary(run_graph(config, run, force=opts.force))
