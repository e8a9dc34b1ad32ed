"""A back-off n-gram model as numpy arrays, for passes over every n-gram of a large model at once.

`ArpaModel` keeps each order as a dict, which suits lookups one at a time; pruning and vocabulary
restriction (`wfst.arpa_prune`) instead score every listed n-gram, millions for the Sphinx trigram, and in
dict form spend their time in the interpreter. Here order n holds its n-grams' word ids `(count, n)`, log10
probabilities and back-off weights, in the model's order, plus each n-gram's context: the position of its
first n - 1 words in order n - 1. An n-gram is found by its context's position and its last word
(key = position * vocabulary + word, sorted once), so a batch of back-off lookups is a few `searchsorted`
calls per order.

Every arithmetic step is the dict code's own, element by element, and `segment_sums` adds each context's
terms one at a time in the model's order, as a Python loop does: results equal the dict code's to the last
bit where numpy and Python's `math` share the C library (checked in tests/unit/test_arpa_prune.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specbench.errors import ArpaFormatError
from specbench.wfst.arpa import BOS, ArpaModel

_FIX = "Fix: every n-gram's first n - 1 words must be listed as an (n - 1)-gram, as lmplz and SRILM write them."


def segment_sums(values: np.ndarray, groups: np.ndarray, n_groups: int) -> np.ndarray:
    """Sum of `values` per group (ids in [0, n_groups)), each group's terms added one at a time in their
    order in `values`, starting from 0.0: the rounding of `sum()` over a Python loop, not numpy's pairwise
    summation. One vector step per position within a group, so the longest group sets the step count."""
    order = np.argsort(groups, kind="stable")
    ordered = values[order]
    counts = np.bincount(groups, minlength=n_groups)
    starts = np.cumsum(counts) - counts
    longest_first = np.argsort(-counts, kind="stable")
    lengths, firsts = counts[longest_first], starts[longest_first]
    acc = np.zeros(n_groups)
    longer_than = np.searchsorted(-lengths, -np.arange(lengths[0] if n_groups else 0), side="left")
    for j, active in enumerate(longer_than.tolist()):  # the `active` longest groups have a term j
        acc[:active] += ordered[firsts[:active] + j]
    out = np.zeros(n_groups)
    out[longest_first] = acc
    return out


@dataclass
class NgramArrays:
    """Orders 1..order of a back-off model: `ids[n-1]` (count, n) word ids (a word's id is its unigram's
    position), `logp[n-1]`, `bow[n-1]` (log10), `context[n-1]` each n-gram's context position in order n - 1
    (order 1: none), and `grams[n-1]` the word tuples, for `to_model`."""

    order: int
    words: list[str]
    grams: list[list[tuple[str, ...]]]
    ids: list[np.ndarray]
    logp: list[np.ndarray]
    bow: list[np.ndarray]

    def __post_init__(self) -> None:
        self.word_id = {w: i for i, w in enumerate(self.words)}
        self._sorted: list[tuple[np.ndarray, np.ndarray]] = [(np.empty(0, np.int64), np.empty(0, np.int64))]
        self.context: list[np.ndarray] = [np.zeros(len(self.words), np.int64)]
        for n in range(2, self.order + 1):
            ids = self.ids[n - 1]
            context = self.find(ids[:, :-1])
            if len(context) and context.min() < 0:
                bad = self.grams[n - 1][int(np.argmax(context < 0))]
                raise ArpaFormatError(f"the {n}-gram {' '.join(bad)!r} has no {n - 1}-gram "
                                      f"{' '.join(bad[:-1])!r} listed. {_FIX}")
            keys = context * len(self.words) + ids[:, -1]
            by_key = np.argsort(keys, kind="stable")
            self._sorted.append((keys[by_key], by_key))
            self.context.append(context)

    @classmethod
    def from_model(cls, model: ArpaModel) -> NgramArrays:
        words = [g[0] for g in model.ngrams[0]]
        word_id = {w: i for i, w in enumerate(words)}
        grams, ids, logp, bow = [], [], [], []
        for n, level in enumerate(model.ngrams, 1):
            keys = list(level)
            try:
                flat = [word_id[w] for g in keys for w in g]
            except KeyError as err:
                raise ArpaFormatError(f"the word {err.args[0]!r} is in a {n}-gram but not among the unigrams. "
                                      f"{_FIX}") from err
            entries = np.array(list(level.values()), dtype=np.float64).reshape(len(keys), 2)
            grams.append(keys)
            ids.append(np.array(flat, dtype=np.int64).reshape(len(keys), n))
            logp.append(entries[:, 0].copy())
            bow.append(entries[:, 1].copy())
        return cls(model.order, words, grams, ids, logp, bow)

    def to_model(self) -> ArpaModel:
        return ArpaModel(order=self.order, ngrams=[
            dict(zip(grams, zip(logp.tolist(), bow.tolist(), strict=True), strict=True))
            for grams, logp, bow in zip(self.grams, self.logp, self.bow, strict=True)])

    def count(self, n: int) -> int:
        return len(self.grams[n - 1])

    def find(self, ids: np.ndarray) -> np.ndarray:
        """The position of each row's n-gram (n = columns >= 1) in order n, -1 where it is not listed."""
        position = ids[:, 0].copy()
        for n in range(2, ids.shape[1] + 1):
            keys = position * len(self.words) + ids[:, n - 1]
            sorted_keys, by_key = self._sorted[n - 1]
            at = np.minimum(np.searchsorted(sorted_keys, keys), max(len(sorted_keys) - 1, 0))
            hit = (position >= 0) & (sorted_keys[at] == keys) if len(sorted_keys) else np.zeros(len(keys), bool)
            position = np.where(hit, by_key[at] if len(by_key) else -1, -1)
        return position

    def log10_probs(self, contexts: np.ndarray, words: np.ndarray) -> np.ndarray:
        """log10 p(word | context) per row, backing off as `ArpaModel.log10_prob` does (contexts of at most
        order - 1 words, oldest first; every word in the vocabulary)."""
        width = contexts.shape[1]
        out = np.empty(len(words))
        penalty = np.zeros(len(words))
        todo = np.arange(len(words))
        for k in range(width, 0, -1):  # the k most recent context words
            position = self.find(np.column_stack([contexts[todo, width - k:], words[todo]]))
            hit = position >= 0
            out[todo[hit]] = penalty[todo[hit]] + self.logp[k][position[hit]]
            todo = todo[~hit]
            context = self.find(contexts[todo, width - k:])
            penalty[todo] += np.where(context >= 0, self.bow[k - 1][context], 0.0)
        out[todo] = penalty[todo] + self.logp[0][words[todo]]
        return out

    def lower_order_probs(self, n: int) -> np.ndarray:
        """p(w | h') for every n-gram (h, w) of order n >= 2, h' = h without its oldest word."""
        ids = self.ids[n - 1]
        return 10.0 ** self.log10_probs(ids[:, 1:-1], ids[:, -1])

    def context_log10(self, n: int) -> np.ndarray:
        """log10 p(g) by the chain rule for every n-gram g of order n, added word by word; an n-gram that
        starts with <s> starts at probability 1."""
        ids = self.ids[n - 1]
        total = np.zeros(len(ids))
        after_bos = ids[:, 0] == self.word_id.get(BOS, -1)
        for i in range(n):
            rows = np.flatnonzero(~after_bos) if i == 0 else np.arange(len(ids))
            total[rows] += self.log10_probs(ids[rows, :i], ids[rows, i])
        return total

    def subset(self, keep: list[np.ndarray]) -> NgramArrays:
        """The n-grams where `keep[n-1]` is true, in their order (values as they are)."""
        grams = [[g for g, k in zip(level, mask.tolist(), strict=True) if k] for level, mask in zip(self.grams, keep,
                                                                                                   strict=True)]
        words = [g[0] for g in grams[0]]
        remap = np.full(len(self.words), -1, np.int64)
        remap[keep[0]] = np.arange(len(words))
        return NgramArrays(self.order, words, grams, [remap[ids[mask]] for ids, mask in zip(self.ids, keep, strict=True)],
                           [v[mask] for v, mask in zip(self.logp, keep, strict=True)],
                           [v[mask] for v, mask in zip(self.bow, keep, strict=True)])
