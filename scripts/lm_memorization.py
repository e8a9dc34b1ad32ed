"""How much more often the word LSTM completes a training user's one-off than a test user's.

A training user's one-offs are other training speakers' sentences: SLURP training text, which the word LSTM
(`models/lm_slurp.pt`) was trained on. A devel or test user's one-offs are held-out text. So the confidence
models learn from LM candidates that are right more often than the ones they are judged on. This measures
the gap: for a random sample of each split's sentence pool, every word prefix that leaves at least one word
to predict is completed with `jobs/predictive_asr.toml`'s LM and completion settings, and the share whose n-best holds the rest of
the sentence (and whose top completion is it) is reported, with the share of sentences completed from some
prefix.

    python scripts/lm_memorization.py [--sentences 1000] [--seed 1]
        [--out benchmarks/results/lm_memorization_cpu.json]
"""

from __future__ import annotations

import argparse
import random
import subprocess
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "platform"))
sys.path.insert(0, str(ROOT / "scripts"))

from results_file import write_results

from specbench.config import PredictiveAsrConfig
from specbench.config.loader import load_job_file
from specbench.data.usage import population
from specbench.hardware import describe
from specbench.paths import from_root
from specbench.prediction.completion import Completer
from specbench.prediction.lm import load_lm


def git_commit() -> str:
    run = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=False)
    return run.stdout.strip()


def measure(completer: Completer, split: str, sentences: int, seed: int) -> dict[str, float]:
    pool = [s.normalized_text.split() for s in population(split).pool]
    sample = random.Random(seed).sample(pool, sentences)
    prefixes, rests, owner = [], [], []
    for i, words in enumerate(sample):
        for k in range(1, len(words)):  # partials that leave at least one word to predict
            prefixes.append(words[:k])
            rests.append(tuple(words[k:]))
            owner.append(i)
    nbest = completer.complete(prefixes)
    in_nbest = [any(c.words == rest for c in n) for n, rest in zip(nbest, rests, strict=True)]
    top = [bool(n) and n[0].words == rest for n, rest in zip(nbest, rests, strict=True)]
    completed = {owner[j] for j, hit in enumerate(in_nbest) if hit}
    return {"pool_sentences": len(pool), "sentences": sentences, "prefixes": len(prefixes),
            "rest_in_nbest": round(sum(in_nbest) / len(in_nbest), 4), "rest_top1": round(sum(top) / len(top), 4),
            "sentences_completed_from_some_prefix": round(len(completed) / sentences, 4)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sentences", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "lm_memorization_cpu.json")
    args = parser.parse_args()
    start = time.perf_counter()
    torch.set_num_threads(1)
    job = load_job_file(ROOT / "jobs" / "predictive_asr.toml", {"predictive_asr": PredictiveAsrConfig})
    settings = job.completion
    completer = Completer(load_lm(from_root(job.lm)), settings)
    splits = {split: measure(completer, split, args.sentences, args.seed) for split in ("train", "devel", "test")}
    test_rate = splits["test"]["rest_in_nbest"]
    out = {"lm": str(job.lm), "git_commit": git_commit(), "completion": {"n_best": settings.n_best, "beam": settings.beam,
                                                        "max_new_words": settings.max_new_words},
           "hardware": describe(), "seed": args.seed, "splits": splits,
           "train_over_test_in_nbest": round(splits["train"]["rest_in_nbest"] / test_rate, 2) if test_rate else None,
           "wall_minutes": round((time.perf_counter() - start) / 60, 2)}
    write_results(args.out, out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
