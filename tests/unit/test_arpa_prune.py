"""Relative-entropy pruning (`wfst.arpa_prune`) against a brute-force computation on small trigram models:
every context's whole distribution enumerated before and after removing one n-gram; and its array passes
against the same formulas written as plain loops over `ArpaModel` (`reference_*` below) on random trigram and
4-gram models: the same n-grams in the same order, every value equal to within rounding (`close`). Where numpy
computes log10 and powers with libm they are bit-identical; on a machine with AVX-512 numpy uses its own SIMD
log10 and power, which differ from libm's (`math.log10`, `**`) in the last bit of some values."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from specbench.errors import ArpaFormatError
from specbench.wfst.arpa import BOS, EOS, ArpaModel
from specbench.wfst.arpa_prune import entropy_deltas, prune, recompute_backoffs, restrict_vocabulary
from specbench.wfst.ngram_arrays import NgramArrays, segment_sums

WORDS = ["a", "b", "c", EOS]


def random_model(seed: int, words: list[str] = WORDS, order: int = 3, fill_share: float = 0.7) -> ArpaModel:
    """A consistent back-off model over `words` (the last one </s>): every context's listed n-grams take
    their probabilities from a random full distribution, and its back-off weight makes it sum to one."""
    rng = np.random.default_rng(seed)
    uni = rng.dirichlet(np.ones(len(words)))
    unigrams = {(w,): (math.log10(p), 0.0) for w, p in zip(words, uni)} | {(BOS,): (-99.0, 0.0)}
    model = ArpaModel(order=order, ngrams=[unigrams] + [{} for _ in range(order - 1)])

    def fill(level: int, context: tuple[str, ...]) -> None:
        full = rng.dirichlet(np.ones(len(words)) * 0.7)
        lower = np.array([10 ** model.log10_prob(w, context[1:]) for w in words])
        chosen = rng.choice(len(words), size=int(rng.integers(1, len(words))), replace=False)
        listed = {words[i]: float(full[i]) for i in chosen}
        for w, p in listed.items():
            model.ngrams[level][(*context, w)] = (math.log10(p), 0.0)
        bow = (1 - sum(listed.values())) / (1 - sum(lower[words.index(w)] for w in listed))
        logp, _ = model.ngrams[level - 1][context]
        model.ngrams[level - 1][context] = (logp, math.log10(bow))

    for h in [BOS, *words[:-1]]:
        fill(1, (h,))
    for level in range(2, order):
        for ngram in [g for g in model.ngrams[level - 1] if g[-1] != EOS]:
            if rng.random() < fill_share:
                fill(level, ngram)
    return model


def random_trigram_model(seed: int) -> ArpaModel:
    return random_model(seed)


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
    return reference_context_prob(model, context) * float(np.sum(p * np.log(p / q)))


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


# The same formulas as plain loops over `ArpaModel`, one n-gram at a time (what `wfst.arpa_prune` computed
# before it ran on arrays): the reference the array passes must equal to within rounding (`close`).

_EPS = 1e-12


def _reference_prob(model: ArpaModel, word: str, context: tuple[str, ...]) -> float:
    return 10.0 ** model.log10_prob(word, context)


def reference_context_prob(model: ArpaModel, context: tuple[str, ...]) -> float:
    words, start = (context[1:], (BOS,)) if context[:1] == (BOS,) else (context, ())
    total, history = 0.0, list(start)
    for w in words:
        total += model.log10_prob(w, history)
        history.append(w)
    return 10.0 ** total


def _reference_listed_after(model: ArpaModel, n: int) -> dict[tuple[str, ...], list[tuple[str, ...]]]:
    out: dict[tuple[str, ...], list[tuple[str, ...]]] = {}
    for ngram in model.ngrams[n - 1]:
        out.setdefault(ngram[:-1], []).append(ngram)
    return out


def reference_entropy_deltas(model: ArpaModel, n: int) -> dict[tuple[str, ...], float]:
    out = {}
    for context, ngrams in _reference_listed_after(model, n).items():
        shorter = context[1:]
        p_here = [10.0 ** model.ngrams[n - 1][g][0] for g in ngrams]
        p_lower = [_reference_prob(model, g[-1], shorter) for g in ngrams]
        left_here, left_lower = 1.0 - sum(p_here), 1.0 - sum(p_lower)
        bow = 10.0 ** model.ngrams[n - 2][context][1]
        weight = reference_context_prob(model, context)
        for g, p, q in zip(ngrams, p_here, p_lower):
            new_bow = (left_here + p) / max(left_lower + q, _EPS)
            delta = p * (math.log(p) - math.log(new_bow) - math.log(q))
            if left_here > _EPS:
                delta += left_here * (math.log(bow) - math.log(new_bow))
            out[g] = weight * delta
    return out


def reference_recompute_backoffs(model: ArpaModel) -> None:
    for n in range(2, model.order + 1):
        listed = _reference_listed_after(model, n)
        lower = model.ngrams[n - 2]
        for context, (logp, _) in list(lower.items()):
            ngrams = listed.get(context, [])
            left_here = 1.0 - sum(10.0 ** model.ngrams[n - 1][g][0] for g in ngrams)
            left_lower = 1.0 - sum(_reference_prob(model, g[-1], context[1:]) for g in ngrams)
            bow = 0.0 if not ngrams else (math.log10(max(left_here, _EPS)) - math.log10(max(left_lower, _EPS)))
            lower[context] = (logp, bow)


def reference_prune(model: ArpaModel, threshold: float) -> ArpaModel:
    deltas = {n: reference_entropy_deltas(model, n) for n in range(2, model.order + 1)}
    kept = [dict(level) for level in model.ngrams]
    for n in range(model.order, 1, -1):
        contexts = {g[:-1] for g in kept[n]} if n < model.order else set()
        kept[n - 1] = {g: e for g, e in model.ngrams[n - 1].items()
                       if math.expm1(deltas[n][g]) >= threshold or g in contexts}
    pruned = ArpaModel(order=model.order, ngrams=kept)
    reference_recompute_backoffs(pruned)
    return pruned


def reference_restrict_vocabulary(model: ArpaModel, size: int) -> ArpaModel:
    ranked = sorted((g for g in model.ngrams[0] if g not in {(BOS,), (EOS,)}), key=lambda g: -model.ngrams[0][g][0])
    keep = {g[0] for g in ranked[:size]} | {BOS, EOS}
    levels = [{g: e for g, e in level.items() if all(w in keep for w in g)} for level in model.ngrams]
    mass = {(): sum(10.0 ** p for g, (p, _) in levels[0].items() if g != (BOS,))}
    for n in range(2, model.order + 1):
        listed = _reference_listed_after(ArpaModel(order=model.order, ngrams=levels), n)
        for context, (_, log_bow) in levels[n - 2].items():
            ngrams = listed.get(context, [])
            here = sum(10.0 ** levels[n - 1][g][0] for g in ngrams)
            lower = sum(_reference_prob(model, g[-1], context[1:]) for g in ngrams)
            shorter = context[1:]
            while shorter not in mass:  # an unlisted context lists nothing and backs off with weight 1
                shorter = shorter[1:]
            mass[context] = here + 10.0 ** log_bow * (mass[shorter] - lower)
    for level in levels:
        for g, (logp, log_bow) in level.items():
            if g != (BOS,):
                level[g] = (logp - math.log10(mass[g[:-1]]), log_bow)
    restricted = ArpaModel(order=model.order, ngrams=levels)
    reference_recompute_backoffs(restricted)
    return restricted


def close(a: float, b: float) -> bool:
    """Equal to within rounding: 1e-12 relative, or 1e-14 absolute for values near zero (a few ulps of the
    log-probabilities and entropy deltas these are; on AVX-512 the largest difference seen is 3e-15)."""
    return math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-14)


def _close_dicts(x: dict, y: dict, what: str) -> None:
    """The same keys in the same order, every value (a float or a tuple of floats) `close`."""
    assert list(x) == list(y), f"{what}: different n-grams or order"
    for key, u in x.items():
        v = y[key]
        pairs = zip(u, v, strict=True) if isinstance(u, tuple) else [(u, v)]
        assert all(close(p, q) for p, q in pairs), f"{what}: {key} {u} against {v}"


def _same(a: ArpaModel, b: ArpaModel) -> None:
    """The same n-grams in the same order, every log-probability and back-off weight `close`."""
    assert a.order == b.order
    for n, (x, y) in enumerate(zip(a.ngrams, b.ngrams, strict=True), 1):
        _close_dicts(x, y, f"order {n}")


def larger_models() -> list[ArpaModel]:
    vocabulary = [f"w{i}" for i in range(24)] + [EOS]
    return [random_model(11, vocabulary, order=3, fill_share=0.5), random_model(12, WORDS, order=4),
            random_model(13, vocabulary[-9:], order=4, fill_share=0.4)]


@pytest.mark.parametrize("index", range(3))
def test_array_passes_equal_the_loops(index: int) -> None:
    model = larger_models()[index]
    for n in range(2, model.order + 1):
        _close_dicts(entropy_deltas(model, n), reference_entropy_deltas(model, n), f"entropy deltas, order {n}")
    for threshold in (0.0, 1e-4, 1e-2):
        _same(prune(model, threshold)[0], reference_prune(model, threshold))
    for size in (1, 3, len(model.ngrams[0]) - 3):
        _same(restrict_vocabulary(model, size), reference_restrict_vocabulary(model, size))
    ours, theirs = ArpaModel(model.order, [dict(level) for level in model.ngrams]), ArpaModel(
        model.order, [dict(level) for level in model.ngrams])
    recompute_backoffs(ours)
    reference_recompute_backoffs(theirs)
    _same(ours, theirs)


def test_segment_sums_add_in_order_as_a_loop_does() -> None:
    rng = np.random.default_rng(5)
    groups = rng.integers(0, 40, size=3000)
    values = rng.random(3000) * 10.0 ** rng.integers(-12, 3, size=3000)
    sums = segment_sums(values, groups, 42)
    for g in range(42):
        assert sums[g] == sum(values[groups == g].tolist())  # exact, not approx
    assert sums[40] == sums[41] == 0.0


def test_an_ngram_without_its_context_is_refused() -> None:
    model = random_trigram_model(0)
    orphan = ArpaModel(3, [dict(model.ngrams[0]), {}, {(BOS, "a", "b"): (-0.5, 0.0)}])
    with pytest.raises(ArpaFormatError, match="'<s> a'"):
        NgramArrays.from_model(orphan)
