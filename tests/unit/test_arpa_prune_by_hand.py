"""The pruning rule of `wfst.arpa_prune.prune` at its edges: an n-gram whose relative perplexity increase
equals the threshold is not below it and stays; and the report's `kept_as_context` counts, per order, the
n-grams kept only because a kept longer n-gram has them as its context, as the rule applied by hand from the
highest order down (with the loop formulas of test_arpa_prune.py for the increases) gives them."""

from __future__ import annotations

import math

import numpy as np
import pytest
from test_arpa_prune import WORDS, random_model, random_trigram_model, reference_entropy_deltas

from specbench.wfst.arpa_prune import entropy_deltas, prune

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("seed", range(3))
def test_an_ngram_whose_increase_equals_the_threshold_stays(seed: int) -> None:
    model = random_trigram_model(seed)
    deltas = entropy_deltas(model, 3)
    increases = dict(zip(deltas, np.expm1(np.array(list(deltas.values()))).tolist(), strict=True))
    for ngram, threshold in increases.items():
        pruned, _ = prune(model, threshold)
        assert set(pruned.ngrams[2]) == {g for g, e in increases.items() if e >= threshold}
        assert ngram in pruned.ngrams[2]


def test_kept_as_context_counts_the_ngrams_kept_only_as_contexts() -> None:
    model = random_model(7, WORDS, order=4)
    increases = {n: {g: math.expm1(d) for g, d in reference_entropy_deltas(model, n).items()}
                 for n in (2, 3, 4)}
    seen_both = False
    for threshold in (1e-4, 1.7e-4, 5e-4, 1e-3, 3e-3, 1e-2, 3e-2):
        kept = {g for g, e in increases[4].items() if e >= threshold}
        expected = [0, 0, 0, 0]
        for n in (3, 2):
            own = {g for g, e in increases[n].items() if e >= threshold}
            contexts = {g[:-1] for g in kept}
            expected[n - 1] = len(contexts - own)
            kept = own | contexts
        pruned, report = prune(model, threshold)
        assert set(pruned.ngrams[1]) == kept
        assert report.kept_as_context == expected, threshold
        seen_both |= expected[1] > 0 and expected[2] > 0
    assert seen_both  # the example exercises both orders
