"""Fbank and global CMVN by hand: the frame count and the samples each frame covers (25 ms windows every 10 ms,
edges snipped), every log-mel value against a numpy implementation of Kaldi's fbank (DC removal,
pre-emphasis 0.97, Povey window, 512-point FFT, 80 triangular mel filters from 20 Hz to 7,600 Hz, no dither),
and CMVN's statistics against numpy's mean and standard deviation over all frames."""

from __future__ import annotations

import numpy as np
import pytest

from specbench.acoustic.features import Cmvn, fbank

pytestmark = pytest.mark.unit


def mel(hz: np.ndarray | float) -> np.ndarray:
    return 1127.0 * np.log(1.0 + np.asarray(hz) / 700.0)


def kaldi_fbank_frame(window: np.ndarray, low_hz: float = 20.0, high_hz: float = 7600.0,
                      bins: int = 80) -> np.ndarray:
    """One frame of Kaldi's `compute-fbank-feats` (16-bit sample scale, no dither, no energy)."""
    x = window.astype(np.float64) * 32768.0
    x = x - x.mean()
    x[1:] = x[1:] - 0.97 * x[:-1]
    x[0] -= 0.97 * x[0]
    n = np.arange(len(x))
    x = x * (0.5 - 0.5 * np.cos(2 * np.pi * n / (len(x) - 1))) ** 0.85
    power = np.abs(np.fft.rfft(x, 512)) ** 2
    fft_mel = mel(np.arange(256) * 16000 / 512)  # Kaldi's filters use the 256 bins below Nyquist
    low, delta = mel(low_hz), (mel(high_hz) - mel(low_hz)) / (bins + 1)
    out = np.empty(bins)
    for b in range(bins):
        left, centre, right = low + b * delta, low + (b + 1) * delta, low + (b + 2) * delta
        rising = (fft_mel - left) / (centre - left)
        falling = (right - fft_mel) / (right - centre)
        weight = np.where((fft_mel > left) & (fft_mel < right), np.where(fft_mel <= centre, rising, falling), 0)
        out[b] = np.log(max(float(weight @ power[:256]), np.finfo(np.float32).eps))
    return out


def test_frame_count_follows_snipped_edges() -> None:
    """T = 1 + (N - 400) // 160 for N >= 400 samples, else no frame."""
    for n in (0, 399, 400, 559, 560, 561, 16000, 16123):
        feats = fbank(np.zeros(n, dtype=np.float32) + 0.01)
        assert feats.shape == ((1 + (n - 400) // 160) if n >= 400 else 0, 80), n


def test_frame_k_reads_exactly_samples_160k_to_160k_plus_400() -> None:
    """Changing one sample moves exactly the frames whose window [160k, 160k + 400) holds it."""
    rng = np.random.default_rng(2)
    audio = rng.normal(0, 0.1, 2000).astype(np.float32)
    base = fbank(audio)
    for sample in (0, 399, 400, 1000, 1199):
        changed = audio.copy()
        changed[sample] += 0.5
        moved = {k for k in range(len(base)) if not np.allclose(fbank(changed)[k], base[k], atol=1e-4)}
        assert moved == {k for k in range(len(base)) if 160 * k <= sample < 160 * k + 400}, sample


def test_log_mel_energies_match_kaldi_computed_by_hand() -> None:
    rng = np.random.default_rng(1)
    t = np.arange(1600) / 16000
    audio = (rng.normal(0, 0.05, 1600) + 0.3 * np.sin(2 * np.pi * 1234.0 * t)).astype(np.float32)
    feats = fbank(audio)
    assert feats.dtype == np.float32 and len(feats) == 8
    for k in range(len(feats)):
        np.testing.assert_allclose(feats[k], kaldi_fbank_frame(audio[160 * k:160 * k + 400]), atol=1e-3)


def test_cmvn_is_the_mean_and_inverse_std_over_all_frames() -> None:
    """Pooled over frames (not averaged per utterance), population variance; applying it to the same
    frames gives every bin mean 0 and standard deviation 1."""
    rng = np.random.default_rng(3)
    feats = [rng.normal(rng.uniform(-5, 5, 80), rng.uniform(0.5, 3, 80), (n, 80)).astype(np.float32)
             for n in (3, 50, 200)]
    pooled = np.concatenate(feats).astype(np.float64)
    cmvn = Cmvn.estimate(feats)
    np.testing.assert_allclose(cmvn.mean, pooled.mean(axis=0), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(cmvn.inv_std, 1.0 / pooled.std(axis=0), rtol=1e-4)
    normalized = np.concatenate([cmvn.apply(f) for f in feats])
    np.testing.assert_allclose(normalized.mean(axis=0), 0.0, atol=1e-4)
    np.testing.assert_allclose(normalized.std(axis=0), 1.0, rtol=1e-4)
    with pytest.raises(ValueError, match="no frames"):
        Cmvn.estimate([np.zeros((0, 80), dtype=np.float32)])
