"""Devel and test perplexity of the SLURP graph's trigram under each way of giving the words the training text
never had their probability (`[lm] interpolate_unigrams` in `jobs/graph_slurp.toml`):

- `discounted_mass` (the shipped setting, `--interpolate_unigrams 0`): <unk> holds the whole discounted unigram
  mass, spread evenly over the graph's unseen words;
- `uniform_interpolation`: lmplz's unigram interpolation with a uniform distribution over the graph's words,
  </s> and <unk>; each unseen word gets <unk>'s probability, one word's uniform share;
- `uniform_interpolation_divided`: the same LM, but <unk>'s probability divided among the unseen words as if
  it were their total (the graph recipe's rule before it was corrected; the vocabulary padded one word
  further, as it was then).

The first two LMs are built by the graph recipe's own `estimate_lm`. The perplexities are the graph job's
(`graph.ppl_devel`, `graph.ppl_test`: `ArpaModel.perplexity` on the normalized sentences, end of sentence
included, no word out of the vocabulary). lmplz runs three times on the unique training sentences, a few
seconds each.

    python scripts/unigram_interpolation_ppl.py [--job jobs/graph_slurp.toml]
        [--out benchmarks/results/lm_unigram_interpolation.json]
"""

from __future__ import annotations

import argparse
import dataclasses
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "platform"))
sys.path.insert(0, str(ROOT / "scripts"))

from results_file import rounded, write_results

from specbench.config.jobs import GraphConfig
from specbench.experiments import graph_recipe
from specbench.experiments.registry import load_config
from specbench.wfst import arpa, kenlm_tools

RULES = ("discounted_mass", "uniform_interpolation", "uniform_interpolation_divided")


def _lm(config: GraphConfig, rule: str, train: list[list[str]], vocab: set[str], out: Path) -> arpa.ArpaModel:
    if rule != "uniform_interpolation_divided":
        lm = dataclasses.replace(config.lm, interpolate_unigrams=rule == "uniform_interpolation")
        return graph_recipe.estimate_lm(dataclasses.replace(config, lm=lm), train, vocab, out)
    text = out / "train.txt"
    text.write_text("".join(" ".join(s) + "\n" for s in train), encoding="utf-8")
    kenlm_tools.estimate_arpa(text, out / "lm.raw.arpa", config.lm.order, vocab_pad=len(vocab) + 3,
                              memory=config.lm.memory, discount_fallback=config.lm.discount_fallback,
                              interpolate_unigrams=True)
    return arpa.spread_unknown(arpa.read_arpa(out / "lm.raw.arpa"), vocab - {w for s in train for w in s})


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--job", type=Path, default=ROOT / "jobs" / "graph_slurp.toml")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "lm_unigram_interpolation.json")
    args = parser.parse_args()
    config = load_config(args.job)
    train, evals = graph_recipe.texts(config)
    vocab = graph_recipe.graph_vocabulary(config, train, evals)
    vocab_train = {w for s in train for w in s}
    results = {}
    for rule in RULES:
        with tempfile.TemporaryDirectory() as tmp:
            model = _lm(config, rule, train, vocab, Path(tmp))
            unk_log10 = arpa.read_arpa(Path(tmp) / "lm.raw.arpa").ngrams[0][(arpa.UNK,)][0]
        unigram_mass = sum(10 ** logp for (w,), (logp, _) in model.ngrams[0].items() if w != arpa.BOS)
        results[rule] = {"unk_log10": unk_log10, "unigram_mass": unigram_mass,
                         **{f"ppl_{split}": model.perplexity(evals[split]) for split in ("devel", "test")}}
        print(rule, {k: round(v, 4) for k, v in results[rule].items()}, flush=True)
    out = {"git_commit": subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                                        check=False).stdout.strip(),
           "job": str(args.job.relative_to(ROOT)) if args.job.is_relative_to(ROOT) else str(args.job),
           "lm": dataclasses.asdict(config.lm), "graph_words": len(vocab), "unseen_words": len(vocab - vocab_train),
           "sentences": {"train": len(train), **{split: len(s) for split, s in evals.items()}},
           "chosen_on": "ppl_devel", "rules": rounded(results, 6)}
    write_results(args.out, out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
