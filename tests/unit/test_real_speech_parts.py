"""Parts of the real-speech job (`experiments.real_speech`) on real components: pocketsphinx's own decoder
(the weight of every pass, one utterance's result whatever came before it in its chunk), the scores cache
key, utterances a backend failed to decode (real rows of the twin and the CPU backend), and a job that has
candidates to tune but no tune prompt."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pocketsphinx
import pytest
from test_decoder_bruteforce import CHAIN, INFINITE_BEAM, compile_graph

from specbench.acoustic import sphinx_scores
from specbench.config import RealSpeechConfig
from specbench.config.jobs import REAL_SPEECH_SETS, PocketsphinxSection, RealSearchSection
from specbench.data.recorded_speech import SPHINX_TESTDATA
from specbench.data.synthesis import read_wav, write_wav
from specbench.decoder.cpu import CpuDecoder
from specbench.decoder.result import STATUS_OVERFLOW
from specbench.decoder.twin import TwinDecoder
from specbench.errors import ConfigError
from specbench.experiments.graph_recipe import GraphArtifacts
from specbench.experiments.real_speech import job
from specbench.experiments.real_speech.audio import RealUtterance
from specbench.experiments.real_speech.score_cache import cached, score_key, scorer_digest
from specbench.experiments.real_speech.sphinx_decode import (
    LM_WEIGHTS,
    SphinxJob,
    decode_chunk,
    decoder_settings,
    fresh_decoder,
    hypothesis_words,
    sphinx_lm,
)
from specbench.reports.coverage import left_out
from specbench.wfst.arpa import read_arpa
from specbench.wfst.symbols import word_table

pytestmark = pytest.mark.unit

SHIPPED_LM = Path(pocketsphinx.get_model_path()) / "en-us" / "en-us.lm.bin"
CARDS = SPHINX_TESTDATA / "cards"


# ---------------------------------------------------------------------------------------------- pocketsphinx


def test_pocketsphinx_weighs_the_lm_of_every_pass_by_the_tuned_weight() -> None:
    """The flat pass and the lattice best path (whose hypothesis is reported) move with the weight being
    tuned, in pocketsphinx's default ratios (6.5 : 8.5 : 9.5), so 6.5 is its defaults."""
    sphinx_job = SphinxJob((), str(SHIPPED_LM), 8.0, 0.65)
    config = pocketsphinx.Config(**decoder_settings(sphinx_job))
    lm = pocketsphinx.NGramModel(config, pocketsphinx.LogMath(float(config["logbase"])), str(SHIPPED_LM))
    decoder = fresh_decoder(sphinx_job, lm)
    assert LM_WEIGHTS == ("lw", "fwdflatlw", "bestpathlw")
    assert [decoder.config[name] for name in LM_WEIGHTS] == pytest.approx([8.0, 8.0 * 8.5 / 6.5, 8.0 * 9.5 / 6.5])
    defaults = fresh_decoder(replace(sphinx_job, language_weight=6.5), lm)
    assert [defaults.config[name] for name in LM_WEIGHTS] == pytest.approx([6.5, 8.5, 9.5])
    assert decoder.config["fwdflat"] and decoder.config["bestpath"]  # its default three-pass search is kept
    assert decoder.config["wip"] == pytest.approx(0.65)
    apart = fresh_decoder(replace(sphinx_job, pass_weights=(6.5, 8.5, 9.5)), lm)  # each pass its own, when asked
    assert [apart.config[name] for name in LM_WEIGHTS] == [6.5, 8.5, 9.5]
    with pytest.raises(ValueError, match="one weight per pass"):
        SphinxJob((), str(SHIPPED_LM), 8.0, 0.65, pass_weights=(6.5, 8.5))


def test_an_utterance_gets_the_same_result_whatever_its_chunk_decoded_before() -> None:
    """pocketsphinx's front end carries its noise estimate from one utterance to the next; with a decoder per
    utterance, 'ten of clubs' decoded alone and after another card command give the same words and score."""
    a, b = ("a", str(CARDS / "001.wav")), ("b", str(CARDS / "003.wav"))
    alone = decode_chunk(SphinxJob((a,), str(SHIPPED_LM), 6.5, 0.65))
    after = decode_chunk(SphinxJob((b, a), str(SHIPPED_LM), 6.5, 0.65))
    assert [r.key for r in after] == ["b", "a"]
    assert alone[0].words == after[1].words == ["ten", "of", "clubs"]
    assert alone[0].score is not None and alone[0].score == after[1].score
    assert alone[0].frames == after[1].frames > 0 and alone[0].setup_seconds > 0
    scorer = sphinx_scores.SphinxSenoneScorer()
    scorer.setup()
    samples = sphinx_scores.pcm16(read_wav(Path(a[1]))[0])
    assert alone[0].frames == len(scorer.score_pcm(samples)) and alone[0].text == "ten of clubs"


