"""The few real recordings in the shared data (`speech/librivox`, `speech/librispeech`): smoke tests of the
real-audio path. Their words are mostly outside the SLURP graph's vocabulary, so their WER says how a
SLURP-domain system fares on read book text, nothing more.
"""

from __future__ import annotations

import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from specbench.data.resolver import data_dir
from specbench.data.synthesis import read_wav
from specbench.data.text_norm import normalize
from specbench.errors import DataError, ToolError


@dataclass(frozen=True)
class Recording:
    utt_id: str
    path: Path
    text: str  # normalized


def real_recordings() -> list[Recording]:
    """Every recording with its normalized transcript (LibriVox WAVs with .txt files, the LibriSpeech FLAC)."""
    root = data_dir() / "speech"
    out = []
    for wav in sorted((root / "librivox").glob("*.wav")):
        txt = wav.with_suffix(".txt")
        if txt.is_file():
            out.append(Recording(wav.stem, wav, normalize(txt.read_text())))
    kaldi_text = root / "librispeech" / "mini_librispeech_text.kaldi"
    transcripts = {}
    if kaldi_text.is_file():
        for line in kaldi_text.read_text().splitlines():
            key, _, text = line.partition(" ")
            transcripts[key.removeprefix("lbi-")] = text
    for flac in sorted((root / "librispeech").glob("*.flac")):
        if flac.stem in transcripts:
            out.append(Recording(flac.stem, flac, normalize(transcripts[flac.stem])))
    return out


def load_audio(path: Path) -> np.ndarray:
    """16 kHz mono float32 samples of a WAV in that format (16-bit; another is refused with the sox command that
    converts it), or of any other file sox reads (FLAC), converted with sox without dither (`-D`: the same
    samples every time)."""
    if path.suffix == ".wav":
        return read_wav(path)[0]
    with tempfile.TemporaryDirectory(prefix="specbench-audio-") as tmp:
        wav = Path(tmp) / "audio.wav"
        try:
            subprocess.run(["sox", "-D", str(path), "-r", "16000", "-c", "1", "-b", "16", "-e", "signed-integer", str(wav)], check=True,
                           capture_output=True)
        except FileNotFoundError as err:
            raise ToolError("sox is not installed and is needed to read FLAC. Fix: apt-get install sox") from err
        except subprocess.CalledProcessError as err:
            raise DataError(f"{path}: sox cannot read it ({err.stderr.decode(errors='replace')[-300:]})") from err
        return read_wav(wav)[0]
