"""Speech synthesis and WAV I/O checked against hand computations and the engines themselves: where the end of
speech falls on small signals, the exact 16-bit values written and read, the WAV formats refused, a streamed
WAV, the argument ranges, espeak-ng's default speed at rate 1.0, the loudness of clean and noisy output, the
pitch shift and the shape of pink noise. Uses espeak-ng and sox on one or two short words."""

from __future__ import annotations

import math
import shutil
import struct
import subprocess
import wave
from pathlib import Path

import numpy as np
import pytest

from specbench.data.synthesis import end_of_speech, read_wav, synthesize, write_wav
from specbench.data.voices import get_voice
from specbench.errors import ConfigError, DataError

pytestmark = pytest.mark.unit
WORDS = "hello there"


@pytest.fixture
def espeak() -> None:
    for tool in ("espeak-ng", "sox"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed")


def _pcm(path: Path) -> list[int]:
    """The raw 16-bit sample values of a WAV, read with the standard library."""
    with wave.open(str(path), "rb") as w:
        return np.frombuffer(w.readframes(w.getnframes()), dtype="<i2").tolist()


def _write_pcm(path: Path, values: list[int], rate: int = 16000, channels: int = 1, width: int = 2) -> Path:
    with wave.open(str(path), "wb") as w:
        w.setnchannels(channels)
        w.setsampwidth(width)
        w.setframerate(rate)
        dtype = "<i2" if width == 2 else "u1"
        w.writeframes(np.asarray(values, dtype=dtype).tobytes())
    return path


def _centroid_hz(x: np.ndarray) -> float:
    power = np.abs(np.fft.rfft(x.astype(np.float64))) ** 2
    freqs = np.fft.rfftfreq(len(x), 1 / 16000)
    return float((power * freqs).sum() / power.sum())


# ---------------------------------------------------------------------------------------------- end of speech
def test_end_of_speech_is_the_end_of_the_last_frame_above_minus_40_db() -> None:
    # sample_rate 1000, 10 ms frames -> hop 10 samples; 95 samples = 9 full frames + a partial one of 5
    x = np.zeros(95)
    x[0:10] = 1.0  # frame 0: energy 10, the peak
    x[40:50] = 0.05  # frame 4: energy 10 * 0.0025, i.e. -26 dB: speech at a -40 dB threshold
    x[60:70] = 0.005  # frame 6: -46 dB: silence
    assert end_of_speech(x, sample_rate=1000) == pytest.approx(50 / 1000)  # end of frame 4
    # the same tail at -26 dB is silence at a -20 dB threshold
    assert end_of_speech(x, sample_rate=1000, threshold_db=-20.0) == pytest.approx(10 / 1000)


def test_end_of_speech_in_the_last_partial_frame_is_capped_at_the_signal_end() -> None:
    x = np.zeros(95)
    x[0:10] = 1.0
    x[92:95] = 1.0  # partial frame 9 (samples 90..94): its end is 100, capped at n = 95
    assert end_of_speech(x, sample_rate=1000) == pytest.approx(95 / 1000)


# ------------------------------------------------------------------------------------------------ WAV values
def test_write_wav_scales_by_32767_rounds_and_clips(tmp_path: Path) -> None:
    path = tmp_path / "v.wav"
    write_wav(path, np.array([0.0, 0.75, -0.75, 1.0, -1.0, 2.0, -2.0]))
    # 0.75 * 32767 = 24575.25 -> 24575; +-1.0 -> +-32767; +-2.0 clip to 32767 and -32768
    assert _pcm(path) == [0, 24575, -24575, 32767, -32767, 32767, -32768]
    with wave.open(str(path), "rb") as w:
        assert (w.getnchannels(), w.getsampwidth(), w.getframerate()) == (1, 2, 16000)


def test_read_wav_divides_by_32768(tmp_path: Path) -> None:
    path = _write_pcm(tmp_path / "r.wav", [-32768, -16384, 0, 16384, 32767])
    samples, rate = read_wav(path)
    assert rate == 16000 and samples.dtype == np.float32
    assert samples.tolist() == [-1.0, -0.5, 0.0, 0.5, 32767 / 32768]


def test_read_wav_refuses_stereo_and_8_bit_files(tmp_path: Path) -> None:
    stereo = _write_pcm(tmp_path / "stereo.wav", [0, 0, 100, -100], channels=2)
    with pytest.raises(DataError, match=r"stereo\.wav: sample rate 16000 Hz with 2 channel\(s\).*-c 1"):
        read_wav(stereo)
    eight = _write_pcm(tmp_path / "eight.wav", [128, 130, 126], width=1)
    with pytest.raises(DataError, match=r"eight\.wav: 8-bit samples; specbench needs 16-bit PCM"):
        read_wav(eight)


def test_read_wav_reads_a_streamed_wav_to_the_end_of_the_file(tmp_path: Path) -> None:
    """ffmpeg writing to a pipe leaves 0xFFFFFFFF as the data size: the samples run to the end of the file (a
    last odd byte, half a sample, is left out), where a size the file falls short of is a truncated file."""
    values = [0, 16384, -32768, 32767, 5]
    fmt = struct.pack("<4sIHHIIHH", b"fmt ", 16, 1, 1, 16000, 32000, 2, 16)
    body = np.asarray(values, dtype="<i2").tobytes()
    streamed = tmp_path / "streamed.wav"
    streamed.write_bytes(b"RIFF\xff\xff\xff\xffWAVE" + fmt + b"data\xff\xff\xff\xff" + body + b"\x01")
    samples, rate = read_wav(streamed)
    assert rate == 16000 and samples.tolist() == [v / 32768 for v in values]
    short = tmp_path / "short.wav"
    short.write_bytes(b"RIFF\x00\x01\x00\x00WAVE" + fmt + b"data\x00\x01\x00\x00" + body)
    with pytest.raises(DataError, match=r"short\.wav: truncated \(10 of 256 data bytes\)"):
        read_wav(short)
    piped = tmp_path / "piped.wav"  # sox writing to a pipe, as espeak-ng --stdout does: another size it leaves
    with piped.open("wb") as out:
        sox = subprocess.Popen(["sox", "-n", "-r", "16000", "-c", "1", "-b", "16", "-e", "signed-integer", "-t",
                                "wav", "-", "synth", "0.2", "sine", "300"], stdout=subprocess.PIPE)
        out.write(sox.communicate()[0])
    assert piped.read_bytes()[40:44] == b"\x00\xf0\xff\x7f" and read_wav(piped)[0].shape == (3200,)


# ----------------------------------------------------------------------------------------- argument checks
@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"rate": 0.49}, ConfigError, r"rate must be .*\[0\.5, 2\.0\]"),
        ({"rate": 2.01}, ConfigError, r"rate must be .*\[0\.5, 2\.0\]"),
        ({"snr_db": math.nan}, ConfigError, "snr_db must be"),
        ({"snr_db": -math.inf}, ConfigError, "snr_db must be"),
        ({"pitch_cents": 1200.5}, ConfigError, r"pitch_cents must be a shift in \[-1200, 1200\]"),
        ({"pitch_cents": -1500}, ConfigError, r"pitch_cents must be"),
        ({"text": "hello  there"}, DataError, "not normalized.*extra spaces"),
        ({"text": " hello"}, DataError, "not normalized"),
    ],
    ids=["rate-low", "rate-high", "snr-nan", "snr-minus-inf", "pitch-high", "pitch-low", "double-space",
         "leading-space"],
)
def test_bad_arguments_are_refused_before_anything_is_written(
    tmp_path: Path, espeak: None, kwargs: dict, error: type, match: str
) -> None:
    args = {"text": "hello", "voice": get_voice("espeak:en-us"), "rate": 1.0, "out_wav": tmp_path / "x.wav"}
    with pytest.raises(error, match=match):
        synthesize(**{**args, **kwargs})
    assert not (tmp_path / "x.wav").exists()


