"""The paired WER bootstrap (`metrics.wer_bootstrap`) against a direct loop over the same draws."""

from __future__ import annotations

import numpy as np
import pytest

from specbench.metrics.resample import resample_counts
from specbench.metrics.wer_bootstrap import paired_wer_bootstrap, utterance_errors


def test_the_intervals_are_the_percentiles_of_resampled_corpus_wers() -> None:
    rng = np.random.default_rng(3)
    words = rng.integers(1, 20, size=40).astype(float)
    a, b = rng.binomial(words.astype(int), 0.3).astype(float), rng.binomial(words.astype(int), 0.2).astype(float)
    out = paired_wer_bootstrap(a, b, words, samples=300, seed=5)
    draws = []
    for row in resample_counts(40, 300, 5):
        picked = np.repeat(np.arange(40), row)
        draws.append((a[picked].sum() / words[picked].sum(), b[picked].sum() / words[picked].sum()))
    draws = np.array(draws)
    assert out.wer_a == pytest.approx(a.sum() / words.sum()) and out.words == int(words.sum())
    assert (out.low_a, out.high_a) == pytest.approx(tuple(np.percentile(draws[:, 0], [2.5, 97.5])))
    assert (out.low, out.high) == pytest.approx(tuple(np.percentile(draws[:, 0] - draws[:, 1], [2.5, 97.5])))
    assert out.low < out.difference < out.high


def test_utterance_errors_count_edits_and_reference_words() -> None:
    errors, words = utterance_errors([["a", "b", "c"], ["d"]], [["a", "c"], ["d", "e"]])
    assert errors.tolist() == [1.0, 1.0] and words.tolist() == [3.0, 1.0]
    with pytest.raises(ValueError, match="references"):
        utterance_errors([["a"]], [])
    with pytest.raises(ValueError, match="non-empty"):
        paired_wer_bootstrap(np.array([]), np.array([]), np.array([]))
