"""Bootstrap intervals of corpus WER and of the WER difference of two systems on the same utterances.

WER is a ratio over the corpus (errors over reference words), so each draw resamples whole utterances with
replacement and recomputes the ratio (Bisani & Ney 2004, "Bootstrap estimates for confidence intervals in
ASR performance evaluation"); both systems see the same draw (paired). Intervals are the 2.5 and 97.5
percentiles of the draws.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specbench.metrics.resample import resample_counts
from specbench.metrics.wer import edit_distance

__all__ = ["WerComparison", "paired_wer_bootstrap", "utterance_errors"]


def utterance_errors(references: list[list[str]], hypotheses: list[list[str]]) -> tuple[np.ndarray, np.ndarray]:
    """Per utterance: edit distance and reference length."""
    if len(references) != len(hypotheses):
        raise ValueError(f"{len(references)} references but {len(hypotheses)} hypotheses")
    errors = np.array([edit_distance(r, h) for r, h in zip(references, hypotheses)], dtype=np.float64)
    return errors, np.array([len(r) for r in references], dtype=np.float64)


@dataclass(frozen=True)
class WerComparison:
    """WER of A and B, A's 95% interval, A - B and its 95% interval, over `utterances` and `words`."""

    wer_a: float
    wer_b: float
    low_a: float
    high_a: float
    difference: float
    low: float
    high: float
    utterances: int
    words: int


def paired_wer_bootstrap(errors_a: np.ndarray, errors_b: np.ndarray, words: np.ndarray, samples: int = 1000,
                         seed: int = 0) -> WerComparison:
    """Bootstrap over utterances of two systems' corpus WER (per-utterance `errors_*`, reference `words`)."""
    a, b, n = (np.asarray(x, dtype=np.float64) for x in (errors_a, errors_b, words))
    if a.ndim != 1 or a.shape != b.shape or a.shape != n.shape or a.size == 0 or n.sum() <= 0:
        raise ValueError("paired_wer_bootstrap needs three equally long, non-empty arrays with reference words")
    if samples < 1:
        raise ValueError(f"paired_wer_bootstrap: samples must be at least 1, got {samples}")
    counts = resample_counts(a.size, samples, seed).astype(np.float64)
    total = counts @ n
    spoken = total > 0  # a draw of only empty references has no WER to compare: it is left out
    if not spoken.any():
        raise ValueError("paired_wer_bootstrap: no draw holds a reference word; draw more samples")
    draws_a, draws_b = (counts[spoken] @ x / total[spoken] for x in (a, b))
    low_a, high_a = np.percentile(draws_a, [2.5, 97.5])
    low, high = np.percentile(draws_a - draws_b, [2.5, 97.5])
    wer_a, wer_b = a.sum() / n.sum(), b.sum() / n.sum()
    return WerComparison(float(wer_a), float(wer_b), float(low_a), float(high_a), float(wer_a - wer_b),
                         float(low), float(high), int(a.size), int(n.sum()))
