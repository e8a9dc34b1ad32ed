"""Word (and phone) error rates.

WER = (S + D + I) / N over a corpus: the Levenshtein distance between reference and hypothesis token
sequences summed over utterances, divided by the total number of reference tokens (NIST sclite's
definition). The same function gives the phone error rate (PER) over phone sequences.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Sequence


def edit_distance(ref: Sequence[Hashable], hyp: Sequence[Hashable]) -> int:
    """Levenshtein distance (substitutions, deletions, insertions all cost 1). O(|ref| * |hyp|)."""
    if not ref:
        return len(hyp)
    previous = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        current = [i] + [0] * len(hyp)
        for j, h in enumerate(hyp, 1):
            current[j] = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (r != h))
        previous = current
    return previous[-1]


def error_rate(pairs: Iterable[tuple[Sequence[Hashable], Sequence[Hashable]]]) -> float:
    """Corpus error rate: sum of edit distances over sum of reference lengths. With no reference tokens: 0.0
    when the hypotheses are empty too, inf when they hold tokens (insertions against nothing: never a
    perfect score; Kaldi's compute-wer says inf too)."""
    errors = tokens = 0
    for ref, hyp in pairs:
        errors += edit_distance(ref, hyp)
        tokens += len(ref)
    return rate(errors, tokens)


def rate(errors: int, tokens: int) -> float:
    """`errors / tokens`, the rule of `error_rate` for no tokens: 0.0 without errors, else inf."""
    return errors / tokens if tokens else (math.inf if errors else 0.0)


def wer(references: Sequence[Sequence[str]], hypotheses: Sequence[Sequence[str]]) -> float:
    """Word error rate of word-list hypotheses against references (same length and order)."""
    if len(references) != len(hypotheses):
        raise ValueError(f"{len(references)} references but {len(hypotheses)} hypotheses")
    return error_rate(zip(references, hypotheses))
