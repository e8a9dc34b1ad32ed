"""Outputs that end before the source is read, and what forbidding it (`force_finish`) does to the gains.

Wait-k greedy search, the tail beam and speculative beam search write `</s>` whenever argmax or the best
speculation picks it, even with part of the source unread; such an output stops waiting early, which lowers its
AL and LAAL without its having translated more. This ablation decodes the shipped wait-k model
(`waitk_model` of the job file) on every test set of the job at its `grid_k`, with the settings the committed
job results chose on val (`chosen_on_val.waitk`: ranking, beam b, window w), by greedy, tail beam and SBS,
each as shipped and with `force_finish` (`</s>` masked while fewer than |x| source tokens are visible), and
scores everything with the job's own functions (`SplitEvaluator`, `PooledEvaluator`: sacreBLEU, LAAL and AL
with the reference length in source words, the paired bootstrap of the gains). Per test set and pooled it
writes, for each search with and without force_finish: BLEU, the latencies, `ended_before_source` (the share
of outputs that ended before the source was read) and `empty_outputs`; the decomposition of the gain
(speculation = SBS - tail beam, SBS - greedy, tail - greedy) both ways; and what force_finish itself changes
per search (forced minus shipped). A reported ablation: the shipped settings and the headline stay as they are.

    python scripts/sbs_ended_early.py [--job jobs/simultrans.toml]
        [--settings benchmarks/results/simultrans_job_cpu.json]
        [--out benchmarks/results/simultrans_force_finish_cpu.json] [--sentences N] [--samples N]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "platform"))
sys.path.insert(0, str(ROOT / "scripts"))

from results_file import rounded, write_results

from specbench.errors import ConfigError, SpecbenchError
from specbench.experiments.registry import load_config
from specbench.experiments.simultrans import SEARCHES, waitk_methods
from specbench.experiments.simultrans_sets import PooledEvaluator, ScoredSet, SplitEvaluator
from specbench.hardware import describe
from specbench.paths import from_root
from specbench.simultrans.experiment import Method, bleu_signature
from specbench.tracking.runs import git_commit

SCORES = ("bleu", "laal_words", "al_ref_words", "al_words", "ended_before_source", "empty_outputs", "length_ratio",
          "brevity_penalty")
COMPARISON = ("gain", "low", "high", "no_win_share", "laal_increase", "al_ref_increase")
# the sets decoded with this model and these settings before the pooled headline was declared
# (benchmarks/results/simultrans_job_before_protocol_cpu.json; docs/translation.md, "Protocol")
SETS_SEEN_BEFORE_PROTOCOL = ["test_2016_flickr", "test_2017_flickr"]


def chosen_settings(path: Path) -> tuple[int, tuple[bool, int, int]]:
    """(grid_k, (length_normalized, beam, window)) of the wait-k model from the committed job results."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        chosen = data["chosen_on_val"]["waitk"]
        return int(data["grid_k"]), (bool(chosen["length_normalized"]), int(chosen["beam"]), int(chosen["window"]))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ConfigError(f"{path}: cannot read grid_k and chosen_on_val.waitk (length_normalized, beam, window): "
                          f"{exc!r}. Fix: give the committed results of a full simultrans run "
                          "(scripts/write_simultrans_results.py writes them)") from exc


def section(evaluator: ScoredSet, methods: dict[bool, dict[str, Method]], samples: int) -> dict[str, Any]:
    """One test set (or the pooled one): scores and decomposition with and without force_finish."""
    out: dict[str, Any] = {"sentences": len(evaluator.references)}
    for forced, label in ((False, "shipped"), (True, "force_finish")):
        out[label] = {"scores": {search: {m: evaluator(methods[forced][search])[m] for m in SCORES}
                                 for search in SEARCHES},
                      "decomposition": {name: {m: c[m] for m in COMPARISON}
                                        for name, c in evaluator.decomposition(methods[forced], samples).items()}}
    out["force_finish_minus_shipped"] = {
        search: {m: c[m] for m in COMPARISON}
        for search, c in ((s, evaluator.compare(methods[True][s], methods[False][s], samples)) for s in SEARCHES)}
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--job", type=Path, default=ROOT / "jobs" / "simultrans.toml")
    parser.add_argument("--settings", type=Path, default=ROOT / "benchmarks" / "results" / "simultrans_job_cpu.json")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "simultrans_force_finish_cpu.json")
    parser.add_argument("--sentences", type=int, default=0, help="the first N sentences of each test set (0: all)")
    parser.add_argument("--samples", type=int, default=0, help="bootstrap resamples (0: the job's)")
    args = parser.parse_args()
    start = time.perf_counter()
    try:
        config = load_config(args.job)
        k, chosen = chosen_settings(args.settings)
        model, bpe = str(from_root(config.waitk_model)), from_root(config.bpe_model)
        for path in (Path(model), bpe):
            if not path.is_file():
                raise ConfigError(f"{path} does not exist. Fix: train the models first (`specbench train mt "
                                  "jobs/mt_waitk.toml`) or name them in the job file")
        samples = args.samples or config.bootstrap_samples
        from specbench.runtime import connect

        connect(None)
        tests = [SplitEvaluator(config, split, args.sentences, bpe) for split in config.test_splits]
        pooled = PooledEvaluator(tests)
        shipped = waitk_methods(model, k, chosen)
        methods = {False: shipped, True: {s: replace(m, force_finish=True) for s, m in shipped.items()}}
        sets = {"pooled": section(pooled, methods, samples)}  # decodes every set in one round per method
        sets.update({t.split: section(t, methods, samples) for t in tests})
    except SpecbenchError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    normalized, beam, window = chosen
    command = "python scripts/sbs_ended_early.py" + "".join(
        f" --{name} {value}" for name, value in (("sentences", args.sentences), ("samples", args.samples)) if value)
    out = {
        "script": "scripts/sbs_ended_early.py", "command": command, "hardware": describe(),
        "git_commit": git_commit(ROOT), "wall_minutes": round((time.perf_counter() - start) / 60, 2),
        "job": str(args.job.relative_to(ROOT) if args.job.is_relative_to(ROOT) else args.job),
        "settings_from": str(args.settings.relative_to(ROOT) if args.settings.is_relative_to(ROOT) else args.settings),
        "model": str(config.waitk_model), "k": k,
        "chosen_on_val": {"length_normalized": normalized, "beam": beam, "window": window},
        "bleu_signature": bleu_signature(), "bootstrap_samples": samples,
        "test_sentences": {t.split: len(t.pairs) for t in tests},
        "sets_seen_before_protocol": SETS_SEEN_BEFORE_PROTOCOL,
        "note": "A reported ablation, not the headline: the shipped searches (force_finish off) are the job's; "
                "force_finish masks </s> while fewer than |x| source tokens are visible. ended_before_source: "
                "share of outputs whose </s> (or length limit) came before the whole source was read; "
                "empty_outputs: sentences with no output word, left out of the latency means. Latencies in "
                "source words (laal_words: LAAL; al_ref_words: AL with the reference length).",
        "sets": rounded(sets, 4),
    }
    write_results(args.out, out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
