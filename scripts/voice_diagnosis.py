"""Per-voice greedy phone error rate of an acoustic model, and how it moves when the audio is shifted.

A diagnostic for voices the model does not generalize to: SLURP test sentences (clean, rate 1.0) are spoken
by each voice, scored by the model and decoded greedily (CTC best path against the first pronunciation);
for the first voice, the audio is also shifted with sox (`pitch` keeps the tempo, `speed` resamples) to see
whether the voice sits outside the training voices' formant range.

    python scripts/voice_diagnosis.py --sentences 60 --checkpoint models/am_slurp.pt flite:rms espeak:en-us+f4

Audio goes to `.specbench/diagnosis/` (reused on a rerun); the result is printed as JSON.
"""

from __future__ import annotations

import argparse
import random
import subprocess
import sys
from pathlib import Path

import torch

from specbench.acoustic.checkpoint import load_checkpoint
from specbench.acoustic.inference import score_samples
from specbench.acoustic.training import greedy_ctc
from specbench.data.slurp import read_split
from specbench.data.synthesis import read_wav, synthesize
from specbench.data.text_norm import normalize
from specbench.data.voices import get_voice
from specbench.experiments.graph_recipe import build_graph
from specbench.experiments.registry import load_config
from specbench.metrics.wer import error_rate
from specbench.paths import project_root, work_dir
from specbench.text_files import json_text
from specbench.wfst.lexicon import read_lexicon

SHIFTS = {"pitch +200": ["pitch", "200"], "pitch -200": ["pitch", "-200"], "pitch +400": ["pitch", "400"],
          "speed 1.1": ["speed", "1.1"], "speed 0.9": ["speed", "0.9"]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("voices", nargs="+", help="registry voice names; the first is also shifted")
    parser.add_argument("--sentences", type=int, default=60)
    parser.add_argument("--checkpoint", type=Path, default=project_root() / "models" / "am_slurp.pt")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    graph = build_graph(load_config(project_root() / "jobs" / "graph_slurp.toml"))
    prons = dict(read_lexicon(graph.directory / "lexicon.txt").prons)
    ckpt = load_checkpoint(args.checkpoint)
    index = {p: i + 1 for i, p in enumerate(ckpt.phones)}
    utterances = read_split("test")
    random.Random(args.seed).shuffle(utterances)
    texts = [t for u in utterances if (t := normalize(u.sentence)) and all(w in prons for w in t.split())]
    texts = texts[: args.sentences]
    out = work_dir() / "diagnosis"

    def per(wavs: list[Path]) -> float:
        pairs = []
        for wav, text in zip(wavs, texts):
            samples, _ = read_wav(wav)
            logprobs = score_samples(ckpt, samples)
            ref = [index[p] for w in text.split() for p in prons[w][0]]
            pairs.append((ref, greedy_ctc(torch.from_numpy(logprobs), len(logprobs))))
        return round(error_rate(pairs), 4)

    def spoken(voice: str) -> list[Path]:
        wavs = [out / get_voice(voice).slug / f"{i:04d}.wav" for i in range(len(texts))]
        for wav, text in zip(wavs, texts):
            if not wav.is_file():
                synthesize(text, get_voice(voice), 1.0, wav)
        return wavs

    result: dict[str, object] = {"checkpoint": str(args.checkpoint), "sentences": len(texts),
                                 "per": {v: per(spoken(v)) for v in args.voices}}
    first = spoken(args.voices[0])
    shifted = {}
    for name, effect in SHIFTS.items():
        wavs = [w.with_name(f"{w.stem}.{name.replace(' ', '')}.wav") for w in first]
        for src, dst in zip(first, wavs):
            if not dst.is_file():
                subprocess.run(["sox", str(src), str(dst), *effect, "rate", "16000"], check=True)
        shifted[name] = per(wavs)
    result[f"per_shifted.{args.voices[0]}"] = shifted
    print(json_text(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
