"""Speech synthesis of one normalized sentence to a 16 kHz mono 16-bit WAV, and WAV reading.

`synthesize` runs the voice's engine on the text (written to a temporary file, never through a shell),
converts the engine's output with sox to 16 kHz mono float samples, measures the end of speech, optionally
adds Gaussian noise at a given SNR, and writes the WAV atomically (temporary name + `os.replace`).

Speaking rate is a multiplier of the engine's default speed (rate 1.3 is 30 % faster):

- espeak-ng: ``-s round(175 * rate)`` words per minute (175 is espeak-ng's default);
- flite: ``--setf duration_stretch=1/rate``;
- festival (HTS voices): the hts_engine speed option ``-r rate``, appended to ``hts_engine_params``.
  festival's ``(Parameter.set 'Duration_Stretch X)`` has no effect on HTS voices (hts_engine computes its
  own durations), which was measured: 1.91 s at stretch 0.6 and at 1.0.

Pitch: an optional shift in cents (100 cents = a semitone), applied by sox's ``pitch`` effect (a
time-domain pitch shift that keeps the duration) while converting the engine's output; the same for every
engine, so a user's voice can vary slightly from request to request.

Noise: white, or pink-ish (1/f power, shaped in the frequency domain), zero-mean Gaussian, scaled so that
``10 log10(P_speech / P_noise) = snr_db`` where P is the mean power over the whole clean utterance (pink
noise is scaled to that power exactly; white noise has it in expectation, so the realized SNR of one
utterance spreads around it, by a standard deviation of 0.03 dB for 3 seconds at 16 kHz); it is
drawn from `numpy.random.default_rng(seed)`, so the same inputs give the same bytes. When speech plus noise
would clip, both are scaled down together (the SNR is unchanged).
"""

from __future__ import annotations

import math
import os
import re
import shutil
import subprocess
import tempfile
import wave
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np

from specbench.data.voices import Voice, check_installed
from specbench.errors import ConfigError, DataError, ToolError

__all__ = [
    "SAMPLE_RATE",
    "SynthResult",
    "end_of_speech",
    "read_wav",
    "synthesize",
    "write_wav",
]

SAMPLE_RATE = 16_000
ESPEAK_DEFAULT_WPM = 175
RATE_RANGE = (0.5, 2.0)
_NORMALIZED = re.compile(r"[a-z']+(?: [a-z']+)*")
_ENGINE_TIMEOUT_S = 120.0
_PEAK_LIMIT = 0.99
NoiseKind = Literal["white", "pink"]
# The data size a writer that cannot seek back to the header leaves there (ffmpeg writing to a pipe): unknown
_STREAMED_SIZE = 0xFFFFFFFF
_PIPED_SIZE = 0x7FFFF000  # the data size sox and espeak-ng write when their output is a pipe


@dataclass(frozen=True)
class SynthResult:
    """What `synthesize` wrote.

    Attributes:
        duration_s: length of the WAV, seconds (num_samples / 16000).
        num_samples: samples in the WAV (mono, 16 kHz).
        end_of_speech_s: end of the last non-silent 10 ms frame of the clean speech, seconds.
    """

    duration_s: float
    num_samples: int
    end_of_speech_s: float


def _check_text(text: str, where: str) -> None:
    """`DataError` unless `text` is non-empty normalized text (``a-z``, ``'``, single spaces)."""
    if not text or not text.strip():
        raise DataError(f"{where}: the text is empty; there is nothing to synthesize.")
    if not _NORMALIZED.fullmatch(text):
        bad = sorted(set(re.sub(r"[a-z' ]", "", text)))
        detail = f"characters {''.join(bad)!r} outside [a-z' ]" if bad else "extra spaces"
        raise DataError(
            f"{where}: text {text!r} is not normalized ({detail}). Fix: pass "
            "specbench.data.text_norm.normalize(text) first."
        )


