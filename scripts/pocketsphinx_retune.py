"""Re-run the pocketsphinx side of the real-speech job alone
(benchmarks/results/real_speech_pocketsphinx_retuned_cpu.json by default): its language weight, now reaching all three
of its passes (`lw`, and `fwdflatlw` and `bestpathlw` in pocketsphinx's default ratios:
`sphinx_decode.pass_weights_for`, so 6.5 is its defaults), chosen on the job's tune prompts (the first `tune_utterances` of
the Asterisk `tune` half) from `[pocketsphinx] language_weights`, with a fresh decoder per utterance; then
every usable utterance outside the tune half (the Asterisk test half and the other sets) decoded at that
weight. It uses the job's own functions (`gather`, `check_tune_prompts`, `tune_language_weight`,
`decode_sphinx`, `set_groups`) and the graph job's LM (`sphinx_graph_recipe.pruned_lm`: the same pruning
that writes the graph's `lm.arpa`, without building the rest of the graph).

Our decoder's WERs beside it are the committed ones (`--committed`, by default
benchmarks/results/real_speech_cpu.json), read per set: they come from another run whose per-utterance
hypotheses are not here, so the differences are unpaired (no paired interval), and the utterances behind
them are the same only where the sets' usable utterances are. The job itself pairs them
(`real_speech_pocketsphinx_paired_cpu.json`); this script is the cheaper look at pocketsphinx alone.

`--control-defaults` (run after the sweep) adds to the same file the tune WER of pocketsphinx's own default
weights (`lw` 6.5, `fwdflatlw` 8.5, `bestpathlw` 9.5), with fresh decoders on the same tune prompts. With
the ratio rule that is the sweep's 6.5 point; it served to judge an earlier rule, one value in all three
passes (benchmarks/results/real_speech_pocketsphinx_one_weight_cpu.json at commit b627b5a: 38.1% at best on the tune prompts,
against 36.8% for the defaults), which is why the rule keeps pocketsphinx's ratios.

    python scripts/pocketsphinx_retune.py [--job jobs/real_speech.toml] [--output FILE] [--hardware TEXT]
    python scripts/pocketsphinx_retune.py --control-defaults [--job ...] [--output FILE]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "platform"))
sys.path.insert(0, str(ROOT / "scripts"))

from results_file import rounded, write_results  # noqa: E402

from specbench.config import GraphConfig  # noqa: E402
from specbench.experiments import sphinx_graph_recipe  # noqa: E402
from specbench.experiments.job_refs import referenced_job  # noqa: E402
from specbench.experiments.real_speech.audio import STATUS_OK, gather  # noqa: E402
from specbench.experiments.real_speech.job import (  # noqa: E402
    check_tune_prompts,
    check_tune_sets,
    decode_sphinx,
    set_groups,
    tune_language_weight,
)
from specbench.experiments.real_speech.sphinx_decode import (  # noqa: E402
    DEFAULT_PASS_WEIGHTS,
    LM_WEIGHTS,
    pass_weights_for,
)
from specbench.experiments.registry import load_config  # noqa: E402
from specbench.hardware import describe  # noqa: E402
from specbench.metrics.wer_bootstrap import paired_wer_bootstrap, utterance_errors  # noqa: E402
from specbench.paths import work_dir  # noqa: E402
from specbench.tracking.runs import git_commit  # noqa: E402
from specbench.wfst.arpa import write_arpa  # noqa: E402


def graph_lm(job: Path, graph_job: Path) -> Path:
    """The graph job's pruned LM as ARPA, written once under `.specbench/real_speech/lm/<graph inputs hash>/`."""
    config = referenced_job(job, "graph_job", graph_job, GraphConfig)
    out = work_dir() / "real_speech" / "lm" / sphinx_graph_recipe.inputs_hash(config)[:16]
    path = out / "lm.arpa"
    if not path.is_file():
        out.mkdir(parents=True, exist_ok=True)
        model, _, _ = sphinx_graph_recipe.pruned_lm(config, lambda message: print(message, file=sys.stderr))
        tmp = out / "lm.arpa.partial"
        write_arpa(model, tmp)
        tmp.replace(path)
    return path


