"""`wfst.ngram_arrays.NgramArrays` on a hand-written trigram ARPA file over <s>, </s>, a and b, every value
worked out by hand: positions of listed and unlisted n-grams (`find`), back-off lookups (`log10_probs`),
including a context that is not listed (no back-off weight, 1 in probability), the chain-rule probability of
each n-gram (`context_log10`) with and without <s> in the model, the lower-order probabilities, each order's
context positions, `subset` and the round trip through `to_model`; and `segment_sums` adding each group's
terms left to right as Python's `sum` does."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from specbench.errors import ArpaFormatError
from specbench.wfst.arpa import ArpaModel, read_arpa
from specbench.wfst.ngram_arrays import NgramArrays, segment_sums

pytestmark = pytest.mark.unit

# Unigram ids in file order: </s> 0, <s> 1, a 2, b 3. Bigram positions: <s> a 0, a b 1, b </s> 2, a a 3.
ARPA = """\\data\\
ngram 1=4
ngram 2=4
ngram 3=1

\\1-grams:
-1.0 </s>
-99 <s> -0.5
-0.5 a -0.3
-0.7 b -0.2

\\2-grams:
-0.2 <s> a -0.1
-0.4 a b 0.0
-0.3 b </s>
-0.6 a a -0.4

\\3-grams:
-0.05 <s> a b

