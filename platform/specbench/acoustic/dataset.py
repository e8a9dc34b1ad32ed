"""Training examples for the acoustic model: features and phone targets of synthesized utterances.

Targets are the phones of each word's first lexicon pronunciation (CMUdict's most common variant, or
espeak-ng's); column/label k >= 1 is `PHONES[k - 1]`, 0 is the CTC blank.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from specbench.acoustic.features import fbank
from specbench.data.synthesis import read_wav
from specbench.errors import DataError


@dataclass(frozen=True)
class Example:
    """One utterance: `feats (T, 80) float16` raw fbank (CMVN applied at batch time), `targets (L,) int64`."""

    utt_id: str
    feats: np.ndarray
    targets: np.ndarray
    voice: str


def phone_targets(words: Sequence[str], prons: Mapping[str, Sequence[tuple[str, ...]]],
                  phones: Sequence[str]) -> np.ndarray:
    """Label ids (1-based into `phones`) of the words' first pronunciations."""
    index = {p: i + 1 for i, p in enumerate(phones)}
    out = []
    for w in words:
        if w not in prons:
            raise DataError(f"word {w!r} is not in the lexicon. Fix: rebuild the graph so the lexicon covers "
                            "the corpus text (`specbench graph build jobs/graph_slurp.toml`).")
        out.extend(index[p] for p in prons[w][0])
    return np.asarray(out, dtype=np.int64)


def load_examples(rows: Iterable[Mapping[str, object]], corpus_root: Path,
                  prons: Mapping[str, Sequence[tuple[str, ...]]], phones: Sequence[str],
                  progress: Callable[[Iterable], Iterable] = lambda x: x) -> list[Example]:
    """Read audio and compute features for manifest rows whose status is ok."""
    out = []
    for row in progress(list(rows)):
        samples, _ = read_wav(corpus_root / str(row["audio_path"]))
        targets = phone_targets(str(row["normalized_text"]).split(), prons, phones)
        out.append(Example(str(row["utt_id"]), fbank(samples).astype(np.float16), targets, str(row["voice"])))
    return out


def length_batches(examples: Sequence[Example], max_frames: int, rng: np.random.Generator | None) -> list[list[int]]:
    """Indices grouped into batches of similar length with at most `max_frames` padded input frames each;
    shuffled (within length buckets and across batches) when `rng` is given."""
    lengths = np.array([len(e.feats) for e in examples])
    order = np.argsort(lengths + (rng.uniform(0, 20, len(lengths)) if rng is not None else 0), kind="stable")
    batches, current, longest = [], [], 0
    for i in order:
        longest_new = max(longest, int(lengths[i]))
        if current and longest_new * (len(current) + 1) > max_frames:
            batches.append(current)
            current, longest_new = [], int(lengths[i])
        current.append(int(i))
        longest = longest_new
    if current:
        batches.append(current)
    if rng is not None:
        rng.shuffle(batches)
    return batches
