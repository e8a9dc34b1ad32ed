"""The Sphinx trie LM reader (`wfst.sphinx_lm`) on tiny models written by pocketsphinx from ARPA files whose
values are set by hand: every probability and back-off of a bigram, a trigram and a 4-gram model read back
as listed (vocabularies and n-gram counts that need every bit of their fields; each middle order's own
quantization tables), back-off scoring through the read bigram back-offs, `top_words` keeping exactly the
n-grams whose words are all among the most probable ones (ties kept in listed order), and damaged files
(order 1, child ranges that do not add up, pointers past the data, a word list of the wrong length) refused
with the fix."""

from __future__ import annotations

import struct
from pathlib import Path

import pocketsphinx
import pytest

from specbench.errors import DataError
from specbench.wfst.sphinx_lm import read_sphinx_lm

pytestmark = pytest.mark.unit

# four words (a power of two): a word id needs 3 bits (ids 0..4 with the end marker); 4 bigrams
BIGRAM = {
    1: {("</s>",): (-0.9, 0.0), ("<s>",): (-99.0, -0.5), ("a",): (-0.4, -0.3), ("b",): (-0.6, -0.2)},
    2: {("<s>", "a"): (-0.1, 0.0), ("a", "b"): (-0.7, 0.0), ("b", "</s>"): (-0.2, 0.0),
        ("b", "a"): (-0.3, 0.0)},
}
# five words, six bigrams, four trigrams (a power of two: a bigram's child pointer needs 3 bits);
# every trigram's suffix bigram is listed, so the writer adds nothing
TRIGRAM = {
    1: {("</s>",): (-1.0, 0.0), ("<s>",): (-99.0, -0.5), ("a",): (-0.6, -0.3), ("b",): (-0.7, -0.2),
        ("c",): (-0.8, -0.1)},
    2: {("<s>", "a"): (-0.4, -0.25), ("a", "b"): (-0.5, -0.15), ("a", "c"): (-0.45, -0.35),
        ("b", "</s>"): (-0.3, 0.0), ("b", "c"): (-0.2, 0.0), ("c", "</s>"): (-0.15, 0.0)},
    3: {("<s>", "a", "b"): (-0.1, 0.0), ("<s>", "a", "c"): (-0.05, 0.0), ("a", "b", "</s>"): (-0.12, 0.0),
        ("a", "c", "</s>"): (-0.08, 0.0)},
}

# two middle orders, each with its own probability and back-off tables in the file
FOURGRAM = {
    1: {("</s>",): (-0.9, 0.0), ("<s>",): (-99.0, -0.5), ("a",): (-0.4, -0.3), ("b",): (-0.6, -0.2)},
    2: {("<s>", "a"): (-0.1, -0.11), ("a", "b"): (-0.7, -0.17), ("b", "</s>"): (-0.2, -0.13)},
    3: {("<s>", "a", "b"): (-0.3, -0.19), ("a", "b", "</s>"): (-0.25, -0.23)},
    4: {("<s>", "a", "b", "</s>"): (-0.05, 0.0)},
}


def _write_arpa(levels: dict, path: Path) -> None:
    lines = ["\\data\\", *(f"ngram {n}={len(grams)}" for n, grams in levels.items()), ""]
    for n, grams in levels.items():
        lines.append(f"\\{n}-grams:")
        for words, (p, b) in grams.items():
            lines.append(f"{p}\t{' '.join(words)}" + (f"\t{b}" if n < len(levels) else ""))
        lines.append("")
    path.write_text("\n".join([*lines, "\\end\\", ""]), encoding="utf-8")


def _sphinx_bin(levels: dict, tmp_path: Path, name: str) -> Path:
    """The ARPA model `levels` written by pocketsphinx as a binary trie LM."""
    arpa, out = tmp_path / f"{name}.arpa", tmp_path / f"{name}.lm.bin"
    _write_arpa(levels, arpa)
    logmath, config = pocketsphinx.LogMath(), pocketsphinx.Config()  # kept alive while the model is used
    model = pocketsphinx.NGramModel(config, logmath, str(arpa))
    model.write(str(out), pocketsphinx.NGramModel.str_to_type("bin"))
    return out


def _assert_same(read: dict, listed: dict) -> None:
    assert set(read) == set(listed)
    for words, (p, b) in listed.items():  # float32 values in base-1.0001 units: 1e-6 in log10, 1e-7 relative
        assert read[words] == pytest.approx((p, b), rel=1e-7, abs=1e-6), words


@pytest.fixture(scope="module")
def trigram_bin(tmp_path_factory) -> Path:
    return _sphinx_bin(TRIGRAM, tmp_path_factory.mktemp("sphinx"), "tri")


def test_a_bigram_model_of_four_words_reads_back_as_listed(tmp_path) -> None:
    model = read_sphinx_lm(_sphinx_bin(BIGRAM, tmp_path, "bi"))
    assert model.order == 2 and model.counts == [4, 4]
    _assert_same(model.ngrams[0], BIGRAM[1])
    _assert_same(model.ngrams[1], BIGRAM[2])  # the highest order: back-off 0


def test_a_trigram_model_reads_back_every_probability_and_back_off(trigram_bin) -> None:
    model = read_sphinx_lm(trigram_bin)
    assert model.order == 3 and model.counts == [5, 6, 4]
    for n in (1, 2, 3):
        _assert_same(model.ngrams[n - 1], TRIGRAM[n])


def test_a_four_gram_model_reads_each_middle_order_from_its_own_tables(tmp_path) -> None:
    model = read_sphinx_lm(_sphinx_bin(FOURGRAM, tmp_path, "four"))
    assert model.order == 4 and model.counts == [4, 3, 2, 1]
    for n in (1, 2, 3, 4):
        _assert_same(model.ngrams[n - 1], FOURGRAM[n])


