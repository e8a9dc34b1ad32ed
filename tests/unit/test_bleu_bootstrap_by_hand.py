"""The paired BLEU bootstrap against a direct loop of `sacrebleu.corpus_bleu` (13a, cased, exponential
smoothing, no effective order: its defaults) over the drawn sentences, on sentences where those settings
matter: punctuation, case, a system whose output has no 4-grams at all (effective order), and one whose
4-grams never match (smoothing)."""

from __future__ import annotations

import numpy as np
import pytest
import sacrebleu

from specbench.metrics.bleu_bootstrap import paired_bootstrap
from specbench.metrics.resample import resample_counts

pytestmark = pytest.mark.unit

REFS = ["The cat sat on the mat.", "Hello, world! How are you?", "A dog, a ball, and a park.",
        "It's raining; take an umbrella.", "Where is the station?", "She said no, twice."]
A = ["The cat sat on a mat.", "Hello, world! how are you?", "A dog, a ball and a park.",
     "It's raining, take an umbrella.", "Where is the station?", "she said no twice."]
SHORT = ["the cat", "Hello world", "A dog", "raining", "Where station", "She said"]  # under 4 tokens each
REVERSED = [" ".join(reversed(r.split())) for r in REFS]  # no 4-gram of a reference


@pytest.mark.parametrize("b", [pytest.param(SHORT, id="short"), pytest.param(REVERSED, id="reversed")])
def test_interval_and_no_win_share_equal_a_direct_loop_over_corpus_bleu(b: list[str]) -> None:
    samples, seed = 40, 4
    result = paired_bootstrap(A, b, REFS, samples=samples, seed=seed)
    draws = []
    for row in resample_counts(len(REFS), samples, seed):
        picked = np.repeat(np.arange(len(REFS)), row)
        refs = [[REFS[i] for i in picked]]
        draws.append(sacrebleu.corpus_bleu([A[i] for i in picked], refs).score
                     - sacrebleu.corpus_bleu([b[i] for i in picked], refs).score)
    draws = np.array(draws)
    expected_gain = sacrebleu.corpus_bleu(A, [REFS]).score - sacrebleu.corpus_bleu(b, [REFS]).score
    assert result.gain == pytest.approx(expected_gain)
    assert (result.low, result.high) == pytest.approx(tuple(np.percentile(draws, [2.5, 97.5])))
    assert result.no_win_share == pytest.approx(float(np.mean(draws <= 0.0)))
    assert result.samples == samples


def test_zero_samples_is_an_error() -> None:
    with pytest.raises(ValueError, match="samples must be at least 1"):
        paired_bootstrap(A, SHORT, REFS, samples=0)