def _check_rate(rate: float) -> None:
    lo, hi = RATE_RANGE
    if not (isinstance(rate, (int, float)) and lo <= rate <= hi):
        raise ConfigError(f"rate must be a speed multiplier in [{lo}, {hi}], got {rate!r}")


def _is_clean(snr_db: float | None) -> bool:
    """True for None or +inf; False for a finite SNR; `ConfigError` for NaN or -inf."""
    if snr_db is None:
        return True
    value = float(snr_db)
    if math.isnan(value) or value == -math.inf:
        raise ConfigError(f"snr_db must be a finite number of dB or +inf (clean), got {snr_db!r}")
    return value == math.inf


def _engine_command(voice: Voice, rate: float, text_file: Path, raw_wav: Path) -> list[str]:
    """The argv that makes `voice`'s engine speak the text in `text_file` into `raw_wav`."""
    if voice.engine == "espeak-ng":
        wpm = str(round(ESPEAK_DEFAULT_WPM * rate))
        return ["espeak-ng", "-v", voice.engine_voice, "-s", wpm, "-f", str(text_file), "-w", str(raw_wav)]
    if voice.engine == "flite":
        stretch = f"{1.0 / rate:.6f}"
        return ["flite", "-voice", voice.engine_voice, "--setf", f"duration_stretch={stretch}",
                "-f", str(text_file), "-o", str(raw_wav)]
    if voice.engine_voice.endswith("_hts"):  # HTS voices take the engine's speed ratio
        speed = f"(set! hts_engine_params (append hts_engine_params (list (list \"-r\" {rate:.6f}))))"
    else:  # diphone and cluster voices stretch their predicted durations
        speed = f"(Parameter.set 'Duration_Stretch {1.0 / rate:.6f})"
    return ["text2wave", "-eval", f"(voice_{voice.engine_voice})", "-eval", speed,
            "-o", str(raw_wav), str(text_file)]


def _run_tool(args: list[str], what: str) -> bytes:
    """Run `args` without a shell; return stdout, or raise `ToolError` with the command and its stderr."""
    try:
        proc = subprocess.run(args, capture_output=True, timeout=_ENGINE_TIMEOUT_S, check=False)
    except FileNotFoundError as err:
        raise ToolError(f"{what}: {args[0]} is not installed ({err}).") from err
    except subprocess.TimeoutExpired as err:
        raise ToolError(f"{what}: {args[0]} ran longer than {_ENGINE_TIMEOUT_S:.0f} s") from err
    stderr = proc.stderr.decode("utf-8", "replace").strip()
    if proc.returncode != 0 or "SIOD ERROR" in stderr:
        raise ToolError(f"{what}: `{' '.join(args)}` failed (exit {proc.returncode}): {stderr[-500:]}")
    return proc.stdout


def _to_16k_float(raw_wav: Path, what: str, pitch_cents: float = 0.0) -> np.ndarray:
    """The engine's WAV as 16 kHz mono float32 samples (sox, high-quality rate conversion, no dither),
    pitch-shifted by `pitch_cents` when it is not 0."""
    if not raw_wav.is_file() or raw_wav.stat().st_size <= 44:
        raise ToolError(f"{what}: the engine wrote no audio to {raw_wav.name}")
    effects = ["pitch", f"{pitch_cents:.3f}"] if pitch_cents else []
    out = _run_tool(
        ["sox", "-D", str(raw_wav), "-t", "raw", "-r", str(SAMPLE_RATE), "-c", "1",
         "-b", "32", "-e", "floating-point", "-L", "-", *effects],
        what,
    )
    samples = np.frombuffer(out, dtype="<f4").astype(np.float32)
    if samples.size == 0:
        raise ToolError(f"{what}: the engine produced an empty waveform")
    return samples


