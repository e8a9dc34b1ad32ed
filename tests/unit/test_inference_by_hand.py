"""The inference stage's time axis: the frame shift it writes into a scores table (what decoders and latency
figures read) times the number of output frames spans the audio, one 40 ms output frame per four 10 ms
fbank frames; and a one-utterance scoring call honours its VTLN warp."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from specbench.acoustic.checkpoint import load_checkpoint
from specbench.acoustic.features import fbank
from specbench.acoustic.inference import AcousticScorer, score_features, score_samples
from specbench.data.synthesis import write_wav
from specbench.wfst.lexicon import PHONES

pytestmark = pytest.mark.unit
RNG = np.random.default_rng(11)


def test_frame_shift_times_frames_spans_the_audio(checkpoint: Path, tmp_path: Path) -> None:
    lengths = {"u0": 16000, "u1": 8000, "u2": 40000}  # 1 s, 0.5 s, 2.5 s
    for name, n in lengths.items():
        write_wav(tmp_path / f"{name}.wav", RNG.normal(0, 0.1, n).astype(np.float32))
    table = pa.table({"utt_id": list(lengths), "audio_path": [f"{n}.wav" for n in lengths]})
    out = AcousticScorer(checkpoint, tmp_path, expected_phones=PHONES)(table).to_pylist()
    for row in out:
        duration_ms = lengths[row["utt_id"]] / 16.0
        fbank_frames = 1 + (lengths[row["utt_id"]] - 400) // 160
        assert row["num_frames"] == -(-fbank_frames // 4)  # two stride-2 convolutions
        assert row["frame_shift_ms"] == 40.0
        assert abs(row["frame_shift_ms"] * row["num_frames"] - duration_ms) <= 40.0


def test_scoring_one_utterance_applies_its_warp(checkpoint: Path) -> None:
    ckpt = load_checkpoint(checkpoint, PHONES)
    audio = RNG.normal(0, 0.1, 12000).astype(np.float32)
    warped = score_samples(ckpt, audio, warp=1.1)
    np.testing.assert_allclose(warped, score_features(ckpt, [fbank(audio)], warp=1.1)[0], atol=1e-6)
    assert not np.allclose(warped, score_samples(ckpt, audio), atol=1e-4)
