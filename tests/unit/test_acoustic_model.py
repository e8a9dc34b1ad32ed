"""The causal acoustic model: causality, shapes, size; checkpoints; the inference stage and score files."""

from __future__ import annotations

import wave
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import torch

from specbench.acoustic.checkpoint import load_checkpoint
from specbench.acoustic.dataset import Example, epoch_view, load_examples, speed_perturb
from specbench.acoustic.inference import AcousticScorer, score_samples
from specbench.acoustic.model import CausalCtcModel, lookahead_ms
from specbench.acoustic.settings import ModelConfig
from specbench.acoustic.training import PlateauSchedule
from specbench.checkpoint_io import load_blob
from specbench.data import scores as scores_io
from specbench.data.synthesis import write_wav
from specbench.errors import DataError
from specbench.wfst.lexicon import PHONES

pytestmark = pytest.mark.unit
RNG = np.random.default_rng(0)


def test_default_model_size_and_shapes() -> None:
    model = CausalCtcModel(ModelConfig())
    assert 2_000_000 < model.num_parameters <= 3_000_000
    for t in (1, 4, 5, 301):
        out, lengths = model(torch.zeros(1, t, 80), torch.tensor([t]))
        assert out.shape == (1, -(-(-(-t // 2)) // 2), 40) and int(lengths[0]) == out.shape[1]
        assert torch.allclose(out.exp().sum(-1), torch.ones(1, out.shape[1]), atol=1e-5)


@pytest.mark.parametrize("cut_s", [0.52, 1.0, 1.37])
def test_changing_audio_after_t_leaves_earlier_frames_unchanged(checkpoint: Path, cut_s: float) -> None:
    ckpt = load_checkpoint(checkpoint, PHONES)
    audio = RNG.normal(0, 0.1, 32000).astype(np.float32)
    changed = audio.copy()
    changed[int(cut_s * 16000):] = RNG.normal(0, 0.3, len(changed) - int(cut_s * 16000))
    a, b = score_samples(ckpt, audio), score_samples(ckpt, changed)
    assert a.shape == b.shape
    frame_ms = 40.0
    safe = int((cut_s * 1000 - lookahead_ms()) // frame_ms) + 1  # frames j with 40 j + 25 ms <= t
    assert np.array_equal(a[:safe], b[:safe])
    assert not np.allclose(a[safe + 1:], b[safe + 1:])  # the test can fail: later frames do change
    assert lookahead_ms() <= 40.0


def test_checkpoint_round_trip_fp16_and_phone_check(checkpoint: Path, tmp_path: Path) -> None:
    ckpt = load_checkpoint(checkpoint, PHONES)
    assert ckpt.phones == PHONES and ckpt.metadata["note"] == "random weights"
    blob = load_blob(checkpoint)
    assert all(v.dtype == torch.float16 for v in blob["state_dict"].values() if v.is_floating_point())
    with pytest.raises(DataError, match="trained over the phones"):
        load_checkpoint(checkpoint, tuple(reversed(PHONES)))
    with pytest.raises(DataError, match="does not exist"):
        load_checkpoint(tmp_path / "missing.pt")
    bad = tmp_path / "bad.pt"
    bad.write_bytes(b"not a checkpoint")
    with pytest.raises(DataError, match="not a readable"):
        load_checkpoint(bad)


def _write_wav(path: Path, samples: np.ndarray, rate: int = 16000) -> None:
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes((np.clip(samples, -1, 1) * 32767).astype("<i2").tobytes())


def test_inference_stage_reports_bad_rows_and_scores_the_rest(checkpoint: Path, tmp_path: Path) -> None:
    for i, n in enumerate((8000, 16000, 12345)):
        _write_wav(tmp_path / f"u{i}.wav", RNG.normal(0, 0.1, n).astype(np.float32))
    _write_wav(tmp_path / "slow.wav", RNG.normal(0, 0.1, 8000).astype(np.float32), rate=8000)
    (tmp_path / "broken.wav").write_bytes(b"RIFF....")
    ids = ["u0", "u1", "broken", "u2", "slow"]
    table = pa.table({"utt_id": ids, "audio_path": [f"{i}.wav" for i in ids]})
    stage = AcousticScorer(checkpoint, tmp_path, expected_phones=PHONES)
    stage.setup()
    out = stage(table)
    assert out.column("utt_id").to_pylist() == ids
    status = out.column("status").to_pylist()
    assert status[0] == status[1] == status[3] == "ok"
    assert "broken.wav" in status[2] and "slow.wav" in status[4] and "16000" in status[4]
    ckpt = load_checkpoint(checkpoint, PHONES)
    batched = dict(scores_io.iter_matrices(out))
    for i in ("u0", "u1", "u2"):
        from specbench.data.synthesis import read_wav

        alone = score_samples(ckpt, read_wav(tmp_path / f"{i}.wav")[0])
        np.testing.assert_allclose(batched[i], alone, atol=1e-4)  # batching and padding change nothing
    scores_io.write_parquet(out, tmp_path / "scores.parquet")
    scp = scores_io.write_kaldi(out, tmp_path / "scores.ark")
    from_parquet, from_kaldi = scores_io.read_parquet_scores(tmp_path / "scores.parquet"), scores_io.read_kaldi(scp)
    assert sorted(from_parquet) == sorted(from_kaldi) == ["u0", "u1", "u2"]
    for key in from_parquet:
        np.testing.assert_array_equal(from_parquet[key], from_kaldi[key])


@pytest.mark.parametrize("factor", [0.85, 0.92, 1.1, 1.15])
def test_speed_perturbation_scales_tempo_and_pitch_together(factor: float) -> None:
    t = np.arange(16000) / 16000
    tone = np.sin(2 * np.pi * 440.0 * t).astype(np.float32)
    out = speed_perturb(tone, factor)
    assert abs(len(out) - len(tone) / factor) <= 2  # `factor` times faster
    spectrum = np.abs(np.fft.rfft(out * np.hanning(len(out))))
    peak_hz = np.argmax(spectrum) * 16000 / len(out)
    assert abs(peak_hz - 440.0 * factor) < 3.0  # and pitch scaled by `factor`, like `sox speed`
    assert speed_perturb(tone, 1.0) is tone


def test_each_epoch_draws_the_original_or_one_perturbed_copy() -> None:
    feats = [np.full((10 + i, 80), i, dtype=np.float16) for i in range(3)]
    e = Example("u", feats[0], np.array([1, 2]), "v", (feats[1], feats[2]))
    plain = Example("w", feats[0], np.array([3]), "v")
    rng = np.random.default_rng(0)
    drawn = [epoch_view([e, plain], rng) for _ in range(60)]
    assert all(view[1] is plain for view in drawn)
    lengths = {len(view[0].feats) for view in drawn}
    assert lengths == {10, 11, 12}
    assert all(view[0].targets is e.targets and view[0].utt_id == "u" for view in drawn)


def test_load_examples_adds_perturbed_features(tmp_path: Path) -> None:
    samples = (RNG.normal(0, 0.1, 16000)).astype(np.float32)
    write_wav(tmp_path / "a.wav", samples)
    rows = [{"audio_path": "a.wav", "normalized_text": "hello", "utt_id": "a", "voice": "flite:slt"}]
    prons = {"hello": [("HH", "AH", "L", "OW")]}
    (plain,) = load_examples(rows, tmp_path, prons, PHONES)
    (both,) = load_examples(rows, tmp_path, prons, PHONES, speed_factors=(0.9, 1.0, 1.1))
    assert plain.perturbed == () and len(both.perturbed) == 2
    assert np.array_equal(plain.feats, both.feats)
    assert len(both.perturbed[0]) > len(plain.feats) > len(both.perturbed[1])


def _schedule(pers: list[float], patience: int = 4, decay_patience: int = 2) -> tuple[list[float], int | None]:
    """The rate scale after each epoch and the epoch at which training stops (None: never)."""
    plateau, scales = PlateauSchedule(patience, decay_patience), []
    for epoch, per in enumerate(pers):
        stop = plateau.update(epoch, per)
        scales.append(plateau.scale)
        if stop:
            return scales, epoch
    return scales, None


def test_schedule_waits_out_ctc_plateau_and_one_noisy_epoch() -> None:
    # epochs 0-6: the all-blank plateau (PER near 1, 5 epochs without gain, more than patience); epoch 8: one
    # epoch a little worse
    scales, stop = _schedule([0.98, 0.95, 0.96, 0.97, 0.97, 0.96, 0.96, 0.40, 0.41, 0.30, 0.25])
    assert scales == [1.0] * 11 and stop is None
    assert _schedule([0.98, 0.95, 0.96, 0.97, 0.97], decay_patience=1)[0] == [1.0] * 5


def test_schedule_halves_after_decay_patience_then_counts_again_and_stops_after_patience() -> None:
    scales, stop = _schedule([0.5, 0.3, 0.31, 0.32, 0.33, 0.34, 0.35])
    # best at epoch 1; halved at 3 (2 epochs without gain), not at 4 (1 after that halving); stop at 5
    assert scales == [1.0, 1.0, 1.0, 0.5, 0.5, 0.5] and stop == 5
    scales, stop = _schedule([0.5, 0.3, 0.31, 0.32, 0.2, 0.21, 0.22], patience=6)
    assert scales == [1.0, 1.0, 1.0, 0.5, 0.5, 0.5, 0.25] and stop is None  # a new best restarts the count
