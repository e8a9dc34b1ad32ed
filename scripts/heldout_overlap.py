"""How many devel and test sentences SLURP's training text also holds (after the project's normalization),
and how many of the ASR headline's synthesized utterances and acoustic training utterances have one of them.

The LMs (the graph's trigram, the word LSTM) train on the unique training sentences and the acoustic model's
training plan draws from them, so these are the held-out sentences they have seen (`docs/graph.md`).

    python scripts/heldout_overlap.py [--speech-job jobs/speech_slurp.toml]
        [--out benchmarks/results/heldout_overlap.json]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "platform"))
sys.path.insert(0, str(ROOT / "scripts"))

from results_file import write_results

from specbench.data import slurp
from specbench.data.speech_corpus import plan_utterances
from specbench.data.text_norm import normalize
from specbench.experiments.registry import load_config
from specbench.experiments.speech import corpus_plan


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--speech-job", type=Path, default=ROOT / "jobs" / "speech_slurp.toml")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "heldout_overlap.json")
    args = parser.parse_args()
    training = {normalize(s) for s in slurp.read_training_text()}
    held_out = {split: {normalize(u.sentence) for u in slurp.read_split(split)} for split in ("devel", "test")}
    rows = plan_utterances(corpus_plan(load_config(args.speech_job))).to_pylist()
    out: dict = {"git_commit": subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                                              text=True, check=False).stdout.strip(),
                 "speech_job": str(args.speech_job.resolve().relative_to(ROOT)),
                 "training_sentences": len(training), "sentences": {}, "synthesized": {}}
    for split, sentences in held_out.items():
        shared = sorted(sentences & training)
        out["sentences"][split] = {"unique": len(sentences), "also_training": len(shared), "which": shared}
        texts = [r["normalized_text"] for r in rows if r["split"] == split]
        hit = [t for t in texts if t in training]
        out["synthesized"][split] = {"utterances": len(texts), "with_a_training_text": len(hit),
                                     "words": sum(len(t.split()) for t in texts),
                                     "their_words": sum(len(t.split()) for t in hit)}
    train_rows = [r["normalized_text"] for r in rows if r["split"] == "train"]
    either = held_out["devel"] | held_out["test"]
    out["acoustic_training"] = {"utterances": len(train_rows),
                                "with_a_devel_or_test_text": sum(t in either for t in train_rows),
                                "with_a_synthesized_test_text": sum(t in {r["normalized_text"] for r in rows
                                                                          if r["split"] == "test"}
                                                                    for t in train_rows)}
    write_results(args.out, out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