def test_pocketsphinx_words_are_normalized_without_alternates_fillers_or_markers() -> None:
    text = "<s> And(2) MR. john <sil> to(3) 12 [NOISE] +NSN+ ++SMACK++ don't </s>"
    assert hypothesis_words(text) == ["and", "mr", "john", "to", "twelve", "don't"]
    assert hypothesis_words("<s> <sil> [SPEECH] </s>") == []


def test_pocketsphinx_reads_the_lm_with_every_missing_suffix_listed(tmp_path: Path) -> None:
    """Without 'b c' listed, pocketsphinx 5.1.1 reads p(c | b) as -0.45, not -0.25 - 0.7."""
    arpa = tmp_path / "lm.arpa"
    arpa.write_text("\\data\\\nngram 1=5\nngram 2=3\nngram 3=1\n\n\\1-grams:\n-1.0 </s>\n-99 <s> -0.3\n"
                    "-0.5 a -0.2\n-0.6 b -0.25\n-0.7 c\n\n\\2-grams:\n-0.4 <s> a -0.1\n-0.3 a b -0.15\n"
                    "-0.45 b </s>\n\n\\3-grams:\n-0.05 a b c\n\n\\end\\\n")
    path = sphinx_lm(arpa, tmp_path / "cache")
    assert sphinx_lm(arpa, tmp_path / "cache") == path and read_arpa(path).counts == [5, 4, 1]
    config = pocketsphinx.Config(loglevel="ERROR")
    theirs = pocketsphinx.NGramModel(config, pocketsphinx.LogMath(float(config["logbase"])), str(path))
    for gram in [("b", "c"), ("a", "b", "c"), ("<s>", "a", "c"), ("a", "b", "</s>")]:
        expected = read_arpa(arpa).log10_prob(gram[-1], gram[:-1])
        assert theirs.prob(list(reversed(gram))) * np.log10(1.0001) == pytest.approx(expected, abs=2e-4)


# ---------------------------------------------------------------------------------------------- scores cache


def _utterance(tmp_path: Path) -> RealUtterance:
    wav = tmp_path / "clip.wav"
    write_wav(wav, np.zeros(1600, dtype=np.float32))
    return RealUtterance("cards", "clip", wav, "ten of clubs", "-")


def test_the_scores_cache_key_follows_the_model_files_the_scoring_code_and_the_audio(tmp_path: Path) -> None:
    from specbench.data import synthesis

    clip = _utterance(tmp_path)
    model = tmp_path / "model"
    shutil.copytree(sphinx_scores.default_model_dir(), model)
    code = tmp_path / "code" / "sphinx_scores.py"
    code.parent.mkdir()
    shutil.copy(sphinx_scores.__file__, code)
    reader = tmp_path / "code" / "synthesis.py"  # read_wav: every sample scored goes through it

    def key() -> str:
        return score_key(clip, scorer_digest(model, code, reader))

    shutil.copy(synthesis.__file__, reader)
    base = score_key(clip, scorer_digest())
    assert key() == base  # the same files and the same code: the same key
    keys = {base}
    for name, edit in (("feat.params", lambda b: b.replace(b"-remove_noise yes", b"-remove_noise no")),
                       ("mdef", lambda b: b[:-1] + bytes([b[-1] ^ 1]))):
        path = model / name
        original = path.read_bytes()
        path.write_bytes(edit(original))
        keys.add(key())
        path.write_bytes(original)
    text = code.read_text()
    code.write_text(text.replace("SCORE_SHIFT_BITS = 10", "SCORE_SHIFT_BITS = 11"))
    keys.add(key())
    code.write_text(text.replace('"""Senone scores', '"""Scores'))  # a docstring is not code
    assert key() == base
    code.write_text(text)
    reader_text = reader.read_text()
    reader.write_text(reader_text + "\nSAMPLE_RATE = 8000\n")  # the reader's code changed
    keys.add(key())
    reader.write_text(reader_text + "\n# a comment is not code\n")
    assert key() == base
    keys.add(score_key(replace(clip, utt_id="other"), scorer_digest()))  # another utterance
    write_wav(clip.wav, np.zeros(3200, dtype=np.float32))  # the same utterance, new audio
    keys.add(score_key(clip, scorer_digest()))
    assert len(keys) == 7