def end_of_speech(samples: np.ndarray, sample_rate: int = SAMPLE_RATE, threshold_db: float = -40.0,
                  frame_s: float = 0.010) -> float:
    """End of the last non-silent frame, seconds.

    Args:
        samples: (N,) float waveform.
        threshold_db: a frame is speech when its energy is above the loudest frame's energy + threshold_db.
        frame_s: frame length, seconds (non-overlapping frames; the last partial frame counts).

    Returns the end time of the last speech frame, at most N / sample_rate; 0.0 for all-zero input.
    """
    x = np.asarray(samples, dtype=np.float64)
    n = len(x)
    hop = max(1, int(round(frame_s * sample_rate)))
    num_frames = math.ceil(n / hop)
    if num_frames == 0:
        return 0.0
    padded = np.zeros(num_frames * hop)
    padded[:n] = x
    energy = (padded.reshape(num_frames, hop) ** 2).sum(axis=1)
    peak = energy.max()
    if peak <= 0.0:
        return 0.0
    speech = np.flatnonzero(energy > peak * 10.0 ** (threshold_db / 10.0))
    return min((int(speech[-1]) + 1) * hop, n) / sample_rate


def _noise(n: int, kind: NoiseKind, rng: np.random.Generator) -> np.ndarray:
    """(n,) float64 Gaussian noise, white (unit power in expectation) or pink-ish (power ~ 1/f; zero mean and
    unit power exactly)."""
    white = rng.standard_normal(n)
    if kind == "white":
        return white
    if kind != "pink":
        raise ConfigError(f"noise must be 'white' or 'pink', got {kind!r}")
    spec = np.fft.rfft(white)
    freqs = np.fft.rfftfreq(n)
    freqs[0] = freqs[1] if n > 1 else 1.0
    pink = np.fft.irfft(spec / np.sqrt(freqs), n)
    pink -= pink.mean()
    return pink / max(float(np.sqrt(np.mean(pink**2))), 1e-12)


def _add_noise(clean: np.ndarray, snr_db: float, seed: int, kind: NoiseKind) -> np.ndarray:
    """`clean` plus noise at `snr_db` (whole-utterance power), scaled down together if it would clip."""
    power = float(np.mean(clean.astype(np.float64) ** 2))
    noise = _noise(len(clean), kind, np.random.default_rng(seed)) * math.sqrt(power / 10.0 ** (snr_db / 10.0))
    noisy = clean.astype(np.float64) + noise
    peak = float(np.abs(noisy).max())
    if peak > _PEAK_LIMIT:
        noisy *= _PEAK_LIMIT / peak
    return noisy


