"""WER's denominator and argument order (the reference's words, NIST sclite) on hand-computed examples with
references and hypotheses of different lengths, and the edit distance against a brute-force recursion."""

from __future__ import annotations

import math
from functools import cache

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specbench.metrics.wer import edit_distance, error_rate, wer

pytestmark = pytest.mark.unit
words = st.lists(st.sampled_from(["a", "b", "c"]), max_size=6)


def brute_distance(ref: tuple[str, ...], hyp: tuple[str, ...]) -> int:
    """Levenshtein distance by the textbook recursion over the first tokens."""

    @cache
    def d(i: int, j: int) -> int:
        if i == len(ref) or j == len(hyp):
            return len(ref) - i + len(hyp) - j
        return min(d(i + 1, j) + 1, d(i, j + 1) + 1, d(i + 1, j + 1) + (ref[i] != hyp[j]))

    return d(0, 0)


def test_wer_divides_by_the_reference_words() -> None:
    assert wer([["a", "b", "c", "d"]], [["a", "c"]]) == pytest.approx(2 / 4)  # 2 deletions over 4 words
    assert wer([["a", "b"]], [["a", "x", "b", "y"]]) == pytest.approx(2 / 2)  # 2 insertions over 2 words
    # two utterances: (2 deletions + 2 insertions) over 4 + 1 reference words
    assert wer([["a", "b", "c", "d"], ["e"]], [["a", "c"], ["e", "f", "g"]]) == pytest.approx(4 / 5)


@given(words, words, words, words)
def test_error_rate_is_brute_force_distance_over_reference_words(r1: list[str], h1: list[str], r2: list[str],
                                                                  h2: list[str]) -> None:
    assert edit_distance(r1, h1) == brute_distance(tuple(r1), tuple(h1))
    tokens = len(r1) + len(r2)
    errors = brute_distance(tuple(r1), tuple(h1)) + brute_distance(tuple(r2), tuple(h2))
    expected = errors / tokens if tokens else (math.inf if errors else 0.0)  # no reference: inf, unless empty
    assert error_rate([(r1, h1), (r2, h2)]) == pytest.approx(expected)
