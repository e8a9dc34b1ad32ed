"""KenLM's `lmplz` and `query` as `wfst.kenlm_tools` drives them, on a three-sentence corpus whose modified
Kneser-Ney model is worked out by hand: the unknown-word mass with and without unigram interpolation (and
with a padded vocabulary), the bigram probabilities and back-offs, the order, the discount fallback that a
tiny corpus needs, the memory option, `query`'s perplexity with an unknown word, and where the binaries
are looked up (`SPECBENCH_LMPLZ`, `.specbench/bin`) with the errors that name the fix.

The binaries are the ones `make test` builds into `.specbench/bin` (or `SPECBENCH_LMPLZ` names)."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

from specbench.errors import ToolError
from specbench.wfst import kenlm_tools
from specbench.wfst.arpa import read_arpa, spread_unknown, write_arpa
from specbench.wfst.kenlm_tools import estimate_arpa, kenlm_binary, query_perplexity

pytestmark = pytest.mark.unit

# <s> a b </s> / <s> a a </s> / <s> b </s>
CORPUS = "a b\na a\nb\n"
# Bigram counts: <s> a 2, b </s> 2, a b 1, a a 1, a </s> 1, <s> b 1. Unigram adjusted (continuation) counts:
# a {<s>, a}, b {a, <s>}, </s> {b, a}: 2 each, sum 6. No unigram has adjusted count 1, so the unigram
# discounts cannot be estimated and --discount_fallback uses (0.5, 1, 1.5); the bigrams have no count 3
# either, so they fall back too.
# Unigrams: p*(w) = (2 - 1) / 6 = 1/6 each, discounted mass gamma = 3 * 1/6 = 1/2.
# Bigrams of context a (a, b, </s> once each): p*(w | a) = 0.5 / 3 = 1/6, bow(a) = 3 * 0.5 / 3 = 1/2.
# Context b (</s> twice): p*(</s> | b) = (2 - 1) / 2 = 1/2, bow(b) = 1 / 2.
# Context <s> (a twice, b once): p*(a | <s>) = (2 - 1) / 3 = 1/3, bow(<s>) = (1 + 0.5) / 3 = 1/2.


MEMORY = "64M"  # lmplz's sorting memory (-S): plenty for three sentences


def _close(value: float, probability: float) -> bool:
    return abs(value - math.log10(probability)) < 1e-6  # the ARPA prints 7-8 significant digits


@pytest.fixture(scope="module")
def built() -> None:
    """The binaries must already be built: a unit test never starts the minutes-long KenLM build."""
    for name in ("lmplz", "query"):
        kenlm_binary(name, build=False)


@pytest.fixture()
def corpus(tmp_path: Path) -> Path:
    path = tmp_path / "train.txt"
    path.write_text(CORPUS, encoding="utf-8")
    return path


def test_without_unigram_interpolation_unk_gets_the_whole_discounted_mass(built, corpus, tmp_path) -> None:
    arpa = tmp_path / "lm.arpa"
    log = estimate_arpa(corpus, arpa, 2, memory=MEMORY)  # interpolate_unigrams=False, discount_fallback=True
    assert "ARPA" in log  # lmplz's progress log (stderr) is returned
    model = read_arpa(arpa)
    assert model.counts == [5, 6]  # <unk> <s> </s> a b; the six bigrams seen
    uni, bi = model.ngrams
    assert _close(uni[("<unk>",)][0], 1 / 2)  # gamma, all of it
    for w in ("a", "b", "</s>"):
        assert _close(uni[(w,)][0], 1 / 6)
    # interpolated bigrams: p*(w | h) + bow(h) * p(w), with p(w) = 1/6
    assert _close(bi[("a", "a")][0], 1 / 6 + 1 / 2 * 1 / 6)  # 1/4
    assert _close(bi[("b", "</s>")][0], 1 / 2 + 1 / 2 * 1 / 6)  # 7/12
    assert _close(bi[("<s>", "a")][0], 1 / 3 + 1 / 2 * 1 / 6)  # 5/12
    assert _close(bi[("<s>", "b")][0], 0.5 / 3 + 1 / 2 * 1 / 6)  # 1/4
    for w in ("<s>", "a", "b"):
        assert _close(uni[(w,)][1], 1 / 2)


def test_with_unigram_interpolation_the_uniform_share_goes_to_each_word(built, corpus, tmp_path) -> None:
    # no padding: uniform over the 4 words that can be predicted (a, b, </s>, <unk>; not <s>)
    plain = tmp_path / "plain.arpa"
    estimate_arpa(corpus, plain, 2, interpolate_unigrams=True, memory=MEMORY)
    model = read_arpa(plain)
    assert _close(model.ngrams[0][("<unk>",)][0], 1 / 2 * 1 / 4)
    assert _close(model.ngrams[0][("a",)][0], 1 / 6 + 1 / 2 * 1 / 4)
    # padded to 10 words: each word gets 1/10 of gamma, <unk> included (it then stands for each padded word)
    padded = tmp_path / "padded.arpa"
    estimate_arpa(corpus, padded, 2, vocab_pad=10, interpolate_unigrams=True, memory=MEMORY)
    model = read_arpa(padded)
    assert _close(model.ngrams[0][("<unk>",)][0], 1 / 2 * 1 / 10)
    assert _close(model.ngrams[0][("a",)][0], 1 / 6 + 1 / 2 * 1 / 10)
    # vocab_pad means nothing without interpolation: the whole mass still goes to <unk>
    estimate_arpa(corpus, padded, 2, vocab_pad=10, memory=MEMORY)
    assert _close(read_arpa(padded).ngrams[0][("<unk>",)][0], 1 / 2)


@pytest.mark.parametrize("interpolate", [False, True])
def test_unseen_graph_words_take_the_unknown_mass_and_the_unigrams_still_sum_to_one(built, corpus, tmp_path,
                                                                                   interpolate: bool) -> None:
    # The graph knows c, d, e too. Without interpolation <unk> holds gamma = 1/2 for the three together:
    # 1/6 each. With interpolation over the graph's 5 words, </s> and <unk> (vocab_pad 7), gamma / 7 goes to
    # every one of them and <unk>'s 1/14 is what each unseen word is due; a, b, </s> get 1/6 + 1/14 each.
    arpa = tmp_path / "lm.arpa"
    estimate_arpa(corpus, arpa, 2, vocab_pad=5 + 2, interpolate_unigrams=interpolate, memory=MEMORY)
    model = spread_unknown(read_arpa(arpa), ["c", "d", "e"], unk_is_one_word=interpolate)
    uni = {w: 10 ** logp for (w,), (logp, _) in model.ngrams[0].items() if w != "<s>"}
    each_unseen = 1 / 14 if interpolate else 1 / 6
    assert uni == pytest.approx({"a": 1 / 6 + (1 / 14 if interpolate else 0), "b": uni["a"], "</s>": uni["a"],
                                 "c": each_unseen, "d": each_unseen, "e": each_unseen}, abs=1e-6)
    # interpolated: the one share <unk> itself held (1/14) is the only mass the graph cannot use
    assert sum(uni.values()) == pytest.approx(1 - 1 / 14 if interpolate else 1, abs=1e-6)


def test_the_order_sets_the_highest_ngram_level(built, corpus, tmp_path) -> None:
    arpa = tmp_path / "lm3.arpa"
    estimate_arpa(corpus, arpa, 3, memory=MEMORY)
    model = read_arpa(arpa)
    assert model.order == 3
    # trigrams seen: <s> a b, a b </s>, <s> a a, a a </s>, <s> b </s>
    assert set(model.ngrams[2]) == {("<s>", "a", "b"), ("a", "b", "</s>"), ("<s>", "a", "a"),
                                    ("a", "a", "</s>"), ("<s>", "b", "</s>")}


def test_a_tiny_corpus_fails_without_the_discount_fallback_and_names_the_fix(built, corpus, tmp_path) -> None:
    fix = r"(?s)lmplz failed on .*train\.txt.*--discount_fallback.*Fix: check the text"
    with pytest.raises(ToolError, match=fix):
        estimate_arpa(corpus, tmp_path / "lm.arpa", 2, discount_fallback=False, memory=MEMORY)


def test_the_memory_option_reaches_lmplz(built, corpus, tmp_path) -> None:
    with pytest.raises(ToolError, match=r"(?s)lmplz failed.*Failed to parse 1Q into a memory size"):
        estimate_arpa(corpus, tmp_path / "lm.arpa", 2, memory="1Q")


def test_query_perplexity_counts_the_unknown_word_and_the_end_of_sentence(built, corpus, tmp_path) -> None:
    arpa = tmp_path / "lm.arpa"
    estimate_arpa(corpus, arpa, 2, memory=MEMORY)
    # "a zzz": p(a | <s>) = 5/12; zzz is <unk>: "a <unk>" unlisted, bow(a) * p(<unk>) = 1/2 * 1/2 = 1/4;
    # </s> after <unk> (no bigrams, no back-off weight): p(</s>) = 1/6. Three tokens.
    # "b": p(b | <s>) = 1/4, p(</s> | b) = 7/12. Two tokens.
    log10_total = math.log10(5 / 12 * 1 / 4 * 1 / 6) + math.log10(1 / 4 * 7 / 12)
    expected = 10 ** (-log10_total / 5)  # about 3.306 (query prints about 3.152 without the unknown word)
    assert query_perplexity(arpa, ["a zzz", "b"]) == pytest.approx(expected, rel=1e-5)


def test_perplexity_without_unk_leaves_oovs_out_as_query_does(built, corpus, tmp_path) -> None:
    arpa = tmp_path / "lm.arpa"
    estimate_arpa(corpus, arpa, 3, memory=MEMORY)
    lm = spread_unknown(read_arpa(arpa), [])  # a graph LM: no <unk>
    write_arpa(lm, arpa)
    sentences = [["a", "zzz", "b"], ["zzz"], ["b", "a", "b"]]
    query = query_perplexity(arpa, [" ".join(s) for s in sentences], oovs=False)
    assert lm.oov_count(sentences) == 2 and lm.perplexity(sentences) == pytest.approx(query, rel=1e-5)


def test_query_on_a_file_that_is_no_arpa_fails_with_its_name(built, tmp_path) -> None:
    bad = tmp_path / "bad.arpa"
    bad.write_text("not an ARPA file\n", encoding="utf-8")
    with pytest.raises(ToolError, match=r"KenLM query failed on .*bad\.arpa"):
        query_perplexity(bad, ["a"])


def test_specbench_lmplz_names_the_folder_of_both_tools(monkeypatch, tmp_path) -> None:
    (tmp_path / "lmplz").write_text("", encoding="utf-8")
    (tmp_path / "query").write_text("", encoding="utf-8")
    monkeypatch.setenv("SPECBENCH_LMPLZ", str(tmp_path / "lmplz"))
    assert kenlm_binary("lmplz") == tmp_path / "lmplz"
    assert kenlm_binary("query") == tmp_path / "query"  # looked up beside lmplz
    (tmp_path / "query").unlink()
    with pytest.raises(ToolError, match=r"SPECBENCH_LMPLZ=.*query does not exist.*Fix"):
        kenlm_binary("query")


def test_an_unknown_tool_name_is_refused(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("SPECBENCH_LMPLZ", str(tmp_path / "lmplz"))
    with pytest.raises(ValueError, match=r"unknown KenLM tool 'build_binary'"):
        kenlm_binary("build_binary")


def test_the_work_dir_bin_is_used_and_a_missing_tool_is_named_or_built(monkeypatch, tmp_path) -> None:
    monkeypatch.delenv("SPECBENCH_LMPLZ", raising=False)
    monkeypatch.setenv("SPECBENCH_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))  # no cmake: a build, if one started, stops at once
    bin_dir = tmp_path / "home" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "lmplz").write_text("", encoding="utf-8")
    assert kenlm_binary("lmplz", build=False) == bin_dir / "lmplz"
    with pytest.raises(ToolError, match=r"bin/query is not built yet.*Fix: run `specbench graph build"):
        kenlm_binary("query", build=False)
    # with build (the default) it starts the build, which first checks for cmake: none on this PATH
    with pytest.raises(ToolError, match=r"`cmake` is not installed.*Fix: apt-get install cmake g\+\+"):
        kenlm_binary("query")


def test_a_failing_build_step_reports_its_exit_status_and_output(tmp_path) -> None:
    log = tmp_path / "build.log"
    cmd = [sys.executable, "-c", "print('no Boost found'); raise SystemExit(3)"]
    with pytest.raises(ToolError, match=r"(?s)while compiling \(exit 3\).*no Boost found.*Fix: install"):
        kenlm_tools._run(cmd, tmp_path, "compiling", log)
    kenlm_tools._run([sys.executable, "-c", "print('ok')"], tmp_path, "configuring", log)  # exit 0: no error
    assert log.read_text().splitlines() == ["no Boost found", "ok"]  # both steps appended to one log
