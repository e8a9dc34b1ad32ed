"""Paired bootstrap of a BLEU gain: each draw is exactly sacreBLEU's corpus BLEU of the drawn sentences, and
the interval and the share of draws without a win behave as the definitions say."""

from __future__ import annotations

import numpy as np
import pytest
import sacrebleu
from hypothesis import given, settings
from hypothesis import strategies as st

from specbench.metrics.bleu_bootstrap import _sentence_stats, paired_bootstrap

pytestmark = pytest.mark.unit

REFS = ["a man rides a red bike down the street", "two dogs play in the snow", "a woman is reading a book",
        "children are playing soccer on a field", "a cat sleeps on the sofa", "people walk past a shop",
        "a boy jumps into the lake", "an old man sits on a bench"]
GOOD = ["a man rides a red bike down the street", "two dogs play in the snow", "a woman reads a book",
        "children play soccer on a field", "a cat sleeps on the sofa", "people walk past a store",
        "a boy jumps into a lake", "an old man sits on a bench"]
BAD = ["a man rides a bike", "dogs in snow", "a woman with a book", "kids on a field", "a cat on a sofa",
       "people and a shop", "a boy and a lake", "a man on a bench"]

words = st.sampled_from("a the man dog cat red runs sits on in park street".split())
sentence = st.lists(words, min_size=1, max_size=8).map(" ".join)


@settings(max_examples=40, deadline=None)
@given(data=st.data(), n=st.integers(1, 6))
def test_summed_sentence_statistics_give_sacrebleu_corpus_bleu(data: st.DataObject, n: int) -> None:
    """A draw's score equals `sacrebleu.corpus_bleu` on the drawn (repeated) sentences."""
    hyps = data.draw(st.lists(sentence, min_size=n, max_size=n))
    refs = data.draw(st.lists(sentence, min_size=n, max_size=n))
    picks = data.draw(st.lists(st.integers(0, n - 1), min_size=n, max_size=n))
    metric = sacrebleu.BLEU(tokenize="13a")
    stats = _sentence_stats(metric, hyps, refs)
    counts = np.bincount(picks, minlength=n)
    ours = metric._compute_score_from_stats((counts @ stats).tolist()).score
    theirs = sacrebleu.corpus_bleu([hyps[i] for i in picks], [[refs[i] for i in picks]]).score
    assert ours == pytest.approx(theirs, abs=1e-9)


def test_gain_is_the_corpus_bleu_difference_and_the_interval_contains_it() -> None:
    result = paired_bootstrap(GOOD, BAD, REFS, samples=300, seed=1)
    expected = sacrebleu.corpus_bleu(GOOD, [REFS]).score - sacrebleu.corpus_bleu(BAD, [REFS]).score
    assert result.gain == pytest.approx(expected)
    assert result.low <= result.gain <= result.high
    assert result.low > 0 and result.no_win_share == 0.0  # GOOD beats BAD on every sentence
    reverse = paired_bootstrap(BAD, GOOD, REFS, samples=300, seed=1)
    assert reverse.gain == pytest.approx(-expected) and reverse.no_win_share == 1.0
    assert (reverse.low, reverse.high) == pytest.approx((-result.high, -result.low))


def test_identical_systems_have_no_gain_and_never_win() -> None:
    result = paired_bootstrap(GOOD, GOOD, REFS, samples=50)
    assert (result.gain, result.low, result.high, result.no_win_share) == (0.0, 0.0, 0.0, 1.0)


def test_same_seed_same_interval_and_more_sentences_narrow_it() -> None:
    assert paired_bootstrap(GOOD, BAD, REFS, seed=3) == paired_bootstrap(GOOD, BAD, REFS, seed=3)
    small = paired_bootstrap(GOOD[:4] + BAD[4:], BAD, REFS, samples=400, seed=0)
    large = paired_bootstrap((GOOD[:4] + BAD[4:]) * 8, BAD * 8, REFS * 8, samples=400, seed=0)
    assert large.high - large.low < small.high - small.low


@pytest.mark.parametrize(("a", "b", "refs", "match"), [
    (GOOD, BAD[:3], REFS, "3 hypotheses for 8 references"),
    ([], [], [], "0 and 0 hypotheses for 0 references"),
])
def test_mismatched_lengths_are_an_error(a: list[str], b: list[str], refs: list[str], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        paired_bootstrap(a, b, refs)
