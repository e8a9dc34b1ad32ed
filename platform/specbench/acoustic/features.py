"""Log-mel filterbank features (kaldi-native-fbank) and global CMVN.

80 bins, 25 ms windows every 10 ms, `snip_edges` (frame k covers samples [160k, 160k + 400)), no dither,
so features are deterministic and causal: frame k depends on audio up to 10k + 25 ms only. CMVN is global
(mean and variance from the training set, stored with the model) because per-utterance statistics would
let a frame see the future.
"""

from __future__ import annotations

from dataclasses import dataclass

import kaldi_native_fbank as knf
import numpy as np

SAMPLE_RATE = 16000
NUM_BINS = 80
FRAME_SHIFT_MS = 10.0
FRAME_LENGTH_MS = 25.0


def _options() -> knf.FbankOptions:
    opts = knf.FbankOptions()
    opts.frame_opts.samp_freq = SAMPLE_RATE
    opts.frame_opts.frame_shift_ms = FRAME_SHIFT_MS
    opts.frame_opts.frame_length_ms = FRAME_LENGTH_MS
    opts.frame_opts.dither = 0.0
    opts.frame_opts.snip_edges = True
    opts.mel_opts.num_bins = NUM_BINS
    opts.mel_opts.high_freq = -400
    return opts


def fbank(samples: np.ndarray) -> np.ndarray:
    """`samples: (N,) float32` in [-1, 1] at 16 kHz -> `(T, 80) float32` log-mel energies.

    T = 1 + (N - 400) // 160 for N >= 400, else 0.
    """
    samples = np.asarray(samples, dtype=np.float32)
    if samples.ndim != 1:
        raise ValueError(f"samples must be 1-D, got shape {samples.shape}")
    computer = knf.OnlineFbank(_options())
    computer.accept_waveform(SAMPLE_RATE, (samples * 32768.0).tolist())
    computer.input_finished()
    n = computer.num_frames_ready
    if n == 0:
        return np.zeros((0, NUM_BINS), dtype=np.float32)
    return np.stack([computer.get_frame(i) for i in range(n)]).astype(np.float32)


@dataclass(frozen=True)
class Cmvn:
    """Global mean and inverse standard deviation per bin: `(80,) float32` each."""

    mean: np.ndarray
    inv_std: np.ndarray

    def apply(self, feats: np.ndarray) -> np.ndarray:
        return ((feats - self.mean) * self.inv_std).astype(np.float32)

    @classmethod
    def estimate(cls, feature_list: list[np.ndarray]) -> Cmvn:
        total = np.zeros(NUM_BINS, dtype=np.float64)
        total_sq = np.zeros(NUM_BINS, dtype=np.float64)
        count = 0
        for f in feature_list:
            total += f.sum(axis=0, dtype=np.float64)
            total_sq += np.square(f, dtype=np.float64).sum(axis=0)
            count += len(f)
        if count == 0:
            raise ValueError("no frames to estimate CMVN from")
        mean = total / count
        var = np.maximum(total_sq / count - mean**2, 1e-6)
        return cls(mean.astype(np.float32), (1.0 / np.sqrt(var)).astype(np.float32))
