"""ARPA trigram scoring (`wfst.arpa`) computed by hand from the back-off rule: listed n-grams, back-off
through one and two contexts, contexts listed without a back-off weight (log10 bow 0) or not listed at all; a
word outside a vocabulary without `<unk>`; and a write/read round trip that keeps the back-off weights of
every order below the highest."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import pytest

from specbench.errors import ArpaFormatError, ToolError
from specbench.wfst.arpa import read_arpa, write_arpa
from specbench.wfst.compose import arpa_to_g
from specbench.wfst.graph import read_graph
from specbench.wfst.symbols import word_table

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
    # perplexity leaves it out (it was infinite): -0.4 - 0.7 - 0.3 over three tokens
    assert lm.perplexity([["a", "zzz", "b"]]) == pytest.approx(10 ** (1.4 / 3))
    assert lm.oov_count([["a", "zzz", "b"], ["zzz"]]) == 2


def test_round_trip_keeps_back_off_weights_of_every_lower_order(trigram: Path, tmp_path: Path) -> None:
    lm = read_arpa(trigram)
    assert lm.ngrams[1][("<s>", "a")] == (-0.4, -0.25) and lm.ngrams[1][("b", "</s>")] == (-0.3, 0.0)
    out = tmp_path / "out.arpa"
    write_arpa(lm, out)
    again = read_arpa(out)
    assert again.ngrams == lm.ngrams
    assert again.log10_prob("a", ["a", "b"]) == pytest.approx(-0.95, abs=1e-12)


def _g_cost(g_path: Path, labels: list[int], backoff: int) -> float:
    """The cheapest cost of the word string `labels` through G, back-off arcs (`backoff`) taken freely."""
    g = read_graph(g_path).to_arrays()
    cost = {(g.start, 0): 0.0}
    for _ in range(4 * len(g.final)):  # Bellman-Ford over (state, words read)
        for (s, k), c in list(cost.items()):
            for a in range(g.offsets[s], g.offsets[s + 1]):
                reads = k < len(labels) and g.ilabel[a] == labels[k]
                step = k + 1 if reads else k if g.ilabel[a] == backoff else -1
                key = (int(g.nextstate[a]), step)
                if step >= 0 and c + g.weight[a] < cost.get(key, math.inf):
                    cost[key] = c + float(g.weight[a])
    return min(c + float(g.final[s]) for (s, k), c in cost.items() if k == len(labels))


def test_an_ngram_whose_context_is_not_listed_is_refused_as_g_never_reaches_it(tmp_path: Path) -> None:
    arpa, words_txt, g_path = tmp_path / "lm.arpa", tmp_path / "words.txt", tmp_path / "G.fst"
    arpa.write_text(TRIGRAM.replace("ngram 3=1", "ngram 3=2").replace("<s> a b\n", "<s> a b\n-0.05\tb a b\n"))
    words = word_table(["a", "b"])
    words.write(words_txt)
    arpa_to_g(arpa, words_txt, g_path)
    # G scores "b a b" through p(b | a), as if "b a b" were not listed: bow(<s>) p(b), bow(b) p(a), p(b | a),
    # bow(a b) p(</s> | b); with it the sentence would score -0.05 in place of -0.5
    expected = -math.log(10) * ((-0.5 - 0.7) + (-0.2 - 0.6) + -0.5 + (-0.15 - 0.3))
    cost = _g_cost(g_path, [words["b"], words["a"], words["b"]], words["#0"])
    assert cost == pytest.approx(expected, rel=1e-6)
    with pytest.raises(ArpaFormatError, match="line 19: the 3-gram 'b a b' has no 2-gram 'b a' listed"):
        read_arpa(arpa)


def test_lm_words_missing_from_the_symbol_table_are_named_not_dropped(tmp_path: Path) -> None:
    arpa, words_txt, g_path = tmp_path / "lm.arpa", tmp_path / "words.txt", tmp_path / "G.fst"
    arpa.write_text(TRIGRAM)
    word_table(["a"]).write(words_txt)  # "b" is in the LM only: kaldilm would skip its n-grams with a warning
    with pytest.raises(ToolError, match=r"lm.arpa: 1 word\(s\) of the LM are not in .*words.txt \(b\), so G would "
                                        "lack their n-grams. Fix: build words.txt from the LM's vocabulary"):
        arpa_to_g(arpa, words_txt, g_path)
    assert not g_path.exists()


# "a b c" is listed, and a context of 4-grams, while its suffix "b c" is not; "a b c a" is listed while
# neither "b c a" nor "c a" is
FOURGRAM = """\\data\\
ngram 1=5
ngram 2=4
ngram 3=3
ngram 4=3

\\1-grams:
-1.0\t</s>
-99\t<s>\t-0.5
-0.6\ta\t-0.3
-0.7\tb\t-0.2
-0.8\tc\t-0.4

\\2-grams:
-0.4\t<s> a\t-0.25
-0.5\ta b\t-0.15
-0.3\tb a\t-0.1
-0.3\tc </s>

\\3-grams:
-0.1\t<s> a b\t-0.2
-0.2\ta b c\t-0.35
-0.2\tb a b\t-0.1

\\4-grams:
-0.05\t<s> a b c
-0.1\ta b c a
-0.1\tb a b c

\\end\\
"""


def test_g_scores_ngrams_whose_suffix_is_not_listed_as_the_model(tmp_path: Path) -> None:
    """Pruned models list n-grams whose suffix is not listed: in G (arpa2fst) such an n-gram leads to a state
    that backs off at weight 1 to its longest listed suffix, so every sentence of up to four words costs what
    the model says (no back-off path of this model is cheaper than a listed n-gram, as G would take it)."""
    arpa, words_txt, g_path = tmp_path / "lm.arpa", tmp_path / "words.txt", tmp_path / "G.fst"
    arpa.write_text(FOURGRAM)
    words = word_table(["a", "b", "c"])
    words.write(words_txt)
    arpa_to_g(arpa, words_txt, g_path)
    lm = read_arpa(arpa)
    for sentence in itertools.chain.from_iterable(itertools.product("abc", repeat=n) for n in range(5)):
        cost = _g_cost(g_path, [words[w] for w in sentence], words["#0"])
        assert cost == pytest.approx(-math.log(10) * lm.sentence_log10(sentence), rel=1e-6), sentence


def test_a_zero_probability_reads_as_srilm_writes_it_and_g_is_built(tmp_path: Path) -> None:
    """lmplz writes -inf for a word its discounting left nothing; kaldilm's arpa2fst aborted the process on it
    (its reason hidden in the captured log). Read as -99, written back so, G is built and never prefers it."""
    raw = tmp_path / "raw.arpa"
    raw.write_text("\\data\\\nngram 1=4\n\n\\1-grams:\n-1.0 </s>\n-99 <s> -inf\n-0.3 yes\n-inf no\n\n\\end\\\n")
    model = read_arpa(raw)
    assert model.ngrams[0][("no",)] == (-99.0, 0.0) and model.ngrams[0][("<s>",)] == (-99.0, -99.0)
    write_arpa(model, tmp_path / "lm.arpa")
    assert "inf" not in (tmp_path / "lm.arpa").read_text()
    word_table(["yes", "no"]).write(tmp_path / "words.txt")
    arpa_to_g(tmp_path / "lm.arpa", tmp_path / "words.txt", tmp_path / "G.fst")
    assert (tmp_path / "G.fst").stat().st_size > 0