def test_unlisted_trigrams_back_off_through_the_read_weights(trigram_bin) -> None:
    model = read_sphinx_lm(trigram_bin)
    # p(</s> | <s> a): bow(<s> a) -0.25 + bow(a) -0.3 + p(</s>) -1.0
    assert model.log10_prob("</s>", ["<s>", "a"]) == pytest.approx(-1.55, abs=1e-6)
    # p(c | a b): bow(a b) -0.15 + p(c | b) -0.2
    assert model.log10_prob("c", ["a", "b"]) == pytest.approx(-0.35, abs=1e-6)
    # p(b | a c): bow(a c) -0.35 + bow(c) -0.1 + p(b) -0.7
    assert model.log10_prob("b", ["a", "c"]) == pytest.approx(-1.15, abs=1e-6)


def test_top_words_keeps_the_ngrams_of_the_most_probable_words_and_the_markers(trigram_bin) -> None:
    # unigram ranks (markers aside): a -0.6, b -0.7, c -0.8; the two best are a and b
    small = read_sphinx_lm(trigram_bin, top_words=2)
    kept = {"<s>", "</s>", "a", "b"}
    for n in (1, 2, 3):
        expected = {g: e for g, e in TRIGRAM[n].items() if set(g) <= kept}
        _assert_same(small.ngrams[n - 1], expected)
    # by hand: <s> a, a b, b </s> stay; a c, b c (c last), c </s> (c first) go; <s> a b and a b </s> stay
    assert set(small.ngrams[1]) == {("<s>", "a"), ("a", "b"), ("b", "</s>")}
    assert set(small.ngrams[2]) == {("<s>", "a", "b"), ("a", "b", "</s>")}
    one = read_sphinx_lm(trigram_bin, top_words=1)
    assert set(one.ngrams[0]) == {("<s>",), ("</s>",), ("a",)}
    assert set(one.ngrams[1]) == {("<s>", "a")} and one.ngrams[2] == {}


def test_top_words_breaks_ties_in_the_order_the_words_are_listed(tmp_path) -> None:
    # 20 words of equal unigram probability: the first three listed are kept, whatever the sort does with ties
    words = [f"w{i:02d}" for i in range(20)]
    levels = {1: {("</s>",): (-1.5, 0.0), ("<s>",): (-99.0, -0.5), **{(w,): (-1.3, -0.2) for w in words}},
              2: {("<s>", w): (-1.2, 0.0) for w in words}}
    small = read_sphinx_lm(_sphinx_bin(levels, tmp_path, "ties"), top_words=3)
    assert set(small.ngrams[0]) == {("<s>",), ("</s>",), ("w00",), ("w01",), ("w02",)}
    assert set(small.ngrams[1]) == {("<s>", "w00"), ("<s>", "w01"), ("<s>", "w02")}


def _layout(data: bytes) -> tuple[int, tuple[int, ...], int]:
    """(order, counts, byte offset of the unigram table) by the documented format."""
    order = data[19]
    counts = struct.unpack_from(f"<{order}I", data, 20)
    bins = (2 * (order - 2) + 1) * 65536 * 4
    return order, counts, 20 + 4 * order + 4 + bins


def test_a_model_of_order_one_is_refused(tmp_path) -> None:
    path = tmp_path / "uni.lm.bin"
    path.write_bytes(b"Trie Language Model" + bytes([1]) + struct.pack("<I", 3) + bytes(64))
    with pytest.raises(DataError, match=r"uni\.lm\.bin: order 1: only models of order 2 or more.*Fix"):
        read_sphinx_lm(path)


def test_damaged_child_pointers_are_refused(trigram_bin, tmp_path) -> None:
    data = bytearray(trigram_bin.read_bytes())
    _, counts, unigrams = _layout(bytes(data))
    # the first unigram's children start at bigram 1: the ranges cover 5 of the 6 bigrams
    shifted = bytearray(data)
    struct.pack_into("<I", shifted, unigrams + 8, 1)
    (tmp_path / "shifted.lm.bin").write_bytes(shifted)
    with pytest.raises(DataError, match=r"truncated or damaged.*child ranges cover 5 of 6"):
        read_sphinx_lm(tmp_path / "shifted.lm.bin")
    # the end marker's pointer claims 1000 bigrams: far past the packed bigram bytes
    past = bytearray(data)
    struct.pack_into("<I", past, unigrams + 12 * counts[0] + 8, 1000)
    (tmp_path / "past.lm.bin").write_bytes(past)
    with pytest.raises(DataError, match=r"past\.lm\.bin: truncated or damaged"):
        read_sphinx_lm(tmp_path / "past.lm.bin")


def test_a_word_list_of_the_wrong_length_is_refused(trigram_bin, tmp_path) -> None:
    data = trigram_bin.read_bytes()
    text = b"</s>\0<s>\0a\0b\0c\0"  # the words, NUL-terminated, at the end of the file after their byte count
    assert data.endswith(struct.pack("<i", len(text)) + text)
    extra = text + b"d\0"
    (tmp_path / "extra.lm.bin").write_bytes(data[: -len(text) - 4] + struct.pack("<i", len(extra)) + extra)
    with pytest.raises(DataError, match=r"6 word strings for 5 unigrams"):
        read_sphinx_lm(tmp_path / "extra.lm.bin")
    short = b"</s>\0<s>\0a\0b\0"
    (tmp_path / "short.lm.bin").write_bytes(data[: -len(text) - 4] + struct.pack("<i", len(short)) + short)
    with pytest.raises(DataError, match=r"4 word strings for 5 unigrams"):
        read_sphinx_lm(tmp_path / "short.lm.bin")
