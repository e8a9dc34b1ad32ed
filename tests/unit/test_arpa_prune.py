"""Relative-entropy pruning (`wfst.arpa_prune`) against a brute-force computation on small trigram models:
every context's whole distribution enumerated before and after removing one n-gram."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from specbench.wfst.arpa import BOS, EOS, ArpaModel
from specbench.wfst.arpa_prune import context_prob, entropy_deltas, prune, restrict_vocabulary

WORDS = ["a", "b", "c", EOS]


def _listed(rng: np.random.Generator, full: np.ndarray, k: int) -> dict[str, float]:
    """A random non-empty proper subset of the words, with their probabilities from `full`."""
    chosen = rng.choice(len(WORDS), size=k, replace=False)
    return {WORDS[i]: float(full[i]) for i in chosen}


def random_trigram_model(seed: int) -> ArpaModel:
    """A consistent back-off trigram model over three words and </s>: every context's listed n-grams take
    their probabilities from a random full distribution, and its back-off weight makes it sum to one."""
    rng = np.random.default_rng(seed)
    uni = rng.dirichlet(np.ones(len(WORDS)))
    unigrams = {(w,): (math.log10(p), 0.0) for w, p in zip(WORDS, uni)} | {(BOS,): (-99.0, 0.0)}
    model = ArpaModel(order=3, ngrams=[unigrams, {}, {}])

    def fill(level: int, context: tuple[str, ...]) -> None:
        full = rng.dirichlet(np.ones(len(WORDS)) * 0.7)
        lower = np.array([10 ** model.log10_prob(w, context[1:]) for w in WORDS])
        listed = _listed(rng, full, int(rng.integers(1, len(WORDS))))
        for w, p in listed.items():
            model.ngrams[level][(*context, w)] = (math.log10(p), 0.0)
        bow = (1 - sum(listed.values())) / (1 - sum(lower[WORDS.index(w)] for w in listed))
        logp, _ = model.ngrams[level - 1][context]
        model.ngrams[level - 1][context] = (logp, math.log10(bow))

    for h in [BOS, "a", "b", "c"]:
        fill(1, (h,))
    for bigram in [g for g in model.ngrams[1] if g[1] != EOS]:
        if rng.random() < 0.7:
            fill(2, bigram)
    return model


def distribution(model: ArpaModel, context: tuple[str, ...]) -> np.ndarray:
    return np.array([10 ** model.log10_prob(w, context) for w in WORDS])


def without(model: ArpaModel, ngram: tuple[str, ...]) -> ArpaModel:
    """`model` without `ngram`, its context's back-off weight set by enumeration so p(. | context) sums to 1."""
    levels = [dict(level) for level in model.ngrams]
    del levels[len(ngram) - 1][ngram]
    context = ngram[:-1]
    out = ArpaModel(order=model.order, ngrams=levels)
    listed = [w for w in WORDS if (*context, w) in levels[len(ngram) - 1]]
    here = sum(10 ** out.log10_prob(w, context) for w in listed)
    lower = sum(10 ** out.log10_prob(w, context[1:]) for w in listed)
    logp, _ = levels[len(context) - 1][context]
    levels[len(context) - 1][context] = (logp, math.log10((1 - here) / (1 - lower)))
    return out


def brute_force_delta(model: ArpaModel, ngram: tuple[str, ...]) -> float:
    context = ngram[:-1]
    p, q = distribution(model, context), distribution(without(model, ngram), context)
    return context_prob(model, context) * float(np.sum(p * np.log(p / q)))


def all_contexts(order: int) -> list[tuple[str, ...]]:
    heads = [BOS, "a", "b", "c"]
    out = [()]
    for n in range(1, order):
        out += [c for c in itertools.product(heads, repeat=n) if BOS not in c[1:]]
    return out