def test_the_rate_range_ends_are_accepted_and_an_unknown_noise_refused(tmp_path: Path, espeak: None) -> None:
    voice = get_voice("espeak:en-us")
    slow = synthesize("hi", voice, 0.5, tmp_path / "slow.wav")
    fast = synthesize("hi", voice, 2.0, tmp_path / "fast.wav")
    assert fast.duration_s < slow.duration_s
    with pytest.raises(ConfigError, match="noise must be 'white' or 'pink', got 'brown'"):
        synthesize("hi", voice, 1.0, tmp_path / "b.wav", snr_db=10.0, noise="brown")  # type: ignore[arg-type]


# ----------------------------------------------------------------------------------- against the engine itself
def test_rate_one_is_espeak_ngs_default_speed_and_clean_audio_keeps_its_level(tmp_path: Path, espeak: None) -> None:
    """At rate 1.0 the WAV is espeak-ng's own output (no -s) resampled to 16 kHz, at its own level: the same
    samples as sox's conversion of it, to 1 LSB (rounding)."""
    raw, ref = tmp_path / "raw.wav", tmp_path / "ref.wav"
    subprocess.run(["espeak-ng", "-v", "en-us", "-w", str(raw), WORDS], check=True, capture_output=True)
    subprocess.run(["sox", "-D", str(raw), "-r", "16000", "-c", "1", "-b", "16", str(ref)], check=True)
    with wave.open(str(raw), "rb") as w:
        expected = w.getnframes() * 16000 / w.getframerate()  # 22050 Hz in, 16 kHz out
    res = synthesize(WORDS, get_voice("espeak:en-us"), 1.0, tmp_path / "out.wav")
    assert abs(res.num_samples - expected) <= 1
    assert res.duration_s == res.num_samples / 16000
    ours, theirs = np.array(_pcm(tmp_path / "out.wav")), np.array(_pcm(ref))
    assert len(ours) == len(theirs) and np.abs(theirs).max() < 0.9 * 32768  # far from clipping
    assert np.abs(ours - theirs).max() <= 1


