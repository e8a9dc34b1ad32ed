"""Training examples for the acoustic model: features and phone targets of synthesized utterances.

Targets are the phones of each word's first lexicon pronunciation (CMUdict's most common variant, or
espeak-ng's); column/label k >= 1 is `PHONES[k - 1]`, 0 is the CTC blank.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import numpy as np
from scipy.signal import resample_poly

from specbench.acoustic.features import fbank
from specbench.data.synthesis import read_wav
from specbench.errors import DataError


@dataclass(frozen=True)
class Example:
    """One utterance: `feats (T, 80) float16` raw fbank (CMVN applied at batch time), `targets (L,) int64`;
    `perturbed` holds the fbank of speed-perturbed copies of the audio (training only, else empty)."""

    utt_id: str
    feats: np.ndarray
    targets: np.ndarray
    voice: str
    perturbed: tuple[np.ndarray, ...] = ()


def speed_perturb(samples: np.ndarray, factor: float) -> np.ndarray:
    """Kaldi/sox-style speed perturbation: resample so that, played at the same rate, the audio runs `factor`
    times faster, with pitch and formants scaled by `factor` (`sox speed FACTOR`). Polyphase resampling with
    the factor as a ratio of small integers."""
    if factor == 1.0:
        return samples
    ratio = Fraction(1.0 / factor).limit_denominator(100)
    return resample_poly(samples, ratio.numerator, ratio.denominator).astype(np.float32)


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
                  progress: Callable[[Iterable], Iterable] = lambda x: x,
                  speed_factors: Sequence[float] = (1.0,)) -> list[Example]:
    """Read audio and compute features for each manifest row (the caller passes the rows whose status is ok:
    `experiments.speech.Corpus.rows`); with `speed_factors` other than 1.0, also the features of the audio
    speed-perturbed by each of them (`Example.perturbed`)."""
    out = []
    others = [f for f in dict.fromkeys(float(f) for f in speed_factors) if f != 1.0]
    for row in progress(list(rows)):
        samples, _ = read_wav(corpus_root / str(row["audio_path"]))
        targets = phone_targets(str(row["normalized_text"]).split(), prons, phones)
        perturbed = tuple(fbank(speed_perturb(samples, f)).astype(np.float16) for f in others)
        out.append(Example(str(row["utt_id"]), fbank(samples).astype(np.float16), targets, str(row["voice"]),
                           perturbed))
    return out


def epoch_view(examples: Sequence[Example], rng: np.random.Generator) -> list[Example]:
    """One epoch's examples: each utterance's original or one of its speed-perturbed features, uniformly."""
    out = []
    for e in examples:
        if not e.perturbed:
            out.append(e)
            continue
        pick = int(rng.integers(len(e.perturbed) + 1))
        out.append(e if pick == 0 else Example(e.utt_id, e.perturbed[pick - 1], e.targets, e.voice))
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