def write_wav(path: Path, samples: np.ndarray, sample_rate: int = SAMPLE_RATE) -> None:
    """Write (N,) float samples in [-1, 1] as mono 16-bit PCM, atomically (temp file + `os.replace`)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    pcm = np.clip(np.round(np.asarray(samples, dtype=np.float64) * 32767.0), -32768, 32767).astype("<i2")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh, wave.open(fh, "wb") as w:
            w.setnchannels(1)
            w.setsampwidth(2)
            w.setframerate(sample_rate)
            w.writeframes(pcm.tobytes())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def synthesize(text: str, voice: Voice, rate: float, out_wav: Path, seed: int = 0,
               snr_db: float | None = None, noise: NoiseKind = "white", pitch_cents: float = 0.0) -> SynthResult:
    """Speak normalized `text` with `voice` into `out_wav` (16 kHz mono 16-bit PCM).

    Args:
        text: normalized text (`text_norm.normalize`): ``a-z``, ``'`` and single spaces, non-empty.
        voice: a registry voice (`voices.get_voice`).
        rate: speed multiplier of the engine's default, in [0.5, 2.0]; > 1 is faster.
        out_wav: the WAV to write; its folder is created.
        seed: seeds the noise (unused when clean).
        snr_db: signal-to-noise ratio in dB; None or +inf for clean speech.
        noise: ``white`` or ``pink`` Gaussian noise.
        pitch_cents: pitch shift in cents, in [-1200, 1200]; 0 leaves the engine's pitch.

    Raises `DataError` for empty or unnormalized text, `ToolError` when the engine or sox is missing or
    fails, `ConfigError` for a rate out of range. The end of speech is measured before noise is added.
    """
    out_wav = Path(out_wav)
    _check_text(text, f"utterance {out_wav.stem}")
    _check_rate(rate)
    _is_clean(snr_db)
    if not (isinstance(pitch_cents, (int, float)) and -1200.0 <= pitch_cents <= 1200.0):
        raise ConfigError(f"pitch_cents must be a shift in [-1200, 1200] cents, got {pitch_cents!r}")
    check_installed(voice)
    if shutil.which("sox") is None:
        raise ToolError("sox is not installed. Fix: apt-get install sox")
    what = f"utterance {out_wav.stem} ({voice.name})"
    with tempfile.TemporaryDirectory(prefix="specbench-tts-") as tmp:
        text_file, raw_wav = Path(tmp) / "text.txt", Path(tmp) / "engine.wav"
        text_file.write_text(text + "\n", encoding="utf-8")
        _run_tool(_engine_command(voice, rate, text_file, raw_wav), what)
        clean = _to_16k_float(raw_wav, what, float(pitch_cents))
    eos = end_of_speech(clean)
    if _is_clean(snr_db):
        audio = clean.astype(np.float64)
        peak = float(np.abs(audio).max())
        if peak > _PEAK_LIMIT:
            audio *= _PEAK_LIMIT / peak
    else:
        audio = _add_noise(clean, float(snr_db), seed, noise)  # type: ignore[arg-type]
    write_wav(out_wav, audio)
    return SynthResult(duration_s=len(audio) / SAMPLE_RATE, num_samples=len(audio), end_of_speech_s=eos)


def read_wav(path: Path) -> tuple[np.ndarray, int]:
    """Read a 16 kHz mono 16-bit PCM WAV.

    Returns ``(samples, 16000)`` with samples (N,) float32 in [-1, 1). Raises `DataError` naming the file for
    an unreadable, truncated or non-PCM file, and for another sample rate or channel count (with the sox fix).
    A streamed WAV (data size 0xFFFFFFFF in its header, as ffmpeg writes to a pipe) is read to the end of the
    file.
    """
    path = Path(path)
    fix = f"Fix: sox {path} -r {SAMPLE_RATE} -c 1 -b 16 -e signed-integer OUT.wav"
    try:
        with wave.open(str(path), "rb") as w:
            channels, width = w.getnchannels(), w.getsampwidth()
            rate, frames = w.getframerate(), w.getnframes()
            data = w.readframes(frames)
    except FileNotFoundError as err:
        raise DataError(f"{path}: no such WAV file. Fix: check the path, or synthesize the corpus again "
                        "(`specbench data speech JOB.toml`)") from err
    except (wave.Error, EOFError, OSError, ValueError) as err:
        raise DataError(f"{path}: not a readable PCM WAV file ({str(err) or 'it ends early'}). {fix} (or "
                        "synthesize it again)") from err
    if rate != SAMPLE_RATE or channels != 1:
        raise DataError(
            f"{path}: sample rate {rate} Hz with {channels} channel(s); specbench needs {SAMPLE_RATE} Hz "
            f"mono. {fix}"
        )
    if width != 2:
        raise DataError(f"{path}: {8 * width}-bit samples; specbench needs 16-bit PCM. {fix}")
    if frames * width > _STREAMED_SIZE - width or frames * width == _PIPED_SIZE:  # the samples run to the end
        data = data[: len(data) - len(data) % width]
    elif len(data) != frames * width:
        raise DataError(f"{path}: truncated ({len(data)} of {frames * width} data bytes). Fix: synthesize or "
                        "copy it again; its header promises more samples than the file holds.")
    return np.frombuffer(data, dtype="<i2").astype(np.float32) / 32768.0, rate
