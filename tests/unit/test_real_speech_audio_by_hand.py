"""The shared recordings on a hand-made data folder: transcripts normalized, the LibriSpeech id prefix
dropped, a 44.1 kHz stereo FLAC read as 16 kHz mono with its tone's frequency kept, a WAV of another rate
flagged, an empty cached conversion made again, flagged rows not counted in a sample; pocketsphinx's penalty
setting, and an utterance too short for a hypothesis (no words, no score)."""

from __future__ import annotations

import subprocess
import wave
from pathlib import Path

import numpy as np
import pocketsphinx
import pytest

from specbench.data.real_speech import load_audio, real_recordings
from specbench.data.synthesis import read_wav, write_wav
from specbench.errors import DataError
from specbench.experiments.real_speech.audio import STATUS_OK, gather
from specbench.experiments.real_speech.sphinx_decode import SphinxJob, decode_chunk, decoder_settings

pytestmark = pytest.mark.unit
SHIPPED_LM = str(Path(pocketsphinx.get_model_path()) / "en-us" / "en-us.lm.bin")


def _folder(root: Path) -> Path:
    """librivox: a (44.1 kHz), b, c, d (no .txt); librispeech: two FLACs of a 1 kHz tone, one transcribed."""
    vox, libri = root / "speech" / "librivox", root / "speech" / "librispeech"
    libri.mkdir(parents=True)
    write_wav(vox / "a.wav", np.zeros(441), sample_rate=44100)
    for name in ("b", "c", "d"):
        write_wav(vox / f"{name}.wav", np.full(160, 0.25))
    for name, text in (("a", "Too fast."), ("b", "Hello, World!"), ("c", "one two  three")):
        (vox / f"{name}.txt").write_text(text)
    tone = np.round(0.5 * 32767 * np.sin(2 * np.pi * 1000 * np.arange(22050) / 44100)).astype("<i2")
    with wave.open(str(libri / "tone.wav"), "wb") as w:
        w.setnchannels(2), w.setsampwidth(2), w.setframerate(44100), w.writeframes(np.repeat(tone, 2).tobytes())
    for stem in ("1-2-3", "7-7-7"):
        subprocess.run(["sox", str(libri / "tone.wav"), str(libri / f"{stem}.flac")], check=True)
    (libri / "mini_librispeech_text.kaldi").write_text("lbi-1-2-3 SOME WORDS HERE\nlbi-9-9-9 NO AUDIO\n")
    return root


def test_recordings_are_listed_converted_and_flagged(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = _folder(tmp_path / "data")
    monkeypatch.setenv("SPECBENCH_DATA", str(data))
    assert [(r.utt_id, r.text) for r in real_recordings()] == [
        ("a", "too fast"), ("b", "hello world"), ("c", "one two three"), ("1-2-3", "some words here")]
    flac = data / "speech" / "librispeech" / "1-2-3.flac"
    samples = load_audio(flac)
    assert samples.shape == (8000,)  # 22050 samples at 44.1 kHz = 0.5 s = 8000 at 16 kHz
    spectrum = np.abs(np.fft.rfft(samples))
    assert np.argmax(spectrum) * 16000 / 8000 == 1000.0  # bins of 2 Hz: the peak stays at 1 kHz
    assert np.abs(samples).max() == pytest.approx(0.5, abs=0.02)  # both channels alike: the mix keeps 0.5
    assert np.array_equal(load_audio(flac), samples)  # no random dither: the same samples every time
    assert np.array_equal(load_audio(data / "speech" / "librivox" / "b.wav"), np.full(160, 8192 / 32768))
    (tmp_path / "bad.flac").write_bytes(b"not audio")
    with pytest.raises(DataError, match="bad.flac: sox cannot read it"):
        load_audio(tmp_path / "bad.flac")
    cache = tmp_path / "cache"
    write_wav(cache / "recordings" / "1-2-3.wav", np.zeros(0))  # a cached conversion without samples
    rows = gather(("recordings",), 0, cache)
    assert [(r.utt_id, r.half, r.status == STATUS_OK) for r in rows] == [
        ("a", "-", False), ("b", "-", True), ("c", "-", True), ("1-2-3", "-", True)]
    assert rows[0].wav is None and "sample rate 44100 Hz" in rows[0].status
    assert rows[1].wav == data / "speech" / "librivox" / "b.wav"  # a 16 kHz WAV is read where it is
    assert rows[3].wav == cache / "recordings" / "1-2-3.wav" and read_wav(rows[3].wav)[0].shape == (8000,)
    # a sample of one per set: the flagged 'a' is kept and not counted; 'b' (two words) is short of three
    assert [r.utt_id for r in gather(("recordings",), 1, cache)] == ["a", "b"]
    assert [r.utt_id for r in gather(("recordings",), 1, cache, min_words=3)] == ["a", "c"]
    write_wav(data / "speech" / "librivox" / "b.wav", np.zeros(0))  # a recording without samples is flagged
    assert [(r.wav, r.status) for r in gather(("recordings",), 0, cache) if r.utt_id == "b"] == [
        (None, f"{data / 'speech' / 'librivox' / 'b.wav'}: the recording has no samples (the recognizers cannot "
               "decode it). Fix: replace it with the recording, or remove it with its transcript.")]


def test_pocketsphinx_settings_and_an_utterance_without_hypothesis(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="one weight per pass"):
        SphinxJob((), SHIPPED_LM, 8.0, 0.2, pass_weights=(6.5, 8.5, 9.5, 1.0))
    config = pocketsphinx.Config(**decoder_settings(SphinxJob((), SHIPPED_LM, 6.5, 0.2)))
    assert config["wip"] == pytest.approx(0.2)  # not pocketsphinx's default 0.65
    write_wav(tmp_path / "blip.wav", np.zeros(100))  # 6 ms: too short for any word
    (result,) = decode_chunk(SphinxJob((("cards/blip", str(tmp_path / "blip.wav")),), SHIPPED_LM, 6.5, 0.65))
    assert result.key == "cards/blip" and result.words == [] and result.score is None