def test_a_cached_file_that_is_not_one_ok_utterance_is_scored_again(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture) -> None:
    """A scores file damaged on disk, or not holding one ok row, counts as missing (`score_chunks` scores its
    utterance again), logged."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "utt-0123.parquet"
    table = pa.table({"utt_id": ["a", "b"], "num_frames": [1, 0], "num_classes": [2, 0],
                      "loglikes": pa.array([[0.5, -1.0], None], pa.list_(pa.float32())),
                      "status": ["ok", "no audio"]})
    pq.write_table(table.slice(1, 1), path, compression="none")
    assert not cached(path)  # a failure may pass (a full /tmp): never kept
    pq.write_table(table.set_column(4, "status", pa.array(["ok", "ok"])), path, compression="none")
    assert not cached(path)  # two rows: not one utterance's file
    assert capsys.readouterr().err.count("not the one ok row of an utterance's scores") == 2
    pq.write_table(table.slice(0, 1), path, compression="none")
    assert cached(path)
    path.write_bytes(path.read_bytes()[:-20])  # truncated: no Parquet footer
    assert not cached(path) and not cached(tmp_path / "missing.parquet")
    assert f"{path}: cached scores that cannot be read (" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------- failed decodes


def test_utterances_a_backend_did_not_decode_are_counted_beside_the_wer_and_never_identical() -> None:
    """Real rows: the twin with a queue too small overflows on every utterance; an utterance of no frames
    fails in both backends. Failed rows count as all deletions, are listed per backend, logged as
    `asr.real.decode_failed.<backend>`, and two failed rows are not an identical 1-best."""
    graph = compile_graph(CHAIN)
    rng = np.random.default_rng(1)
    items = [("cards/u0", rng.uniform(-5, 0, (4, 3)).astype(np.float32)),
             ("cards/u1", rng.uniform(-5, 0, (5, 3)).astype(np.float32)),
             ("cards/empty", np.zeros((0, 3), dtype=np.float32))]
    cpu_rows = [r.output_row() for r in CpuDecoder(graph, INFINITE_BEAM).decode_batch(items)]
    twin_rows = [r.output_row() for r in TwinDecoder(graph, INFINITE_BEAM, arc_capacity=2).decode_batch(items)]
    assert [r["status"] for r in cpu_rows[:2]] == ["ok", "ok"]
    assert [r["status"] for r in twin_rows[:2]] == [STATUS_OVERFLOW, STATUS_OVERFLOW]
    assert twin_rows[0]["word_ids"] == [] and cpu_rows[2]["status"] == twin_rows[2]["status"] != "ok"
    symbols = ["<eps>", "yes", "no", "go", "stop", "left", "right", "play", "up", "down"]
    spoken = {u: " ".join(symbols[w] for w in row["word_ids"]) for u, row in
              zip(("cards/u0", "cards/u1", "cards/empty"), cpu_rows)}
    rows = [RealUtterance("cards", key.split("/")[1], Path(f"{key}.wav"), spoken[key] or "left", "-")
            for key, _ in items]
    rows.append(RealUtterance("cards", "lost", Path("lost.wav"), "left right", "-"))  # no row from either backend
    words, extras = {}, {}
    for name, decoded in (("cpu", cpu_rows), ("twin", twin_rows)):
        words[name], extras[name] = {}, {}
        job.collect_rows(decoded, symbols, words[name], extras[name])
    failed = {name: job.decode_failures(rows, extras[name]) for name in ("cpu", "twin")}
    assert set(failed["cpu"]) == {"cards/empty", "cards/lost"} and failed["cpu"]["cards/lost"] == job.NO_OUTPUT
    assert set(failed["twin"]) == {"cards/u0", "cards/u1", "cards/empty", "cards/lost"}
    assert failed["twin"]["cards/u0"] == STATUS_OVERFLOW
    assert job.identical_onebest(rows, extras["cpu"], extras["cpu"]) == 2  # the two decoded, not the failed
    assert job.identical_onebest(rows, extras["cpu"], extras["twin"]) == 0  # both failed on 'empty': not equal
    report = job._report(rows, words, 50, failed)
    assert report["cards.cpu"]["decode_failed"] == 2 and report["cards.twin"]["decode_failed"] == 4
    assert report["cards.twin"]["wer_a"] == 1.0  # every failed utterance is all deletions
    # the CPU backend's two decoded utterances are its own references; 'empty' and 'lost' lose 1 + 2 words
    assert report["cards.cpu"]["wer_a"] == pytest.approx(3 / report["cards.cpu"]["words"])
    result = {"utterances": len(rows), "flagged": {}, "acoustic_scale": 0.1, "beam": 13.0, "language_weight": 6.5,
              "wer": report, "oov_rate": {}, "speed": {}, "cpu_twin_identical": 0, "seconds": 1.0,
              "decode_failed": failed, "pocketsphinx_weights": {}}
    metrics = job._metrics(result)
    assert metrics["asr.real.decode_failed.cpu"] == 2 and metrics["asr.real.decode_failed.twin"] == 4
    lines = "\n".join(job.summary(result))
    assert "4 of 4 not decoded" in lines and "2 of 4 not decoded" in lines
    assert any(line.startswith("  not decoded by twin: 4 (") and STATUS_OVERFLOW in line for line in lines.split("\n"))
    assert "not evaluated" not in lines  # every set, or a result from before the key
    result["sets_left_out"] = left_out(["cards"], REAL_SPEECH_SETS)
    assert job.summary(result)[-1] == ("  not evaluated: asterisk, librivox, recordings (not in the job file's sets; "
                                       "the figures above cover only the sets it names)")


def test_the_oov_rate_counts_no_symbol_of_the_word_table_as_a_word(tmp_path: Path) -> None:
    word_table(["pound", "press"]).write(tmp_path / "words.txt")  # holds #0, which normalizes to "hashtag zero"
    graph = GraphArtifacts(tmp_path, None, True)
    rows = [RealUtterance("cards", "a", Path("a.wav"), "press hashtag zero", "-")]
    assert job.oov_rates(rows, graph) == {"cards": pytest.approx(2 / 3)}


def test_every_pass_weight_is_logged_under_its_own_name() -> None:
    result = {"utterances": 1, "flagged": {}, "acoustic_scale": 0.1, "beam": 13.0, "language_weight": 8.0,
              "pocketsphinx_weights": dict(zip(LM_WEIGHTS, (8.0, 9.0, 10.0))), "wer": {}, "oov_rate": {},
              "speed": {}, "cpu_twin_identical": None, "seconds": 1.0, "decode_failed": {}}
    metrics = job._metrics(result)
    assert {k: v for k, v in metrics.items() if "pocketsphinx_" in k} == {
        "asr.real.pocketsphinx_lw": 8.0, "asr.real.pocketsphinx_fwdflatlw": 9.0,
        "asr.real.pocketsphinx_bestpathlw": 10.0}
    assert "asr.real.language_weight" not in metrics  # its meaning (the first pass only) is gone


# ---------------------------------------------------------------------------------------------- tuning


def test_candidates_without_tune_prompts_are_refused_before_any_work(tmp_path: Path) -> None:
    path = tmp_path / "real.toml"
    no_tune = RealSpeechConfig(sets=("cards", "librivox"))  # several scales and weights, no Asterisk prompts
    with pytest.raises(ConfigError, match=r"real\.toml: sets = \['cards', 'librivox'\] has no tune prompts.*"
                                          r"acoustic_scales = \[0\.06, 0\.08, 0\.1, 0\.12\].*Fix: add \"asterisk\""):
        job.run_real_speech(no_tune, path, None)  # refused before the graph is built or anything is read
    single = replace(no_tune, search=RealSearchSection(acoustic_scales=(0.08,)),
                     pocketsphinx=PocketsphinxSection(language_weights=(6.5,)))
    job.check_tune_sets(single, path)  # one candidate each: nothing to tune, nothing refused
    job.check_tune_prompts(single, path, [], {})
    only_weights = replace(single, pocketsphinx=PocketsphinxSection(language_weights=(6.5, 8.0)))
    flagged = {"asterisk/agent-pass": "asterisk/agent-pass.wav: not a readable PCM WAV file"}
    with pytest.raises(ConfigError, match=r"no usable prompt of the Asterisk tune half to choose "
                                          r"\[pocketsphinx\] language_weights \(tune_utterances = 0.*"
                                          r"1 Asterisk prompts flagged, e.g. asterisk/agent-pass.*Fix"):
        job.check_tune_prompts(replace(only_weights, sets=("asterisk",)), path, [], flagged)
    off = replace(only_weights, pocketsphinx=PocketsphinxSection(enabled=False, language_weights=(6.5, 8.0)))
    job.check_tune_prompts(off, path, [], flagged)  # pocketsphinx left out: its weights are not tuned


def test_a_tied_language_weight_goes_to_the_smaller_whatever_the_order(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(job, "decode_sphinx", lambda rows, lm, weight, config, out_dir=None: ({}, 0.0, 0, 0.0))
    monkeypatch.setattr(job, "_wer", lambda rows, words: 0.25)  # every candidate ties
    for weights in ((6.5, 8.0, 10.0), (10.0, 8.0, 6.5)):
        config = RealSpeechConfig(pocketsphinx=PocketsphinxSection(language_weights=weights))
        assert job.tune_language_weight([object()], Path("lm"), config)[0] == 6.5
