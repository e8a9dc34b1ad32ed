"""Vocal-tract-length normalization: the mel-axis warp, the factor grid, the unsupervised choice, the warp
column of the inference stage, and (with the shipped model) that the choice undoes a known warp."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import torch

from specbench.acoustic.checkpoint import load_checkpoint
from specbench.acoustic.features import fbank
from specbench.acoustic.inference import AcousticScorer, score_features
from specbench.acoustic.vtln import IDENTITY, choose_warp, frame_confidence, warp_grid, warp_mel_axis
from specbench.data import scores as scores_io
from specbench.data.synthesis import write_wav
from specbench.wfst.lexicon import PHONES

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parents[2]
SHIPPED_MODEL = ROOT / "models" / "am_slurp.pt"
RNG = np.random.default_rng(3)


def test_identity_warp_returns_the_input() -> None:
    feats = torch.randn(7, 80)
    assert warp_mel_axis(feats, 1.0) is feats
    with pytest.raises(ValueError, match="positive"):
        warp_mel_axis(feats, 0.0)


@pytest.mark.parametrize("factor", [0.9, 1.07, 1.2])
def test_warp_moves_a_spectral_peak_by_the_factor(factor: float) -> None:
    bins = torch.arange(80, dtype=torch.float32)
    peak = 30.0
    feats = torch.exp(-0.5 * ((bins - peak) / 2.0) ** 2)[None]  # one smooth formant-like bump
    warped = warp_mel_axis(feats, factor)[0]
    centre = float((warped * bins).sum() / warped.sum())
    assert centre == pytest.approx(peak * factor, abs=0.3)
    assert warped.shape == feats.shape[1:]


def test_warp_by_hand_on_a_ramp() -> None:
    """Output bin i reads input position i / factor: on a ramp x[j] = j that is exactly i / factor until
    the edge clamps it."""
    ramp = torch.arange(80, dtype=torch.float32)[None]
    for factor in (0.8, 1.25):
        expected = torch.clamp(torch.arange(80, dtype=torch.float32) / factor, 0, 79)
        torch.testing.assert_close(warp_mel_axis(ramp, factor)[0], expected)


def test_grid_holds_the_ends_and_the_identity() -> None:
    grid = warp_grid(0.9, 1.15, 0.01)
    assert grid[0] == 0.9 and grid[-1] == 1.15 and IDENTITY in grid and len(grid) == 26
    assert warp_grid(0.93, 1.1, 0.05) == (0.93, 0.98, 1.0, 1.03, 1.08)
    for low, high, step in ((1.05, 1.2, 0.01), (0.9, 0.95, 0.01), (0.9, 1.1, 0.0)):
        with pytest.raises(ValueError, match="warp grid"):
            warp_grid(low, high, step)


def test_frame_confidence_is_the_mean_top_log_posterior_over_phone_frames() -> None:
    a = np.log(np.array([[0.5, 0.3, 0.2], [0.1, 0.9, 0.0]]) + 1e-12)  # frame 0: blank wins, left out
    b = np.log(np.array([[0.2, 0.1, 0.7], [0.3, 0.6, 0.1]]))
    expected = np.mean(np.log([0.9 + 1e-12, 0.7, 0.6]))
    assert frame_confidence([a, b, np.zeros((0, 3))]) == pytest.approx(expected)
    with pytest.raises(ValueError, match="no output frame where a phone"):
        frame_confidence([np.zeros((0, 3)), np.log(np.array([[0.9, 0.05, 0.05]]))])


def test_choice_is_the_most_confident_factor_by_brute_force() -> None:
    """A scorer whose posteriors sharpen towards 1.07: the choice is the argmax of the confidence of every
    factor, computed here independently; ties go to the factor nearest 1."""
    feats = [RNG.normal(size=(20, 80)).astype(np.float32) for _ in range(3)]

    def score(feats_list, factor):
        sharp = 5.0 - 20.0 * abs(factor - 1.07)  # the phone column always wins
        logits = [np.stack([np.zeros(len(x)), np.full(len(x), sharp), np.zeros(len(x))], axis=1)
                  for x in feats_list]
        return [z - np.log(np.exp(z).sum(axis=1, keepdims=True)) for z in logits]

    grid = warp_grid(0.9, 1.15, 0.01)
    choice = choose_warp(score, feats, grid)
    brute = {f: np.mean(np.concatenate([m[:, 1] for m in score(feats, f)])) for f in grid}
    assert choice.factor == max(brute, key=brute.get) == 1.07
    assert choice.confidence == pytest.approx(brute)
    flat = choose_warp(lambda fl, f: [np.log(np.tile([0.2, 0.5, 0.3], (len(x), 1))) for x in fl], feats,
                       (0.95, 1.0, 1.1))
    assert flat.factor == 1.0
    with pytest.raises(ValueError, match="no warp factors"):
        choose_warp(score, feats, ())


def test_stage_warps_each_row_by_its_own_factor(checkpoint: Path, tmp_path: Path) -> None:
    audio = {f"u{i}": RNG.normal(0, 0.1, 9000 + 1000 * i).astype(np.float32) for i in range(4)}
    for name, samples in audio.items():
        write_wav(tmp_path / f"{name}.wav", samples)
    warps = [1.08, None, 1.0, 0.93]
    table = pa.table({"utt_id": list(audio), "audio_path": [f"{n}.wav" for n in audio],
                      "vtln_warp": pa.array(warps, pa.float64())})
    stage = AcousticScorer(checkpoint, tmp_path, expected_phones=PHONES)
    out = dict(scores_io.iter_matrices(stage(table)))
    plain = dict(scores_io.iter_matrices(stage(table.drop_columns(["vtln_warp"]))))
    ckpt = load_checkpoint(checkpoint, PHONES)
    for (name, samples), warp in zip(audio.items(), warps):
        quantized = np.round(samples * 32767) / 32767  # what the WAV file holds
        alone = score_features(ckpt, [fbank(quantized.astype(np.float32))], warp=warp or 1.0)[0]
        np.testing.assert_allclose(out[name], alone, atol=2e-4)
    np.testing.assert_array_equal(out["u1"], plain["u1"])
    bad = stage(table.set_column(2, "vtln_warp", pa.array([float("nan"), 0.0, None, 1.05], pa.float64())))
    status = bad.column("status").to_pylist()
    assert "vtln_warp must be a positive finite factor" in status[0] and "got 0.0" in status[1]
    assert status[2:] == ["ok", "ok"]  # a bad warp fails its own row only
    np.testing.assert_array_equal(out["u2"], plain["u2"])
    assert not np.allclose(out["u0"], plain["u0"], atol=1e-3)  # the warp does change the scores


def test_warped_scores_stay_causal(checkpoint: Path, assert_causal) -> None:  # noqa: ANN001
    assert_causal(load_checkpoint(checkpoint, PHONES), 1.1)


@pytest.mark.skipif(not SHIPPED_MODEL.is_file(), reason="no trained model in models/")
def test_shipped_model_chooses_the_warp_that_undoes_a_known_one(tmp_path: Path) -> None:
    """A training voice's speech with its mel axis squeezed by 0.8 (formants lowered, as by a much longer
    vocal tract): the choice must stretch it back by at least 1.2 (measured: 1.25, the exact inverse). On
    the speech as it is, the choice stays in 0.9..1.15, where the model's confidence is nearly flat since
    training warped every utterance by up to 12% either way (measured: 1.1)."""
    from specbench.data.synthesis import read_wav, synthesize
    from specbench.data.voices import get_voice

    ckpt = load_checkpoint(SHIPPED_MODEL, PHONES)
    sentences = ["wake me up at seven in the morning", "what is the weather like in paris today",
                 "turn the lights off in the kitchen", "play some jazz music please",
                 "remind me to call my mother tomorrow", "how long will it take to drive to work"]
    feats = []
    for i, text in enumerate(sentences):
        synthesize(text, get_voice("espeak:en-us"), 1.0, tmp_path / f"{i}.wav")
        feats.append(torch.from_numpy(ckpt.cmvn.apply(fbank(read_wav(tmp_path / f"{i}.wav")[0]))))

    @torch.no_grad()
    def score(feats_list, factor, before=1.0):
        out = []
        for f in feats_list:
            x = warp_mel_axis(warp_mel_axis(f, before), factor)[None]
            out.append(ckpt.model(x, torch.tensor([len(f)]))[0][0].numpy())
        return out

    grid = warp_grid(0.9, 1.4, 0.05)
    as_is = choose_warp(score, feats, grid)
    squeezed = choose_warp(lambda fl, f: score(fl, f, before=0.8), feats, grid)
    assert squeezed.factor >= 1.2, squeezed
    assert 0.9 <= as_is.factor <= 1.15 and squeezed.factor - as_is.factor >= 0.1, as_is


def test_a_voice_the_model_hears_no_phone_in_keeps_the_identity(checkpoint: Path, tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    """A model that puts the blank first on every frame gives VTLN nothing to choose by: the voice keeps
    the identity warp (with a message), and the other voices are still chosen."""
    from specbench.acoustic.checkpoint import save_checkpoint
    from specbench.config import EvalAmConfig, VtlnSection
    from specbench.data.synthesis import read_wav
    from specbench.experiments.eval_am import choose_voice_warps

    ckpt = load_checkpoint(checkpoint, PHONES)
    with torch.no_grad():
        ckpt.model.output.bias[0] = 1e4  # the blank wins everywhere
    blank_only = tmp_path / "blank.pt"
    save_checkpoint(blank_only, ckpt.model, ckpt.cmvn, ckpt.phones, {}, fp16=False)
    rows = []
    for i in range(2):
        write_wav(tmp_path / f"a{i}.wav", RNG.normal(0, 0.1, 12000).astype(np.float32))
        rows.append({"voice": "v:a", "audio_path": f"a{i}.wav"})
    rows.append({"voice": "v:b", "audio_path": "missing.wav"})  # unreadable: skipped
    config = EvalAmConfig(vtln=VtlnSection(enabled=True, low=0.95, high=1.05, step=0.05, utterances=2))
    chosen = choose_voice_warps(blank_only, tmp_path, rows, ["v:a", "v:b"], config)
    assert chosen == {"v:a": {"warp": IDENTITY, "utterances": 2.0},
                      "v:b": {"warp": IDENTITY, "utterances": 0.0}}
    assert "VTLN for v:a: no output frame where a phone is most likely" in capsys.readouterr().err
    # the same audio under a model that does hear phones: the warp of the direct choice
    plain = load_checkpoint(checkpoint, PHONES)
    feats = [fbank(read_wav(tmp_path / f"a{i}.wav")[0]) for i in range(2)]
    direct = choose_warp(lambda fl, w: score_features(plain, sorted(fl, key=len), warp=w), feats,
                         warp_grid(0.95, 1.05, 0.05))
    assert choose_voice_warps(checkpoint, tmp_path, rows, ["v:a"], config)["v:a"]["warp"] == direct.factor
