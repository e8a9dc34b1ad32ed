"""eval_am's parts by hand, on tiny inputs: devel and test scored in one pass come back split by utterance
(rows that share an id across the splits are scored apart); a voice's adaptation audio is the first
`utterances` readable rows of that voice in the rows given (the devel rows), skipping unreadable files and
other voices, and the VTLN warp and the speaker transform (after that warp) of a voice are fitted on exactly
those; the greedy phone error rate counts an utterance without scores as all deletions; an utterance holds
an unseen word when any of its words is missing from the LM text; the WER counts an utterance the decoder
found no path for as all deletions; a voice's metric key has ':' and '+' replaced."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from specbench.acoustic.checkpoint import load_checkpoint
from specbench.acoustic.features import fbank
from specbench.acoustic.inference import score_features, scores_table
from specbench.acoustic.vtln import choose_warp, warp_grid
from specbench.config import EvalAmConfig, SpeakerTransformSection, VtlnSection
from specbench.data.synthesis import read_wav, write_wav
from specbench.errors import DataError
from specbench.experiments.eval_am import (
    _greedy_per,
    _has_unseen_word,
    _scored_metrics,
    _voice_key,
    _wer_of,
    choose_voice_warps,
    fit_voice_transforms,
    score_devel_and_test,
    voice_features,
)
from specbench.wfst.lexicon import PHONES

pytestmark = pytest.mark.unit


def _row(utt_id: str, voice: str = "v:a", audio: str = "") -> dict:
    return {"utt_id": utt_id, "voice": voice, "audio_path": audio or f"{utt_id}.wav"}


def test_devel_and_test_scored_together_come_back_split_by_utterance() -> None:
    calls: list[list[str]] = []

    def score(rows: list[dict]) -> pa.Table:  # one "score" per row: its position in the call
        calls.append([r["utt_id"] for r in rows])
        return pa.table({"utt_id": [r["utt_id"] for r in rows], "position": list(range(len(rows)))})

    devel, test = [_row("d1"), _row("d2")], [_row("t1"), _row("t2"), _row("t3")]
    got_devel, got_test = score_devel_and_test(score, devel, test)
    assert calls == [["d1", "d2", "t1", "t2", "t3"]]  # one pass
    assert got_devel.column("utt_id").to_pylist() == ["d1", "d2"]
    assert got_test.column("utt_id").to_pylist() == ["t1", "t2", "t3"]
    # an id in both splits: each split is scored on its own, so neither takes the other's row
    calls.clear()
    got_devel, got_test = score_devel_and_test(score, devel, [_row("d2"), _row("t1")])
    assert calls == [["d1", "d2"], ["d2", "t1"]]
    assert got_devel.to_pylist() == [{"utt_id": "d1", "position": 0}, {"utt_id": "d2", "position": 1}]
    assert got_test.to_pylist() == [{"utt_id": "d2", "position": 0}, {"utt_id": "t1", "position": 1}]


@pytest.fixture
def audio(tmp_path: Path) -> Path:
    """Three readable files of voice v:a (different lengths, so their fbanks tell them apart) and two of v:b."""
    rng = np.random.default_rng(5)
    for name, samples in (("a0", 8000), ("a1", 9600), ("a2", 11200), ("b0", 8800), ("b1", 10400)):
        write_wav(tmp_path / f"{name}.wav", rng.normal(0, 0.1, samples).astype(np.float32))
    return tmp_path


def test_a_voices_adaptation_audio_is_its_first_readable_rows(audio: Path) -> None:
    rows = [_row("b0", "v:b"), _row("a0"), _row("x", audio="missing.wav"), _row("b1", "v:b"), _row("a1"),
            _row("a2")]
    got = voice_features(audio, rows, "v:a", 2)  # a0, (missing: skipped), a1; a2 is past the limit
    want = [fbank(read_wav(audio / f"{name}.wav")[0]) for name in ("a0", "a1")]
    assert len(got) == 2 and all(np.array_equal(g, w) for g, w in zip(got, want))
    assert len(voice_features(audio, rows, "v:a", 5)) == 3 and voice_features(audio, rows, "v:c", 5) == []


def test_the_vtln_warp_is_chosen_from_the_voices_first_utterances_only(checkpoint: Path, audio: Path) -> None:
    config = EvalAmConfig(vtln=VtlnSection(enabled=True, low=0.9, high=1.1, step=0.05, utterances=2))
    rows = [_row("a0"), _row("b0", "v:b"), _row("a1"), _row("a2")]
    chosen = choose_voice_warps(checkpoint, audio, rows, ["v:a", "v:b", "v:c"], config)
    assert [chosen[v]["utterances"] for v in ("v:a", "v:b", "v:c")] == [2.0, 1.0, 0.0]
    ckpt = load_checkpoint(checkpoint, PHONES)
    for voice, names in (("v:a", ("a0", "a1")), ("v:b", ("b0",))):
        feats = [fbank(read_wav(audio / f"{n}.wav")[0]) for n in names]
        direct = choose_warp(lambda fl, w: score_features(ckpt, sorted(fl, key=len), warp=w), feats,
                             warp_grid(0.9, 1.1, 0.05))
        assert chosen[voice]["warp"] == direct.factor
    assert chosen["v:c"]["warp"] == 1.0


def test_the_speaker_transform_is_fitted_on_the_voices_first_utterances_after_its_warp(
        checkpoint: Path, audio: Path, tiny_tlg: Callable[..., Path], tmp_path: Path) -> None:
    config = EvalAmConfig(speaker_transform=SpeakerTransformSection(enabled=True, utterances=2, epochs=2,
                                                                    learning_rate=1e-2))
    rows = [_row("a0"), _row("b0", "v:b"), _row("x", audio="missing.wav"), _row("a1"), _row("a2")]
    out = tmp_path / "speaker"
    out.mkdir()
    fitted = fit_voice_transforms(checkpoint, audio, rows, ["v:a", "v:c"], {"v:a": 0.95}, 1.0,
                                  tiny_tlg("g") / "TLG.fst", config, out)
    assert fitted["v:c"] == {"checkpoint": None, "utterances": 0}  # no audio of its own
    info = fitted["v:a"]
    assert info["checkpoint"] == out / "v_a.pt" and info["utterances"] == 2  # a0 and a1, not a2
    meta = load_checkpoint(info["checkpoint"], PHONES).metadata["speaker_transform"]
    assert (meta["voice"], meta["warp"], meta["utterances"]) == ("v:a", 0.95, 2)
    assert info["loss_after"] != info["loss_before"]


def test_greedy_per_counts_an_utterance_without_scores_as_all_deletions() -> None:
    prons = {"ab": [(PHONES[0], PHONES[1])], "c": [(PHONES[2],)]}  # model columns 1, 2 and 3 (0 is the blank)
    mat = np.full((5, len(PHONES) + 1), -5.0, dtype=np.float32)
    for frame, column in enumerate([1, 1, 0, 2, 2]):  # greedy: 1, 2
        mat[frame, column] = 0.0
    table = scores_table([("u1", mat)])
    rows = [{"utt_id": "u1", "normalized_text": "ab"}, {"utt_id": "u2", "normalized_text": "ab c"}]
    # u1: reference 1 2, hypothesis 1 2: 0 errors; u2 has no scores: 3 deletions -> 3 / (2 + 3)
    assert _greedy_per(table, rows, prons) == pytest.approx(0.6)


def test_an_utterance_holds_an_unseen_word_when_any_word_is_outside_the_lm_text() -> None:
    vocab = {"play", "jazz"}
    assert not _has_unseen_word({"normalized_text": "play jazz"}, vocab)
    assert _has_unseen_word({"normalized_text": "play blues"}, vocab)
    assert _has_unseen_word({"normalized_text": "blues"}, vocab)


def test_the_wer_counts_an_utterance_without_a_decode_as_all_deletions() -> None:
    rows = [{"utt_id": "u1", "normalized_text": "play jazz"}, {"utt_id": "u2", "normalized_text": "stop"},
            {"utt_id": "u3", "normalized_text": "play"}]
    # u1 right, u2 not decoded (1 deletion), u3 one substitution: 2 errors / 4 reference words
    assert _wer_of(rows, {"u1": ["play", "jazz"], "u3": ["stop"]}) == pytest.approx(0.5)
    assert math.isnan(_wer_of([], {"u1": ["play"]}))  # no utterance (say, none with only seen words): no WER
    with pytest.raises(DataError, match="no devel utterance was scored .* no acoustic scale can be chosen"):
        _scored_metrics(Path("TLG.fst"), [], rows, None, None, EvalAmConfig(), None, {}, set())  # took 1st


def test_a_voice_key_has_no_colon_or_plus() -> None:
    assert _voice_key("espeak:en+f3") == "espeak_en_f3"


def test_the_adaptation_gain_is_paired_over_the_test_utterances() -> None:
    from specbench.experiments.eval_am import adaptation_gain

    test = [{"utt_id": f"u{i}", "normalized_text": "turn on the lights"} for i in range(20)]
    unadapted = {f"u{i}": ["turn", "the", "lights"] for i in range(20)}  # one deletion each: WER 0.25
    adapted = {f"u{i}": ["turn", "on", "the", "lights"] for i in range(20)} | {"u0": []}  # u0 lost: 4 errors
    gain = adaptation_gain(test, unadapted, adapted)
    assert gain["asr.adaptation_gain"] == pytest.approx(0.25 - 4 / 80)
    assert gain["asr.adaptation_gain_low"] <= gain["asr.adaptation_gain"] <= gain["asr.adaptation_gain_high"]
    assert gain["asr.adaptation_gain_high"] <= 0.25  # every draw: at most the whole unadapted WER