def control_defaults(args: argparse.Namespace, config, lm: Path, tune: list, start: float) -> int:
    """The tune WER at pocketsphinx's default weight of each pass, added to the results file of the sweep."""
    if not args.output.is_file():
        raise SystemExit(f"{args.output}: no results of the sweep to add the control to. Fix: run "
                         "`python scripts/pocketsphinx_retune.py` first.")
    result = json.loads(args.output.read_text())
    words, seconds, frames, setup = decode_sphinx(tune, lm, DEFAULT_PASS_WEIGHTS[0], config, DEFAULT_PASS_WEIGHTS)
    errors, n = utterance_errors([u.text.split() for u in tune], [words.get(u.key, []) for u in tune])
    result["control_pocketsphinx_defaults"] = {
        "command": "python scripts/pocketsphinx_retune.py --control-defaults",
        "pass_weights": dict(zip(LM_WEIGHTS, DEFAULT_PASS_WEIGHTS)), "tune_utterances": len(tune),
        "tune_wer": float(errors.sum() / max(n.sum(), 1.0)), "wall_minutes": (time.perf_counter() - start) / 60,
        "conditions": "the same tune prompts, LM and fresh decoders as the sweep; only the pass weights differ"}
    write_results(args.output, rounded(result))
    print(json.dumps(result["control_pocketsphinx_defaults"], indent=1))
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--job", type=Path, default=ROOT / "jobs" / "real_speech.toml")
    parser.add_argument("--output", type=Path,
                        default=ROOT / "benchmarks" / "results" / "real_speech_pocketsphinx_retuned_cpu.json")
    parser.add_argument("--committed", type=Path, default=ROOT / "benchmarks" / "results" / "real_speech_cpu.json")
    parser.add_argument("--hardware", default=describe())
    parser.add_argument("--control-defaults", action="store_true",
                        help="add the tune WER at pocketsphinx's default pass weights to --output")
    args = parser.parse_args()
    start = time.perf_counter()
    config = load_config(args.job)
    check_tune_sets(config, args.job)
    lm = graph_lm(args.job, Path(config.graph_job))
    rows = gather(config.sets, config.max_per_set, work_dir() / "real_speech" / "audio", config.sample_min_words)
    flagged = {u.key: u.status for u in rows if u.status != STATUS_OK}
    usable = [u for u in rows if u.status == STATUS_OK]
    tune = [u for u in usable if u.set == "asterisk" and u.half == "tune"][:config.tune_utterances or None]
    check_tune_prompts(config, args.job, tune, flagged)
    if args.control_defaults:
        return control_defaults(args, config, lm, tune, start)
    tune_start = time.perf_counter()
    weight, tuning = tune_language_weight(tune, lm, config)
    tune_minutes = (time.perf_counter() - tune_start) / 60
    print(f"language weight {weight:g} (lw; {', '.join(LM_WEIGHTS[1:])} in pocketsphinx's ratios; tune WER "
          f"{tuning})", file=sys.stderr)
    evaluated = [u for u in usable if not (u.set == "asterisk" and u.half == "tune")]
    words, seconds, frames, setup = decode_sphinx(evaluated, lm, weight, config)
    committed = json.loads(args.committed.read_text())
    before = committed["report"]["wer"]
    sets = {}
    for group, members in sorted(set_groups(evaluated).items()):
        errors, n = utterance_errors([u.text.split() for u in members], [words.get(u.key, []) for u in members])
        cmp = paired_wer_bootstrap(errors, errors, n, samples=config.bootstrap_samples)
        ours, old = before.get(f"{group}.cpu"), before.get(f"{group}.pocketsphinx")
        sets[group] = {"utterances": len(members), "reference_words": int(n.sum()),
                       "pocketsphinx_wer": cmp.wer_a, "pocketsphinx_wer_low": cmp.low_a,
                       "pocketsphinx_wer_high": cmp.high_a,
                       "committed_pocketsphinx_wer": old["wer_a"] if old else None,
                       "committed_cpu_wer": ours["wer_a"] if ours else None,
                       "committed_cpu_utterances": ours["utterances"] if ours else None,
                       "cpu_minus_pocketsphinx_unpaired": ours["wer_a"] - cmp.wer_a if ours else None}
    result = {
        "command": "python scripts/pocketsphinx_retune.py",
        "job": str(args.job.resolve().relative_to(ROOT)) if args.job.resolve().is_relative_to(ROOT) else str(args.job),
        "hardware": args.hardware, "git_commit": git_commit(ROOT),
        "wall_minutes": (time.perf_counter() - start) / 60, "tune_minutes": tune_minutes,
        "conditions": ("pocketsphinx alone (its default tree, flat and best-path search), the tuned LM weight "
                       "that of the tree pass and the flat and best-path passes' in pocketsphinx's default ratios "
                       "(6.5 : 8.5 : 9.5), a fresh decoder per utterance; the graph job's pruned "
                       "LM; tuned on the job's tune prompts, evaluated on every other usable utterance (the "
                       "Asterisk tune half is not decoded at the chosen weight); two cores shared with another "
                       "job, so the seconds are indicative only. The committed WERs of our CPU backend come "
                       f"from {args.committed.relative_to(ROOT) if args.committed.is_relative_to(ROOT) else args.committed} "
                       "(another run, whose per-utterance hypotheses are not here): the differences are "
                       "unpaired, without an interval."),
        "lm": {"path": str(lm.relative_to(ROOT)) if lm.is_relative_to(ROOT) else str(lm),
               "sha256": hashlib.sha256(lm.read_bytes()).hexdigest()},
        "language_weights": list(config.pocketsphinx.language_weights),
        "word_insertion_penalty": config.pocketsphinx.word_insertion_penalty,
        "tune_utterances": len(tune), "tune_wer": tuning,
        "chosen_weight": dict(zip(LM_WEIGHTS, pass_weights_for(weight))),
        "committed_chosen_lw": committed["report"].get("language_weight"),
        "committed_tune_wer": committed["report"]["tuning"].get("language_weight"),
        "flagged": len(flagged), "evaluated_utterances": len(evaluated),
        "speed": {"seconds": seconds, "frames": frames, "frames_per_second": frames / max(seconds, 1e-9),
                  "decoder_setup_seconds": setup},
        "sets": sets,
    }
    write_results(args.output, rounded(result))
    print(json.dumps({k: result[k] for k in ("chosen_weight", "tune_wer", "wall_minutes")}, indent=1))
    for group, row in sets.items():
        print(f"{group:<16} pocketsphinx {row['pocketsphinx_wer']:.1%} (committed {row['committed_pocketsphinx_wer']}) "
              f"ours committed {row['committed_cpu_wer']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
