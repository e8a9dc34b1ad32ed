"""ARPA reading, back-off scoring, writing and the spreading of the unknown-word mass."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from specbench.errors import ArpaFormatError
from specbench.wfst.arpa import read_arpa, spread_unknown, write_arpa

pytestmark = pytest.mark.unit

TOY = """
\\data\\
ngram 1=5
ngram 2=3

\\1-grams:
-1.0\t<unk>\t0
-99\t<s>\t-0.30103
-0.5\t</s>
-0.4\ta\t-0.2
-0.8\tb\t-0.1

\\2-grams:
-0.2\t<s> a
-0.3\ta b
-0.1\tb </s>

\\end\\
"""


@pytest.fixture()
def toy(tmp_path: Path) -> Path:
    path = tmp_path / "toy.arpa"
    path.write_text(TOY)
    return path


def test_backoff_scoring(toy: Path) -> None:
    lm = read_arpa(toy)
    assert lm.order == 2 and lm.counts == [5, 3]
    assert lm.log10_prob("a", ["<s>"]) == pytest.approx(-0.2)            # listed bigram
    assert lm.log10_prob("b", ["<s>"]) == pytest.approx(-0.30103 - 0.8)  # bow(<s>) + p(b)
    assert lm.log10_prob("a", ["b"]) == pytest.approx(-0.1 - 0.4)
    assert lm.log10_prob("zzz", ["a"]) == pytest.approx(-0.2 - 1.0)      # unknown -> <unk>
    assert lm.sentence_log10(["a", "b"]) == pytest.approx(-0.2 - 0.3 - 0.1)
    assert lm.perplexity([["a", "b"]]) == pytest.approx(10 ** (0.6 / 3))


def test_an_unknown_word_in_the_context_is_unk(tmp_path: Path) -> None:
    """<unk>'s back-off weight applies after an unknown word, as KenLM's query applies it; it did not."""
    path = tmp_path / "unk.arpa"
    path.write_text(TOY.replace("<unk>\t0", "<unk>\t-0.5"))
    assert read_arpa(path).log10_prob("b", ["zzz"]) == pytest.approx(-0.5 - 0.8)


def test_write_read_round_trip(toy: Path, tmp_path: Path) -> None:
    lm = read_arpa(toy)
    out = tmp_path / "out.arpa"
    write_arpa(lm, out)
    again = read_arpa(out)
    assert again.ngrams == lm.ngrams


def test_spread_unknown_keeps_the_mass(toy: Path) -> None:
    lm = read_arpa(toy)
    spread = spread_unknown(lm, ["c", "d", "a"])  # "a" is known and ignored
    assert ("<unk>",) not in spread.ngrams[0]
    shares = [10 ** spread.ngrams[0][(w,)][0] for w in ("c", "d")]
    assert shares == pytest.approx([0.05, 0.05])
    assert sum(shares) == pytest.approx(10 ** lm.ngrams[0][("<unk>",)][0])
    assert spread.log10_prob("c", ["a"]) == pytest.approx(-0.2 + math.log10(0.05))
    assert spread_unknown(lm, []).vocabulary == lm.vocabulary - {"<unk>"}


def test_a_byte_order_mark_comments_and_blank_lines_are_read(toy: Path, tmp_path: Path) -> None:
    """As KenLM's `query` reads '#' lines before the header and blank lines inside a section."""
    path = tmp_path / "lm.arpa"
    path.write_text("\ufeff# by hand\n" + TOY.replace("\n-0.3\ta b", "\n\n-0.3\ta b"), encoding="utf-8")
    assert read_arpa(path).ngrams == read_arpa(toy).ngrams


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda t: t.replace("\\data\\", "\\date\\"), "expected the ARPA header"),
        (lambda t: t.replace("ngram 2=3", "ngram 3=3"), "expected 'ngram 2=COUNT'"),
        (lambda t: t.replace("ngram 2=3", "ngram 2=4"), "line 13: .* promises 4 2-grams but this section"),
        (lambda t: "made by hand" + t, "line 1: expected .*found 'made by hand'; only blank lines"),
        (lambda t: t.replace("-0.3\ta b", "x\ta b"), "not a number"),
        (lambda t: t.replace("-0.3\ta b", "-0.3\ta"), "a 2-gram line needs"),
        (lambda t: t.replace("\\end\\", ""), "after line 18\\): expected the closing .* found nothing"),
        (lambda t: t.split("\\2-grams:")[0], "expected '\\\\2-grams:'"),
        (lambda t: "", "expected the ARPA header"),
        (lambda t: t.replace("-0.3\ta b", "nan\ta b"), "line 15: .* no valid log10 probability"),
        (lambda t: t.replace("-0.3\ta b", "0.3\ta b"), "line 15: .* no valid log10 probability"),
        (lambda t: t.replace("-0.4\ta\t-0.2", "-0.4\ta\tnan"), "line 10: .* back-off weight"),
        (lambda t: t.replace("ngram 2=3", "ngram 2=4").replace("-0.1\tb </s>", "-0.1\tb </s>\n-0.2\t<s> a"),
         "line 17: the 2-gram '<s> a' is listed again \\(first on line 14\\)"),
        (lambda t: t.replace("-0.3\ta b", "-0.3\tc b"), "line 15: the 2-gram 'c b' has no 1-gram 'c'"),
        (lambda t: t.replace("-0.3\ta b", "-0.3\ta c"), "line 15: .* ends in a word that is not among"),
    ],
)
def test_bad_files_name_the_file_and_fix(tmp_path: Path, mutate, message: str) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "bad.arpa"
    path.write_text(mutate(TOY))
    with pytest.raises(ArpaFormatError, match=message) as err:
        read_arpa(path)
    assert str(path) in str(err.value) and "Fix:" in str(err.value)