\\end\\
"""
EOS, BOS, A, B = 0, 1, 2, 3


@pytest.fixture
def arrays(tmp_path: Path) -> NgramArrays:
    (tmp_path / "lm.arpa").write_text(ARPA)
    return NgramArrays.from_model(read_arpa(tmp_path / "lm.arpa"))


def test_find_gives_listed_positions_and_minus_one_for_the_rest(arrays) -> None:
    assert arrays.find(np.array([[B], [A]])).tolist() == [3, 2]
    bigrams = np.array([[BOS, A], [A, B], [B, EOS], [A, A], [B, A], [EOS, A]])
    assert arrays.find(bigrams).tolist() == [0, 1, 2, 3, -1, -1]
    # "<s> a b" is trigram 0; "a a b" has a listed context but is not listed; "b a b" has no listed context
    assert arrays.find(np.array([[BOS, A, B], [A, A, B], [B, A, B]])).tolist() == [0, -1, -1]


def test_log10_probs_back_off_as_worked_out_by_hand(arrays) -> None:
    contexts = np.array([[BOS, A], [BOS, A], [BOS, A], [A, B], [B, A], [B, B]])
    words = np.array([B, A, EOS, B, A, EOS])
    expected = [
        -0.05,  # <s> a b listed
        -0.1 - 0.6,  # bow(<s> a) + p(a | a) listed
        -0.1 - 0.3 - 1.0,  # bow(<s> a) + bow(a) + p(</s>)
        0.0 - 0.2 - 0.7,  # bow(a b) 0 + bow(b) + p(b)
        -0.6,  # context "b a" not listed: no weight; p(a | a) listed (not bow of the last bigram, -0.4)
        -0.3,  # context "b b" not listed; p(</s> | b) listed
    ]
    assert arrays.log10_probs(contexts, words).tolist() == pytest.approx(expected, abs=1e-12)
    one = arrays.log10_probs(np.array([[BOS], [BOS], [B]]), np.array([A, B, EOS]))
    assert one.tolist() == pytest.approx([-0.2, -0.5 - 0.7, -0.3], abs=1e-12)
    none = arrays.log10_probs(np.zeros((2, 0), np.int64), np.array([A, EOS]))
    assert none.tolist() == pytest.approx([-0.5, -1.0], abs=1e-12)


def test_context_log10_is_the_chain_rule_starting_after_bos(arrays) -> None:
    # <s> a: p(a | <s>); a b: p(a) p(b | a); b </s>: p(b) p(</s> | b); a a: p(a) p(a | a)
    assert arrays.context_log10(2).tolist() == pytest.approx([-0.2, -0.5 - 0.4, -0.7 - 0.3, -0.5 - 0.6])
    assert arrays.context_log10(3).tolist() == pytest.approx([-0.2 - 0.05])  # p(a | <s>) p(b | <s> a)


def test_context_log10_without_bos_counts_every_word(tmp_path: Path) -> None:
    (tmp_path / "lm.arpa").write_text("\\data\\\nngram 1=3\nngram 2=1\n\n\\1-grams:\n-0.3 x -0.1\n-0.6 y\n"
                                      "-0.9 </s>\n\n\\2-grams:\n-0.2 x y\n\n\\end\\\n")
    arrays = NgramArrays.from_model(read_arpa(tmp_path / "lm.arpa"))
    # x (word 0) is not <s>: p(x) p(y | x)
    assert arrays.context_log10(2).tolist() == pytest.approx([-0.3 - 0.2])


def test_lower_order_probs_drop_the_oldest_word(arrays) -> None:
    # bigrams: p(w) of their last word; trigram <s> a b: p(b | a)
    lower = [10 ** -0.5, 10 ** -0.7, 10 ** -1.0, 10 ** -0.5]
    assert arrays.lower_order_probs(2).tolist() == pytest.approx(lower)
    assert arrays.lower_order_probs(3).tolist() == pytest.approx([10 ** -0.4])


def test_contexts_are_positions_in_the_order_below(arrays) -> None:
    assert arrays.context[0].tolist() == [0, 0, 0, 0]  # the one empty context
    assert arrays.context[1].tolist() == [BOS, A, B, A]
    assert arrays.context[2].tolist() == [0]  # "<s> a" is bigram 0
    assert [arrays.count(n) for n in (1, 2, 3)] == [4, 4, 1]
    assert arrays.bow[1].tolist() == [-0.1, 0.0, 0.0, -0.4] and arrays.logp[2].tolist() == [-0.05]


def test_subset_renumbers_words_and_to_model_gives_the_listed_entries(arrays) -> None:
    keep = [np.array([True, True, True, False]), np.array([True, False, False, True]), np.array([False])]
    small = arrays.subset(keep)
    assert small.words == ["</s>", "<s>", "a"]
    assert small.ids[1].tolist() == [[BOS, A], [A, A]]
    assert small.context[1].tolist() == [BOS, A]
    model = small.to_model()
    assert model.ngrams == [{("</s>",): (-1.0, 0.0), ("<s>",): (-99.0, -0.5), ("a",): (-0.5, -0.3)},
                            {("<s>", "a"): (-0.2, -0.1), ("a", "a"): (-0.6, -0.4)}, {}]
    # p(a | <s> a) in the subset: bow(<s> a) -0.1 + p(a | a) -0.6
    assert small.log10_probs(np.array([[BOS, A]]), np.array([A])).tolist() == pytest.approx([-0.7])


def test_a_word_missing_from_the_unigrams_is_refused() -> None:
    model = ArpaModel(2, [{("a",): (-0.5, 0.0), ("</s>",): (-0.5, 0.0)}, {("a", "z"): (-0.1, 0.0)}])
    with pytest.raises(ArpaFormatError, match="'z' is in a 2-gram but not among the unigrams"):
        NgramArrays.from_model(model)


def test_segment_sums_add_left_to_right_per_group() -> None:
    # group 1: (0.1 + 0.2) + 0.3 = 0.6000000000000001 in binary floating point (0.1 + (0.2 + 0.3) = 0.6);
    # group 0: 4.0; group 2: 5.0 + 7.0; group 3: nothing
    values = np.array([0.1, 5.0, 0.2, 4.0, 0.3, 7.0])
    sums = segment_sums(values, np.array([1, 2, 1, 0, 1, 2]), 4)
    assert sums.tolist() == [4.0, 0.6000000000000001, 12.0, 0.0]
    assert segment_sums(np.empty(0), np.empty(0, np.int64), 0).tolist() == []