def test_noisy_audio_keeps_the_speech_level_when_it_does_not_clip(tmp_path: Path, espeak: None) -> None:
    voice = get_voice("espeak:en-us")
    synthesize(WORDS, voice, 1.0, tmp_path / "c.wav")
    synthesize(WORDS, voice, 1.0, tmp_path / "n.wav", seed=3, snr_db=20.0)
    clean, noisy = (read_wav(tmp_path / f"{n}.wav")[0].astype(np.float64) for n in ("c", "n"))
    assert np.abs(noisy).max() < 0.99  # no clipping to avoid, so no scaling
    gain = float(noisy @ clean / (clean @ clean))
    assert gain == pytest.approx(1.0, abs=0.01)


def test_pink_noise_is_zero_mean_with_power_falling_as_one_over_f(tmp_path: Path, espeak: None) -> None:
    voice = get_voice("espeak:en-us")
    synthesize(WORDS, voice, 1.0, tmp_path / "c.wav")
    synthesize(WORDS, voice, 1.0, tmp_path / "n.wav", seed=3, snr_db=10.0, noise="pink")
    clean, noisy = (read_wav(tmp_path / f"{n}.wav")[0].astype(np.float64) for n in ("c", "n"))
    residual = noisy - float(noisy @ clean / (clean @ clean)) * clean
    assert abs(residual.mean()) < 0.01 * residual.std()
    power = np.abs(np.fft.rfft(residual)) ** 2
    freqs = np.fft.rfftfreq(len(residual), 1 / 16000)
    band = (freqs >= 100) & (freqs <= 6000)
    slope = np.polyfit(np.log(freqs[band]), np.log(power[band]), 1)[0]
    assert slope == pytest.approx(-1.0, abs=0.25)  # log power against log f: 1/f has slope -1, white 0


def test_a_pitch_shift_of_an_octave_doubles_the_frequencies(tmp_path: Path, espeak: None) -> None:
    """sox's pitch effect moves the whole spectrum: +1200 cents doubles the spectral centroid, -1200 halves
    it, and the duration stays."""
    voice = get_voice("espeak:en-us")
    plain = synthesize(WORDS, voice, 1.0, tmp_path / "0.wav")
    up = synthesize(WORDS, voice, 1.0, tmp_path / "up.wav", pitch_cents=1200)
    down = synthesize(WORDS, voice, 1.0, tmp_path / "down.wav", pitch_cents=-1200)
    assert plain.num_samples == up.num_samples == down.num_samples
    base = _centroid_hz(read_wav(tmp_path / "0.wav")[0])
    assert _centroid_hz(read_wav(tmp_path / "up.wav")[0]) / base == pytest.approx(2.0, rel=0.15)
    assert _centroid_hz(read_wav(tmp_path / "down.wav")[0]) / base == pytest.approx(0.5, rel=0.15)