@pytest.mark.parametrize("seed", range(5))
def test_entropy_of_each_ngram_equals_the_enumerated_relative_entropy(seed: int) -> None:
    model = random_trigram_model(seed)
    for n in (2, 3):
        deltas = entropy_deltas(model, n)
        assert set(deltas) == set(model.ngrams[n - 1])
        for ngram, delta in deltas.items():
            assert delta >= -1e-12
            assert delta == pytest.approx(brute_force_delta(model, ngram), rel=1e-7, abs=1e-12)


@pytest.mark.parametrize("seed", range(5))
def test_pruned_model_is_normalized_and_drops_exactly_the_low_entropy_ngrams(seed: int) -> None:
    model = random_trigram_model(seed)
    trigram_deltas = sorted(brute_force_delta(model, g) for g in model.ngrams[2])
    middle = len(trigram_deltas) // 2  # about half the trigrams go: a threshold between two of them
    threshold = math.expm1((trigram_deltas[middle - 1] + trigram_deltas[middle]) / 2)
    pruned, report = prune(model, threshold)
    for context in all_contexts(3):
        assert distribution(pruned, context).sum() == pytest.approx(1.0, abs=1e-9)
    gone = {g for g in model.ngrams[2] if g not in pruned.ngrams[2]}
    assert gone == {g for g in model.ngrams[2] if math.expm1(brute_force_delta(model, g)) < threshold}
    # a bigram stays when it is the context of a kept trigram, whatever its own entropy
    assert {g[:2] for g in pruned.ngrams[2]} <= set(pruned.ngrams[1])
    assert report.before == model.counts and report.after == pruned.counts
    assert {k: v[0] for k, v in pruned.ngrams[0].items()} == {k: v[0] for k, v in model.ngrams[0].items()}


def test_threshold_zero_keeps_everything_and_a_huge_one_leaves_the_unigrams() -> None:
    model = random_trigram_model(7)
    same, _ = prune(model, 0.0)
    for context in all_contexts(3):
        assert distribution(same, context) == pytest.approx(distribution(model, context), abs=1e-9)
    unigram, report = prune(model, 1e9)
    assert report.after[1:] == [0, 0]
    for context in all_contexts(3):
        assert distribution(unigram, context) == pytest.approx(distribution(model, ()), abs=1e-9)


def test_a_higher_threshold_keeps_a_subset() -> None:
    model = random_trigram_model(3)
    kept = [prune(model, t)[0].ngrams for t in (0.0, 1e-3, 1e-2, 1e-1, 1e9)]
    for looser, stricter in itertools.pairwise(kept):
        for n in (1, 2):
            assert set(stricter[n]) <= set(looser[n])


def test_a_negative_threshold_is_refused() -> None:
    with pytest.raises(ValueError, match="threshold"):
        prune(random_trigram_model(0), -1.0)


@pytest.mark.parametrize("seed", range(5))
def test_a_restricted_vocabulary_keeps_every_distribution_normalized(seed) -> None:
    model = random_trigram_model(seed)
    ranked = sorted((w for w in ("a", "b", "c")), key=lambda w: -model.ngrams[0][(w,)][0])
    small = restrict_vocabulary(model, 2)
    kept = [*ranked[:2], EOS]
    assert {w for (w,) in small.ngrams[0]} == {*kept, BOS}
    assert all(ranked[2] not in g for level in small.ngrams for g in level)
    for context in [(BOS,), *((w,) for w in ranked[:2]), *((BOS, w) for w in ranked[:2]),
                    *itertools.product(ranked[:2], ranked[:2])]:
        total = sum(10 ** small.log10_prob(w, context) for w in kept)
        assert total == pytest.approx(1.0, abs=1e-9), context
        ratios = [10 ** (small.log10_prob(w, context) - model.log10_prob(w, context)) for w in kept]
        assert ratios == pytest.approx([ratios[0]] * len(kept), rel=1e-9), context  # conditioned, not reshaped
    with pytest.raises(ValueError, match="vocabulary size"):
        restrict_vocabulary(model, 0)
