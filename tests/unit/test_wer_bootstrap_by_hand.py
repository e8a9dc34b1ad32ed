"""The paired WER bootstrap's reported numbers on hand-computed inputs, and its draws against `wer.error_rate`
of the drawn utterances when an utterance has no reference words (a draw of only such utterances, where
`error_rate` gives inf for an insertion, is left out)."""

from __future__ import annotations

import numpy as np
import pytest

from specbench.metrics.resample import resample_counts
from specbench.metrics.wer import error_rate
from specbench.metrics.wer_bootstrap import paired_wer_bootstrap, utterance_errors

pytestmark = pytest.mark.unit


def test_reported_rates_difference_and_counts_by_hand() -> None:
    # A: 2 + 0 + 1 errors, B: 1 + 1 + 0 errors over 4 + 2 + 4 = 10 words
    a, b, words = np.array([2.0, 0.0, 1.0]), np.array([1.0, 1.0, 0.0]), np.array([4.0, 2.0, 4.0])
    out = paired_wer_bootstrap(a, b, words, samples=50)
    assert (out.wer_a, out.wer_b, out.difference) == pytest.approx((0.3, 0.2, 0.1))
    assert (out.utterances, out.words) == (3, 10)


def test_no_reference_words_at_all_is_an_error() -> None:
    with pytest.raises(ValueError, match="reference words"):
        paired_wer_bootstrap(np.array([0.0, 0.0]), np.array([0.0, 0.0]), np.array([0.0, 0.0]))
    with pytest.raises(ValueError, match="samples must be at least 1, got 0"):
        paired_wer_bootstrap(np.array([1.0]), np.array([0.0]), np.array([2.0]), samples=0)


def test_draws_equal_error_rate_of_the_drawn_utterances_with_an_empty_reference() -> None:
    refs = [[], ["a", "b", "c"], ["d", "e"]]
    hyp_a = [["z"], ["a", "x", "c"], ["d"]]  # an insertion where there is nothing to say
    hyp_b = [[], ["a", "b", "c"], ["d", "e", "f"]]
    errors_a, words = utterance_errors(refs, hyp_a)
    errors_b, _ = utterance_errors(refs, hyp_b)
    out = paired_wer_bootstrap(errors_a, errors_b, words, samples=200, seed=2)
    draws_a, diffs = [], []
    left_out = 0
    for row in resample_counts(3, 200, 2):
        picked = np.repeat(np.arange(3), row)
        wer_a = error_rate([(refs[i], hyp_a[i]) for i in picked])
        if wer_a == np.inf:  # only the empty utterance, whose insertion counts against no words
            left_out += 1
            continue
        draws_a.append(wer_a)
        diffs.append(wer_a - error_rate([(refs[i], hyp_b[i]) for i in picked]))
    assert left_out > 0 and error_rate([([], [])]) == 0.0 and error_rate([]) == 0.0
    assert (out.low_a, out.high_a) == pytest.approx(tuple(np.percentile(draws_a, [2.5, 97.5])))
    assert (out.low, out.high) == pytest.approx(tuple(np.percentile(diffs, [2.5, 97.5])))
