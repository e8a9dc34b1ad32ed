"""The graph recipes (Sphinx HCLG, CTC TLG) by hand: `graph.*` metrics, `stats.json` read back or refused, the
LM's perplexity and OOV rate, checks of cached graphs, a graph's FST and directory, the vocabulary, the TLG's LM."""

from __future__ import annotations

import json
import math
import shutil
from dataclasses import asdict

import pytest

from specbench.config.jobs import GraphConfig, LmSection, SphinxGraphSection
from specbench.data.recorded_speech import RecordedUtterance
from specbench.errors import ConfigError, DataError
from specbench.experiments import graph_recipe as tlg
from specbench.experiments import sphinx_graph_recipe as sphinx
from specbench.wfst.arpa import ArpaModel
from specbench.wfst.fst_binary import write_vector_fst
from specbench.wfst.graph import from_arrays
from specbench.wfst.kenlm_tools import kenlm_binary

pytestmark = pytest.mark.unit
SPHINX = sphinx.SphinxGraphStats(10, 20, 5, 3, 4, 1, (5, 6, 7), (3, 4, 2), (1, 0), 8, 2, 9, 100.5, 200.25, 0.1, 0.2,
                                 {"H": 1.5, "CLG": 2.5}, 4.0, 0.5)
TLG = tlg.GraphStats(10, 20, 5, 3, 2, 4, 1, 2, (3, 4), 6, 50.0, 60.0, 61.0, 8, 2, 4.0)  # 2 of 8 test tokens unseen


def test_metrics_hold_every_number_and_one_entry_per_ngram_order() -> None:
    scalars = {k: float(v) for k, v in asdict(SPHINX).items() if not isinstance(v, (tuple, dict))}
    assert SPHINX.metrics() == {**scalars, "ngrams_order1": 3, "ngrams_order2": 4, "ngrams_order3": 2,
                                "ngrams_before_order1": 5, "ngrams_before_order2": 6, "ngrams_before_order3": 7,
                                "stage_seconds.H": 1.5, "stage_seconds.CLG": 2.5}  # no kept_as_context
    scalars = {k: float(v) for k, v in asdict(TLG).items() if k != "ngrams"}
    assert TLG.metrics() == {**scalars, "ngrams_order1": 3, "ngrams_order2": 4, "test_unseen_rate": 0.25}
    assert tlg.GraphStats(**{**asdict(TLG), "test_tokens": 0}).test_unseen_rate == 2.0  # 2 / max(0, 1)


@pytest.mark.parametrize("module, stats", [(sphinx, SPHINX), (tlg, TLG)])
def test_stats_json_reads_back_equal_and_a_damaged_one_names_the_fix(module, stats, tmp_path) -> None:
    for damage in ({}, {"ngrams": 3}, {"extra": 1}):
        (tmp_path / "stats.json").write_text(json.dumps({**asdict(stats), **damage}))  # as build_graph writes it
        if damage:
            with pytest.raises(DataError, match="not the statistics .* Fix: `specbench graph build"):
                module.load_stats(tmp_path)
        else:
            assert module.load_stats(tmp_path) == stats


@pytest.mark.parametrize("sentences, ppl, oov", [
    # p(a) = p(b) = 1/4, p(</s>) = 1/2, x OOV: [a] 1/8, [b b] 1/32, [] 1/2: 2^-9 over 2 + 3 + 1 = 6 tokens
    ([["a", "x"], ["b", "b"], ["x"]], 2 ** 1.5, 2 / 5),
    ([["x"]], 2.0, 1.0),  # only </s>: 1/2 over 1 token
    ([], math.nan, math.nan),
])
def test_perplexity_skips_oov_words_and_counts_the_end_of_sentence(sentences, ppl: float, oov: float) -> None:
    model = ArpaModel(1, [{(w,): (math.log10(p), 0.0) for w, p in (("a", 0.25), ("b", 0.25), ("</s>", 0.5))}])
    assert sphinx._perplexity(model, sentences) == pytest.approx((ppl, oov), rel=1e-9, nan_ok=True)


def test_an_oov_word_starts_the_next_words_context_as_in_kenlm_and_srilm() -> None:
    unigrams = {("<s>",): (-99.0, -0.1), ("a",): (-0.5, -0.2), ("b",): (-0.6, -0.3), ("</s>",): (-0.4, 0.0)}
    bigrams = {("<s>", "a"): (-0.2, 0.0), ("a", "b"): (-0.1, 0.0), ("b", "</s>"): (-0.3, 0.0)}
    model = ArpaModel(2, [unigrams, bigrams])
    # "a x b": p(a | <s>) p(b) p(</s> | b), not p(b | a); "x": p(</s>)
    assert sphinx._perplexity(model, [["a", "x", "b"], ["x"]]) == pytest.approx((10 ** 0.375, 0.5), rel=1e-12)


