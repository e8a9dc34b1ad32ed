"""ARPA trigram scoring (`wfst.arpa`) computed by hand from the back-off rule: listed n-grams, back-off
through one and two contexts, contexts listed without a back-off weight (log10 bow 0) or not listed at all; a
word outside a vocabulary without `<unk>`; and a write/read round trip that keeps the back-off weights of
every order below the highest."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from specbench.wfst.arpa import read_arpa, write_arpa

pytestmark = pytest.mark.unit

TRIGRAM = """\\data\\
ngram 1=4
ngram 2=3
ngram 3=1

\\1-grams:
-1.0\t</s>
-99\t<s>\t-0.5
-0.6\ta\t-0.3
-0.7\tb\t-0.2

\\2-grams:
-0.4\t<s> a\t-0.25
-0.5\ta b\t-0.15
-0.3\tb </s>

\\3-grams:
-0.1\t<s> a b

\\end\\
"""


@pytest.fixture()
def trigram(tmp_path: Path) -> Path:
    path = tmp_path / "tri.arpa"
    path.write_text(TRIGRAM)
    return path


@pytest.mark.parametrize(
    ("word", "context", "expected"),
    [
        ("b", ["<s>", "a"], -0.1),                 # listed trigram
        ("a", ["<s>", "a"], -0.25 - 0.3 - 0.6),    # bow(<s> a) + bow(a) + p(a)
        ("</s>", ["a", "b"], -0.15 - 0.3),         # bow(a b) + p(</s> | b)
        ("a", ["a", "b"], -0.15 - 0.2 - 0.6),      # bow(a b) + bow(b) + p(a): two back-offs
        ("b", ["b", "a"], -0.5),                   # context "b a" not listed: bow 1, then p(b | a)
        ("</s>", ["b", "a"], -0.3 - 1.0),          # no bow("b a"), bow(a) + p(</s>)
        ("a", ["b", "</s>"], -0.6),                # "b </s>" and "</s>" listed without a bow: log10 bow 0
        ("b", ["x", "y", "<s>", "a"], -0.1),       # only the last order - 1 words count
    ],
)
def test_trigram_back_off_by_hand(trigram: Path, word: str, context: list[str], expected: float) -> None:
    assert read_arpa(trigram).log10_prob(word, context) == pytest.approx(expected, abs=1e-12)


def test_trigram_sentence_and_perplexity_by_hand(trigram: Path) -> None:
    lm = read_arpa(trigram)
    # p(a | <s>) p(b | <s> a) p(</s> | a b) = -0.4 - 0.1 - 0.45
    assert lm.sentence_log10(["a", "b"]) == pytest.approx(-0.95, abs=1e-12)
    assert lm.perplexity([["a", "b"]]) == pytest.approx(10 ** (0.95 / 3))


def test_a_word_outside_a_vocabulary_without_unk_has_probability_zero(trigram: Path) -> None:
    lm = read_arpa(trigram)
    assert lm.log10_prob("zzz", ["a"]) == -math.inf
    assert lm.sentence_log10(["a", "zzz"]) == -math.inf


def test_round_trip_keeps_back_off_weights_of_every_lower_order(trigram: Path, tmp_path: Path) -> None:
    lm = read_arpa(trigram)
    assert lm.ngrams[1][("<s>", "a")] == (-0.4, -0.25) and lm.ngrams[1][("b", "</s>")] == (-0.3, 0.0)
    out = tmp_path / "out.arpa"
    write_arpa(lm, out)
    again = read_arpa(out)
    assert again.ngrams == lm.ngrams
    assert again.log10_prob("a", ["a", "b"]) == pytest.approx(-0.95, abs=1e-12)
