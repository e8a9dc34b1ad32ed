"""The Sphinx trie LM reader (`wfst.sphinx_lm`) on pocketsphinx's shipped `en-us.lm.bin`, checked against
pocketsphinx's own scoring of the same file (its `NGramModel.prob`) on listed and unlisted n-grams."""

from __future__ import annotations

import math
import random
from pathlib import Path

import pocketsphinx
import pytest

from specbench.errors import DataError
from specbench.wfst.sphinx_lm import read_sphinx_lm

LM = Path(pocketsphinx.get_model_path()) / "en-us" / "en-us.lm.bin"
LOG10_PER_UNIT = math.log(1.0001) / math.log(10.0)


@pytest.fixture(scope="module")
def model():
    return read_sphinx_lm(LM)


def test_the_trie_holds_what_its_header_should_say(model) -> None:
    # the header declares 2,051,547 bigrams; the trie holds six fewer (why pocketsphinx cannot write it)
    assert model.counts == [72_547, 2_051_541, 1_669_625]
    assert ("<s>",) in model.ngrams[0] and ("</s>",) in model.ngrams[0]


def test_probabilities_equal_pocketsphinx_scoring_the_same_file(model) -> None:
    logmath, config = pocketsphinx.LogMath(), pocketsphinx.Config()  # kept alive: the model points at them
    theirs = pocketsphinx.NGramModel(config, logmath, str(LM))
    rng = random.Random(0)
    vocabulary = sorted(w for (w,) in model.ngrams[0] if w != "<s>")
    samples = [g for n in (1, 2, 3) for g in rng.sample(sorted(model.ngrams[n - 1]), 200)]
    samples += [tuple(rng.sample(vocabulary, 3)) for _ in range(200)]  # mostly unlisted: back-off paths
    samples = [g for g in samples if g[-1] != "<s>"]
    worst = max(abs(model.log10_prob(g[-1], g[:-1]) - theirs.prob(list(reversed(g))) * LOG10_PER_UNIT)
                for g in samples)
    # pocketsphinx keeps its scores as integers in base 1.0001: within one such unit (4.3e-5 in log10)
    assert worst < LOG10_PER_UNIT


def test_a_file_that_is_not_a_trie_lm_is_named_with_the_fix(tmp_path) -> None:
    bad = tmp_path / "lm.bin"
    bad.write_bytes(b"Darpa Trigram LM\0")
    with pytest.raises(DataError, match=r"lm\.bin.*not a Sphinx trie language model.*Fix"):
        read_sphinx_lm(bad)
    truncated = tmp_path / "short.lm.bin"
    truncated.write_bytes(LM.read_bytes()[:5000])
    with pytest.raises(DataError, match="truncated or damaged"):
        read_sphinx_lm(truncated)


def test_reading_only_the_top_words_keeps_their_ngrams_unchanged(model) -> None:
    small = read_sphinx_lm(LM, top_words=500)
    ranked = sorted((g for g in model.ngrams[0] if g[0] not in ("<s>", "</s>")), key=lambda g: -model.ngrams[0][g][0])
    kept = {g[0] for g in ranked[:500]} | {"<s>", "</s>"}
    assert {w for (w,) in small.ngrams[0]} == kept
    for n in range(3):
        expected = {g: e for g, e in model.ngrams[n].items() if all(w in kept for w in g)}
        assert small.ngrams[n] == expected