def test_only_usable_asterisk_and_librivox_transcripts_measure_the_lm() -> None:
    rows = [RecordedUtterance(s, "u", None, "a b", ok) for s, ok in
            [("asterisk", "ok"), ("cards", "ok"), ("asterisk", "not speech"), ("librivox", "ok")]]
    assert sphinx.eval_sentences(rows) == {"asterisk": [["a", "b"]], "librivox": [["a", "b"]]}


def test_a_cached_hclg_directory_is_checked_and_picked_as_the_graph(tmp_path) -> None:
    write_vector_fst(tmp_path / "HCLG.fst", from_arrays(0, [0], src=[0], dest=[0], ilabel=[1], olabel=[1], weight=[0]))
    for name in ("words.txt", "phones.txt"):
        (tmp_path / name).write_text("<eps> 0\nx 1\n")
    with pytest.raises(DataError, match="this cached graph lacks G.fst, lm.arpa"):  # the job reads lm.arpa later
        sphinx.verify(tmp_path)
    for name in ("G.fst", "lm.arpa"):
        (tmp_path / name).write_text("")
    sphinx.verify(tmp_path)
    assert tlg.GraphArtifacts(tmp_path, SPHINX, True).fst == tmp_path / "HCLG.fst"
    assert tlg.GraphArtifacts(tmp_path / "t", TLG, True).fst == tlg.GraphArtifacts(tmp_path / "t", TLG, True).tlg
    with pytest.raises(ConfigError, match='needs the TLG. Fix: point its graph_job at a recipe = "ctc_tlg" job'):
        _ = tlg.GraphArtifacts(tmp_path, SPHINX, True).tlg
    (tmp_path / "phones.txt").write_text("<eps> 0\nx 2\n")
    with pytest.raises(DataError, match="phones.txt: ids are not 0..1"):
        sphinx.verify(tmp_path)
    (tmp_path / "HCLG.fst").write_bytes((tmp_path / "HCLG.fst").read_bytes()[:40])  # truncated
    with pytest.raises(DataError, match="HCLG.fst"):
        sphinx.verify(tmp_path)


@pytest.mark.parametrize("extra, vocab", [(("devel", "test"), "abc"), (("test",), "ac"), ((), "a")])
def test_the_graph_vocabulary_adds_the_words_of_the_extra_splits(extra: tuple, vocab: str) -> None:
    config = GraphConfig(lm=LmSection(extra_vocabulary=extra))
    assert tlg.graph_vocabulary(config, [["a"]], {"devel": [["b"]], "test": [["c", "a"]]}) == set(vocab)


def test_the_lm_pads_interpolation_to_the_graph_vocabulary(tmp_path) -> None:
    kenlm_binary("lmplz", build=False)  # built by `make test`, never here
    config = GraphConfig(lm=LmSection(order=2, interpolate_unigrams=True, memory="64M"))
    model = tlg.estimate_lm(config, [["a", "b"], ["a", "a"], ["b"]], set("abcde"), tmp_path)
    assert (tmp_path / "train.txt").read_text() == "a b\na a\nb\n"
    # mass 1/2 over 5 words + </s> + <unk>: 1/14 each, + 1/6 if seen (test_kenlm_tools_by_hand); no <unk>
    uni = {w: 10 ** p for (w,), (p, _) in model.ngrams[0].items() if w != "<s>"}
    seen = 1 / 6 + 1 / 14
    assert uni == pytest.approx({"a": seen, "b": seen, "</s>": seen, "c": 1 / 14, "d": 1 / 14, "e": 1 / 14}, abs=1e-6)


def test_the_sphinx_graph_directory_is_keyed_by_its_own_config(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("SPECBENCH_HOME", str(tmp_path))
    config = GraphConfig(name="hclg", recipe="sphinx_hclg")
    other = GraphConfig(name="hclg", recipe="sphinx_hclg", sphinx=SphinxGraphSection(prune_threshold=0.0))
    digest = sphinx.inputs_hash(config)
    assert digest != sphinx.inputs_hash(other)
    assert tlg.graph_dir(config) == tmp_path.resolve() / "graphs" / f"hclg-{digest[:16]}"


def test_a_cached_tlg_with_a_damaged_g_fst_is_refused(tiny_tlg) -> None:
    directory = tiny_tlg("g")
    shutil.copyfile(directory / "lm.arpa", directory / "lm.raw.arpa")  # as the recipe writes a graph
    (directory / "G.fst").write_bytes((directory / "G.fst").read_bytes()[:40])  # truncated
    with pytest.raises(DataError, match="G.fst"):
        tlg.verify_graph(directory)
