"""Senone scores from CMU Sphinx's en-us model (`acoustic.sphinx_scores`) on real recordings: the senone-log
format and its conversion, determinism, and bad input."""

from __future__ import annotations

import math
import struct
import wave
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from specbench.acoustic.sphinx_scores import SphinxSenoneScorer, pcm16, read_senone_log, senone_loglikes
from specbench.data.resolver import data_dir
from specbench.errors import DataError
from specbench.stage import STATUS_OK

LIBRIVOX = data_dir() / "speech" / "librivox"
CLIPS = sorted(LIBRIVOX.glob("*.wav"))[:2]


def _senone_log(path: Path, frames: np.ndarray, n_sen: int, counts: list[int] | None = None) -> Path:
    header = f"s3\nversion 0.1\nn_sen {n_sen}\nlogbase 1.000100\nendhdr\n".encode()
    body = b"".join(struct.pack("<h", (counts or [n_sen] * len(frames))[i]) + f.astype("<i2").tobytes()
                    for i, f in enumerate(frames))
    path.write_bytes(header + struct.pack("<I", 0x11223344) + body)
    return path


def test_a_senone_log_is_read_and_converted_to_nats(tmp_path: Path) -> None:
    frames = np.array([[0, 12, 300], [7, 0, 518]], dtype=np.int16)
    scores, logbase = read_senone_log(_senone_log(tmp_path / "a.sen", frames, 3), expected_senones=3)
    assert np.array_equal(scores, frames) and logbase == 1.0001
    nats = senone_loglikes(scores, logbase)
    assert nats.dtype == np.float32
    assert np.allclose(nats, -frames.astype(np.float64) * 1024 * math.log(1.0001), rtol=1e-6)
    assert nats[1, 2] == pytest.approx(-53.04, abs=0.01)  # about -0.1024 per unit


def test_bad_senone_logs_are_clear_errors(tmp_path: Path) -> None:
    frames = np.zeros((2, 3), dtype=np.int16)
    with pytest.raises(DataError, match=r"3 senones per frame, but the model's mdef has 5126.*Fix"):
        read_senone_log(_senone_log(tmp_path / "a.sen", frames, 3), expected_senones=5126)
    with pytest.raises(DataError, match="a frame lists 2 senones, not 3"):
        read_senone_log(_senone_log(tmp_path / "b.sen", frames, 3, counts=[3, 2]))
    cut = tmp_path / "c.sen"
    cut.write_bytes(_senone_log(tmp_path / "d.sen", frames, 3).read_bytes()[:-3])
    with pytest.raises(DataError, match="not a whole number"):
        read_senone_log(cut)


@pytest.fixture(scope="module")
def scorer() -> SphinxSenoneScorer:
    stage = SphinxSenoneScorer()
    stage.setup()
    return stage


def test_real_speech_gets_a_row_of_senone_scores_per_10_ms(scorer: SphinxSenoneScorer) -> None:
    out = scorer(pa.table({"utt_id": [c.stem for c in CLIPS], "audio_path": [str(c) for c in CLIPS]}))
    assert out.column("status").to_pylist() == [STATUS_OK] * len(CLIPS)
    for row, clip in zip(out.to_pylist(), CLIPS):
        with wave.open(str(clip)) as w:
            seconds = w.getnframes() / w.getframerate()
        assert row["num_classes"] == 5126 and row["frame_shift_ms"] == 10.0
        assert abs(row["num_frames"] - seconds * 100) <= 2
        mat = np.asarray(row["loglikes"], dtype=np.float32).reshape(row["num_frames"], 5126)
        assert np.all(np.isfinite(mat)) and np.all(mat <= 0.0)
        assert np.all(mat.max(axis=1) == 0.0)  # each frame relative to its best senone
        assert len(np.unique(mat.argmax(axis=1))) > 20  # the best senone moves with the speech


def write_pcm16(path: Path, rate: int, samples: np.ndarray) -> Path:
    """A mono 16-bit WAV file of `samples` at `rate` Hz."""
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(samples.astype("<i2").tobytes())
    return path


def test_scores_do_not_depend_on_what_was_scored_before(scorer: SphinxSenoneScorer) -> None:
    first = scorer(pa.table({"utt_id": ["a"], "audio_path": [str(CLIPS[0])]}))
    scorer(pa.table({"utt_id": ["b"], "audio_path": [str(CLIPS[1])]}))
    again = scorer(pa.table({"utt_id": ["a"], "audio_path": [str(CLIPS[0])]}))
    assert first.column("loglikes").to_pylist() == again.column("loglikes").to_pylist()


def test_scoring_leaves_no_folder_behind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where pocketsphinx's senone logs go
    out = SphinxSenoneScorer()(pa.table({"utt_id": ["a"], "audio_path": [str(CLIPS[0])]}))
    assert out.column("status").to_pylist() == [STATUS_OK] and list(tmp_path.iterdir()) == []


def test_audio_that_is_not_16_khz_keeps_its_row_with_the_reason(scorer: SphinxSenoneScorer, tmp_path: Path) -> None:
    wav8k = write_pcm16(tmp_path / "eight.wav", 8000, np.zeros(8000, dtype="<i2"))
    out = scorer(pa.table({"utt_id": ["bad", "good"], "audio_path": [str(wav8k), str(CLIPS[0])]})).to_pylist()
    assert "8000 Hz" in out[0]["status"] and "Fix" in out[0]["status"] and out[0]["loglikes"] is None
    assert out[1]["status"] == STATUS_OK


def test_audio_without_samples_keeps_its_row_with_the_reason(scorer: SphinxSenoneScorer, tmp_path: Path) -> None:
    empty = write_pcm16(tmp_path / "empty.wav", 16000, np.zeros(0, dtype="<i2"))
    out = scorer(pa.table({"utt_id": ["empty"], "audio_path": [str(empty)]})).to_pylist()[0]
    assert out["status"].startswith(f"{empty}: the audio has no samples") and "Fix" in out["status"]
    assert out["loglikes"] is None


def test_full_scale_samples_are_clipped_not_wrapped() -> None:
    assert pcm16(np.array([1.0, -1.0, 1.5, -1.5, 0.5])).tolist() == [32767, -32768, 32767, -32768, 16384]
