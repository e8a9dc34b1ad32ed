"""Paired bootstrap resampling of a BLEU difference between two systems on the same test sentences.

Koehn (2004), "Statistical Significance Tests for Machine Translation Evaluation": draw the test set's
sentence indices with replacement `samples` times; on each draw, score both systems' hypotheses of the drawn
sentences with corpus BLEU and take the difference. The middle 95% of those differences is the confidence
interval of the gain, and the share of draws where system A does not beat system B is Koehn's measure of
confidence that A is better (A wins in 95% of draws: "better with 95% confidence"). That share is not a
p-value under a null hypothesis of no difference (the draws centre on the observed gain, not on zero).

BLEU is sacreBLEU's (13a, cased, exponential smoothing, as `corpus_bleu`): each sentence's n-gram statistics
are extracted once and summed per draw, which gives exactly the corpus BLEU of the drawn sentences (the test
checks this against `sacrebleu.corpus_bleu`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
from sacrebleu.metrics import BLEU

from specbench.metrics.resample import resample_counts

__all__ = ["BleuGain", "paired_bootstrap"]


@dataclass(frozen=True)
class BleuGain:
    """BLEU(A) − BLEU(B) on the whole set, its 95% bootstrap interval and the share of draws A does not win."""

    gain: float
    low: float
    high: float
    no_win_share: float  # share of draws where A's BLEU is not above B's
    samples: int


def _sentence_stats(metric: BLEU, hypotheses: Sequence[str], references: Sequence[str]) -> np.ndarray:
    """Per-sentence sacreBLEU statistics `(N, 2 + 2 * max_ngram_order)`: lengths, matches, totals."""
    return np.asarray(metric._extract_corpus_statistics(list(hypotheses), [list(references)]), dtype=np.int64)


def paired_bootstrap(hypotheses_a: Sequence[str], hypotheses_b: Sequence[str], references: Sequence[str],
                     samples: int = 1000, seed: int = 0) -> BleuGain:
    """Paired bootstrap of BLEU(A) − BLEU(B); `ValueError` when the three lists differ in length or are empty."""
    n = len(references)
    if n == 0 or len(hypotheses_a) != n or len(hypotheses_b) != n:
        raise ValueError(f"paired_bootstrap needs as many hypotheses as references (> 0): got "
                         f"{len(hypotheses_a)} and {len(hypotheses_b)} hypotheses for {n} references")
    if samples < 1:
        raise ValueError(f"paired_bootstrap: samples must be at least 1, got {samples}")
    metric = BLEU(tokenize="13a")
    stats_a = _sentence_stats(metric, hypotheses_a, references)
    stats_b = _sentence_stats(metric, hypotheses_b, references)

    def bleu(stats: np.ndarray) -> float:
        return float(metric._compute_score_from_stats(stats.tolist()).score)

    gain = bleu(stats_a.sum(axis=0)) - bleu(stats_b.sum(axis=0))
    draws = np.array([bleu(counts @ stats_a) - bleu(counts @ stats_b)
                      for counts in resample_counts(n, samples, seed)])
    low, high = np.percentile(draws, [2.5, 97.5])
    return BleuGain(gain=gain, low=float(low), high=float(high), no_win_share=float(np.mean(draws <= 0.0)),
                    samples=samples)
