"""Relative-entropy pruning of back-off n-gram models (Stolcke, "Entropy-based pruning of backoff language
models", 1998; what SRILM's `ngram -prune` does).

Removing the n-gram (h, w) makes p(w | h) back off to bow'(h) p(w | h'), h' = h without its oldest word, and
changes the back-off weight of h so that p(. | h) still sums to one:

    bow'(h) = (1 - sum_{v listed after h} p(v | h) + p(w | h)) / (1 - sum_{v listed after h} p(v | h') + p(w | h'))

The model's relative entropy to the pruned one is then, in nats (Stolcke's eq. for one n-gram; only the
distribution after h changes, which is the approximation Stolcke makes for longer contexts backing off to h):

    D = p(h) * [ p(w | h) (ln p(w | h) - ln bow'(h) - ln p(w | h'))
                 + (1 - sum_{v listed after h} p(v | h)) (ln bow(h) - ln bow'(h)) ]

with p(h) the model's own probability of the context (chain rule; a context that starts with <s> starts at
probability 1). An n-gram is pruned when the training-set perplexity it alone would add, e^D - 1, is below
the threshold; every n-gram is judged against the unpruned model (Stolcke's independence assumption).
The highest order is pruned first, and an n-gram that is the context of a kept longer n-gram stays, so the
model stays a valid back-off model. Unigrams are never pruned. Back-off weights are then recomputed from
the lowest order up, so every context's distribution sums to one again.

Both passes run over the whole model as arrays (`wfst.ngram_arrays`): the Sphinx trigram restricted to 3,000
words (1.9 M n-grams) is conditioned and pruned in seconds. tests/unit/test_arpa_prune.py keeps the formulas
above as plain loops over `ArpaModel` and checks that these functions keep the same n-grams and equal them
to within rounding (bit for bit where numpy's log10 and power are libm's; AVX-512 builds of numpy differ from
libm in the last bit of some values).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from specbench.wfst.arpa import BOS, EOS, ArpaModel
from specbench.wfst.ngram_arrays import NgramArrays, segment_sums

_EPS = 1e-12


@dataclass
class PruneReport:
    """N-grams per order before and after, the threshold, and how many were kept only as contexts."""

    threshold: float
    before: list[int]
    after: list[int]
    kept_as_context: list[int] = field(default_factory=list)


def _deltas(arrays: NgramArrays, n: int) -> np.ndarray:
    """D (nats) of removing each n-gram of order n alone; see the module docstring."""
    contexts, n_contexts = arrays.context[n - 1], arrays.count(n - 1)
    p = 10.0 ** arrays.logp[n - 1]
    q = arrays.lower_order_probs(n)
    left_here = (1.0 - segment_sums(p, contexts, n_contexts))[contexts]
    left_lower = (1.0 - segment_sums(q, contexts, n_contexts))[contexts]
    bow = (10.0 ** arrays.bow[n - 2])[contexts]
    weight = (10.0 ** arrays.context_log10(n - 1))[contexts]
    with np.errstate(divide="ignore", invalid="ignore"):
        new_bow = (left_here + p) / np.maximum(left_lower + q, _EPS)
        delta = p * (np.log(p) - np.log(new_bow) - np.log(q))
        delta = np.where(left_here > _EPS, delta + left_here * (np.log(bow) - np.log(new_bow)), delta)
    return weight * delta


def entropy_deltas(model: ArpaModel, n: int) -> dict[tuple[str, ...], float]:
    """The relative entropy D (nats, see the module docstring) of removing each listed n-gram of order n >= 2
    alone from `model`."""
    if not 2 <= n <= model.order:
        raise ValueError(f"n-grams of order {n} cannot be pruned: orders 2..{model.order} can")
    arrays = NgramArrays.from_model(model)
    return dict(zip(arrays.grams[n - 1], _deltas(arrays, n).tolist(), strict=True))


def _recompute_backoffs(arrays: NgramArrays) -> None:
    """Set every context's back-off weight so that its distribution sums to one, lowest order first (in
    place). A context whose listed n-grams leave no mass gets log10 bow 0 (it never backs off usefully)."""
    for n in range(2, arrays.order + 1):
        contexts, n_contexts = arrays.context[n - 1], arrays.count(n - 1)
        left_here = 1.0 - segment_sums(10.0 ** arrays.logp[n - 1], contexts, n_contexts)
        left_lower = 1.0 - segment_sums(arrays.lower_order_probs(n), contexts, n_contexts)
        with np.errstate(divide="ignore", invalid="ignore"):
            bow = np.log10(np.maximum(left_here, _EPS)) - np.log10(np.maximum(left_lower, _EPS))
        arrays.bow[n - 2] = np.where(np.bincount(contexts, minlength=n_contexts) > 0, bow, 0.0)


def recompute_backoffs(model: ArpaModel) -> None:
    """Set every context's back-off weight so that its distribution sums to one (in place; see
    `_recompute_backoffs`)."""
    arrays = NgramArrays.from_model(model)
    _recompute_backoffs(arrays)
    for level, recomputed in zip(model.ngrams, arrays.to_model().ngrams, strict=True):
        level.update(recomputed)  # same n-grams: new values, same dicts and order


def prune(model: ArpaModel, threshold: float) -> tuple[ArpaModel, PruneReport]:
    """A copy of `model` without the n-grams (order >= 2) whose removal alone adds less than `threshold`
    relative perplexity (e^D - 1 < threshold), back-off weights recomputed; and a report."""
    if not (threshold >= 0.0 and math.isfinite(threshold)):
        raise ValueError(f"the pruning threshold must be a finite relative perplexity increase >= 0 (SRILM's "
                         f"-prune, e.g. 1e-8), got {threshold!r}")
    arrays = NgramArrays.from_model(model)
    keep = [np.ones(arrays.count(n), bool) for n in range(1, model.order + 1)]
    kept_as_context = [0] * model.order
    for n in range(model.order, 1, -1):
        own = np.expm1(_deltas(arrays, n)) >= threshold
        context = np.zeros(arrays.count(n), bool)
        if n < model.order:
            context[arrays.context[n][keep[n]]] = True
        keep[n - 1] = own | context
        kept_as_context[n - 1] = int(np.count_nonzero(context & ~own))
    pruned = arrays.subset(keep)
    _recompute_backoffs(pruned)
    out = pruned.to_model()
    return out, PruneReport(threshold=threshold, before=model.counts, after=out.counts,
                            kept_as_context=kept_as_context)


def _suffix_mass(arrays: NgramArrays, mass: list[np.ndarray], contexts: np.ndarray) -> np.ndarray:
    """Z(h') per row of `contexts` (`mass[k]` holds Z of every k-gram, `mass[0]` Z of the empty context); an
    unlisted h' backs off with weight 1 and lists nothing, so Z(h') = Z(h' without its oldest word)."""
    width = contexts.shape[1]
    out = np.empty(len(contexts))
    todo = np.arange(len(contexts))
    for k in range(width, 0, -1):
        position = arrays.find(contexts[todo, width - k:])
        hit = position >= 0
        out[todo[hit]] = mass[k][position[hit]]
        todo = todo[~hit]
    out[todo] = mass[0][0]
    return out


def restrict_vocabulary(model: ArpaModel, size: int) -> ArpaModel:
    """`model` conditioned on its `size` most probable words (with `</s>`; `<s>` stays as a context):
    p'(w | h) = p(w | h) / Z(h) with Z(h) the mass of the kept words after h, so every context's distribution
    over the kept words keeps its proportions and sums to one; n-grams with any other word are dropped and
    the back-off weights recomputed. Z is computed without enumerating the vocabulary per context:
    Z(h) = sum_{listed v} p(v | h) + bow(h) (Z(h') - sum_{listed v} p(v | h'))."""
    if size <= 0:
        raise ValueError(f"the vocabulary size must be positive, got {size}")
    arrays = NgramArrays.from_model(model)
    markers = np.array([w in (BOS, EOS) for w in arrays.words])
    candidates = np.flatnonzero(~markers)
    ranked = candidates[np.argsort(-arrays.logp[0][candidates], kind="stable")]
    kept_words = markers.copy()
    kept_words[ranked[:size]] = True
    small = arrays.subset([kept_words[ids].all(axis=1) for ids in arrays.ids])
    # The terms of a kept n-gram's back-off chain are all over kept words: the same in `small` as in `model`.
    not_bos = np.array([w != BOS for w in small.words])
    mass = [segment_sums(10.0 ** small.logp[0][not_bos], np.zeros(int(not_bos.sum()), np.int64), 1)]
    for n in range(2, model.order + 1):
        contexts, n_contexts = small.context[n - 1], small.count(n - 1)
        here = segment_sums(10.0 ** small.logp[n - 1], contexts, n_contexts)
        lower = segment_sums(small.lower_order_probs(n), contexts, n_contexts)
        shorter = _suffix_mass(small, mass, small.ids[n - 2][:, 1:])
        mass.append(here + 10.0 ** small.bow[n - 2] * (shorter - lower))
    with np.errstate(divide="ignore", invalid="ignore"):
        small.logp[0] = np.where(not_bos, small.logp[0] - np.log10(mass[0][0]), small.logp[0])
        for n in range(2, model.order + 1):
            small.logp[n - 1] = small.logp[n - 1] - np.log10(mass[n - 1])[small.context[n - 1]]
    _recompute_backoffs(small)
    return small.to_model()
