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
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from specbench.wfst.arpa import BOS, EOS, ArpaModel

LN10 = math.log(10.0)
_EPS = 1e-12


@dataclass
class PruneReport:
    """N-grams per order before and after, the threshold, and how many were kept only as contexts."""

    threshold: float
    before: list[int]
    after: list[int]
    kept_as_context: list[int] = field(default_factory=list)


def _prob(model: ArpaModel, word: str, context: tuple[str, ...]) -> float:
    return 10.0 ** model.log10_prob(word, context)


def context_prob(model: ArpaModel, context: tuple[str, ...]) -> float:
    """p(context) by the chain rule under `model`; a context starting with <s> starts at probability 1."""
    words, start = (context[1:], (BOS,)) if context[:1] == (BOS,) else (context, ())
    total, history = 0.0, list(start)
    for w in words:
        total += model.log10_prob(w, history)
        history.append(w)
    return 10.0 ** total


def _listed_after(model: ArpaModel, n: int) -> dict[tuple[str, ...], list[tuple[str, ...]]]:
    """Context (n - 1 words) -> its listed n-grams."""
    out: dict[tuple[str, ...], list[tuple[str, ...]]] = {}
    for ngram in model.ngrams[n - 1]:
        out.setdefault(ngram[:-1], []).append(ngram)
    return out


def entropy_deltas(model: ArpaModel, n: int) -> dict[tuple[str, ...], float]:
    """The relative entropy D (nats, see the module docstring) of removing each listed n-gram of order n >= 2
    alone from `model`."""
    if not 2 <= n <= model.order:
        raise ValueError(f"n-grams of order {n} cannot be pruned: orders 2..{model.order} can")
    out = {}
    for context, ngrams in _listed_after(model, n).items():
        shorter = context[1:]
        p_here = [10.0 ** model.ngrams[n - 1][g][0] for g in ngrams]
        p_lower = [_prob(model, g[-1], shorter) for g in ngrams]
        left_here, left_lower = 1.0 - sum(p_here), 1.0 - sum(p_lower)
        bow_entry = model.ngrams[n - 2].get(context)
        bow = 10.0 ** (bow_entry[1] if bow_entry is not None else 0.0)
        weight = context_prob(model, context)
        for g, p, q in zip(ngrams, p_here, p_lower):
            new_bow = (left_here + p) / max(left_lower + q, _EPS)
            delta = p * (math.log(p) - math.log(new_bow) - math.log(q))
            if left_here > _EPS:
                delta += left_here * (math.log(bow) - math.log(new_bow))
            out[g] = weight * delta
    return out


def recompute_backoffs(model: ArpaModel) -> None:
    """Set every context's back-off weight so that its distribution sums to one, lowest order first (in
    place). A context whose listed n-grams leave no mass gets log10 bow 0 (it never backs off usefully)."""
    for n in range(2, model.order + 1):
        listed = _listed_after(model, n)
        lower = model.ngrams[n - 2]
        for context, (logp, _) in list(lower.items()):
            ngrams = listed.get(context, [])
            left_here = 1.0 - sum(10.0 ** model.ngrams[n - 1][g][0] for g in ngrams)
            left_lower = 1.0 - sum(_prob(model, g[-1], context[1:]) for g in ngrams)
            bow = 0.0 if not ngrams else (math.log10(max(left_here, _EPS)) - math.log10(max(left_lower, _EPS)))
            lower[context] = (logp, bow)


def prune(model: ArpaModel, threshold: float) -> tuple[ArpaModel, PruneReport]:
    """A copy of `model` without the n-grams (order >= 2) whose removal alone adds less than `threshold`
    relative perplexity (e^D - 1 < threshold), back-off weights recomputed; and a report."""
    if not (threshold >= 0.0 and math.isfinite(threshold)):
        raise ValueError(f"the pruning threshold must be a finite relative perplexity increase >= 0 (SRILM's "
                         f"-prune, e.g. 1e-8), got {threshold!r}")
    deltas = {n: entropy_deltas(model, n) for n in range(2, model.order + 1)}
    kept: list[dict[tuple[str, ...], tuple[float, float]]] = [dict(level) for level in model.ngrams]
    kept_as_context = [0] * model.order
    for n in range(model.order, 1, -1):
        contexts = {g[:-1] for g in kept[n]} if n < model.order else set()
        level = {}
        for g, entry in model.ngrams[n - 1].items():
            if math.expm1(deltas[n][g]) >= threshold:
                level[g] = entry
            elif g in contexts:
                level[g] = entry
                kept_as_context[n - 1] += 1
        kept[n - 1] = level
    pruned = ArpaModel(order=model.order, ngrams=kept)
    recompute_backoffs(pruned)
    return pruned, PruneReport(threshold=threshold, before=model.counts, after=pruned.counts,
                               kept_as_context=kept_as_context)


def restrict_vocabulary(model: ArpaModel, size: int) -> ArpaModel:
    """`model` conditioned on its `size` most probable words (with `</s>`; `<s>` stays as a context):
    p'(w | h) = p(w | h) / Z(h) with Z(h) the mass of the kept words after h, so every context's distribution
    over the kept words keeps its proportions and sums to one; n-grams with any other word are dropped and
    the back-off weights recomputed. Z is computed without enumerating the vocabulary per context:
    Z(h) = sum_{listed v} p(v | h) + bow(h) (Z(h') - sum_{listed v} p(v | h'))."""
    if size <= 0:
        raise ValueError(f"the vocabulary size must be positive, got {size}")
    ranked = sorted((g for g in model.ngrams[0] if g not in {(BOS,), (EOS,)}), key=lambda g: -model.ngrams[0][g][0])
    keep = {g[0] for g in ranked[:size]} | {BOS, EOS}
    levels = [{g: e for g, e in level.items() if all(w in keep for w in g)} for level in model.ngrams]
    mass = {(): sum(10.0 ** p for g, (p, _) in levels[0].items() if g != (BOS,))}
    for n in range(2, model.order + 1):
        listed = _listed_after(ArpaModel(order=model.order, ngrams=levels), n)
        for context, (_, log_bow) in levels[n - 2].items():
            ngrams = listed.get(context, [])
            here = sum(10.0 ** levels[n - 1][g][0] for g in ngrams)
            lower = sum(_prob(model, g[-1], context[1:]) for g in ngrams)
            mass[context] = here + 10.0 ** log_bow * (mass[context[1:]] - lower)
    for n, level in enumerate(levels):
        for g, (logp, log_bow) in level.items():
            if g != (BOS,):
                level[g] = (logp - math.log10(mass[g[:-1]]), log_bow)
    restricted = ArpaModel(order=model.order, ngrams=levels)
    recompute_backoffs(restricted)
    return restricted
