"""Recorded English speech with transcripts from Debian packages, for the real-speech evaluation.

- **Asterisk's core prompts** (`asterisk-core-sounds-en-g722`: 16 kHz G.722, one professional speaker,
  CC-BY-SA-3.0; transcripts `name: text` in `asterisk-core-sounds-en`'s `core-sounds-en.txt.gz`). A text
  that is only a bracketed description (`[this is a simple beep tone]`) is a tone, not speech, and is left
  out; a bracketed aside after words (`at [@]`) is dropped. The telephone keys `*` and `#` are read as the
  speaker says them, `star` and `pound` (`press # to enter` is spoken "press pound to enter"; the project's
  `normalize` would drop `*` and read `#` as `hashtag`). The G.722 audio is decoded to 16 kHz mono WAV
  by ffmpeg (two samples per byte: G.722 codes 16 kHz audio at 64 kbit/s). `prompt_half` puts each prompt in the `tune` or the `test` half by a hash of its name, fixed
  before anything is decoded.
- **pocketsphinx-testdata** (BSD-2): LibriVox sentences and spoken card commands, 16 kHz WAV, with Sphinx
  transcriptions (`<s> words </s> (id)`).

Bad input never stops the listing: a transcript line without an audio file, an audio file without a
transcript, or a file ffmpeg cannot decode becomes a row whose `status` names the file and the fix.
"""

from __future__ import annotations

import gzip
import os
import re
import subprocess
import wave
import zlib
from dataclasses import dataclass
from pathlib import Path

from specbench.data.text_norm import normalize
from specbench.errors import ToolError
from specbench.stage import STATUS_OK

ASTERISK_SOUNDS = Path("/usr/share/asterisk/sounds/en")
ASTERISK_TRANSCRIPTS = Path("/usr/share/doc/asterisk-core-sounds-en/core-sounds-en.txt.gz")
SPHINX_TESTDATA = Path("/usr/share/pocketsphinx/test/data")
_INSTALL = "Fix: apt-get install asterisk-core-sounds-en-g722 asterisk-core-sounds-en pocketsphinx-testdata"
_BRACKETED = re.compile(r"\[[^\]]*\]|\([^)]*\)|<[^>]*>")  # descriptions, never spoken: [...], (...), <...>
_KEYS = str.maketrans({"*": " star ", "#": " pound "})  # telephone keys, as the prompts speak them
_SPHINX_LINE = re.compile(r"^\s*(?:<s>)?(?P<text>.*?)(?:</s>)?\s*\((?P<id>[^)]+)\)\s*$")


@dataclass(frozen=True)
class RecordedUtterance:
    """One recording: `set` (asterisk, librivox, cards), its id, audio file, normalized transcript and
    status (`ok`, or why it cannot be used)."""

    set: str
    utt_id: str
    audio_path: Path | None
    text: str
    status: str = STATUS_OK


def prompt_half(name: str) -> str:
    """`tune` or `test`: the declared half of an Asterisk prompt, by a CRC-32 of its name."""
    return "tune" if zlib.crc32(name.encode()) % 2 == 0 else "test"


def asterisk_prompts(sounds: Path = ASTERISK_SOUNDS, transcripts: Path = ASTERISK_TRANSCRIPTS) -> list[RecordedUtterance]:
    """Every transcribed Asterisk prompt and every G.722 file, in name order (see the module docstring)."""
    if not transcripts.is_file() or not sounds.is_dir():
        missing = transcripts if not transcripts.is_file() else sounds
        raise ToolError(f"{missing} does not exist: the Asterisk prompts are not installed. {_INSTALL}")
    texts: dict[str, str] = {}
    with gzip.open(transcripts, "rt", encoding="utf-8") as fh:
        for line in fh:
            name, sep, text = line.partition(":")
            if not sep or line.startswith(";") or " " in name.strip():
                continue
            texts[name.strip()] = text.strip()
    audio = {str(p.relative_to(sounds).with_suffix("")): p for p in sounds.rglob("*.g722")}
    out = []
    for name in sorted(set(texts) | set(audio)):
        words = normalize(_BRACKETED.sub(" ", texts.get(name, "")).translate(_KEYS))
        if name not in audio:
            status = f"{transcripts}: '{name}' has a transcript but no {name}.g722 under {sounds}. {_INSTALL}"
        elif name not in texts:
            status = f"{audio[name]}: no transcript line '{name}: ...' in {transcripts}; left out"
        elif not words:
            status = f"not speech: the transcript is only a description ({texts[name]})"
        else:
            status = STATUS_OK
        out.append(RecordedUtterance("asterisk", name, audio.get(name), words, status))
    return out


def _sphinx_set(name: str, folder: Path, transcription: str) -> list[RecordedUtterance]:
    path = folder / transcription
    if not path.is_file():
        raise ToolError(f"{path} does not exist: pocketsphinx-testdata is not installed. {_INSTALL}")
    out = []
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        match = _SPHINX_LINE.match(line)
        if match is None:
            out.append(RecordedUtterance(name, f"{path.name}:{lineno}", None, "",
                                         f"{path}, line {lineno}: not '<s> words </s> (id)'; left out"))
            continue
        utt = match["id"].strip()
        wav = folder / f"{utt}.wav"
        words = normalize(match["text"])
        if not wav.is_file():
            status = f"{path}, line {lineno}: no audio file {wav}. {_INSTALL}"
        elif not words:  # a WER over no reference words counts only insertions: left out, as in the Asterisk set
            status = f"{path}, line {lineno}: the transcript of {utt} has no words; left out"
        else:
            status = STATUS_OK
        out.append(RecordedUtterance(name, utt, wav if wav.is_file() else None, words, status))
    return out


def sphinx_testdata(root: Path = SPHINX_TESTDATA) -> list[RecordedUtterance]:
    """The LibriVox sentences and the card commands of pocketsphinx-testdata."""
    return _sphinx_set("librivox", root / "librivox", "transcription") + _sphinx_set("cards", root / "cards",
                                                                                     "cards.transcription")


def _samples(wav: Path) -> int:
    try:
        with wave.open(str(wav), "rb") as w:
            return w.getnframes()
    except (OSError, EOFError, wave.Error):
        return 0


def decode_g722(source: Path, wav: Path) -> None:
    """`source` (G.722) as a 16 kHz mono 16-bit WAV at `wav`, by ffmpeg; `ToolError` names the file and the fix.
    ffmpeg writes a temporary file beside `wav`, renamed to `wav` only once it holds audio: an interrupted
    decode never leaves a partial `wav` to be taken for a finished one."""
    wav.parent.mkdir(parents=True, exist_ok=True)
    tmp = wav.with_name(f".{wav.name}.{os.getpid()}.tmp")
    try:
        try:
            proc = subprocess.run(["ffmpeg", "-nostdin", "-v", "error", "-y", "-f", "g722", "-i", str(source),
                                   "-ar", "16000", "-ac", "1", "-c:a", "pcm_s16le", "-f", "wav", str(tmp)],
                                  capture_output=True, text=True, timeout=120, check=False)
        except FileNotFoundError as err:
            raise ToolError(f"{source}: ffmpeg is not installed, and it decodes G.722. Fix: apt-get install "
                            "ffmpeg") from err
        except subprocess.TimeoutExpired as err:  # this file's row fails, not the whole job
            raise ToolError(f"{source}: ffmpeg took more than {err.timeout:g} s to decode it. Fix: check the file "
                            "and the machine's load, or leave the file out.") from err
        if proc.returncode != 0 or _samples(tmp) == 0:
            wav.unlink(missing_ok=True)
            raise ToolError(f"{source}: ffmpeg cannot decode it as G.722 ({proc.stderr.strip()[-300:] or 'no audio'}). "
                            "Fix: reinstall asterisk-core-sounds-en-g722, or leave the file out.")
        os.replace(tmp, wav)
    finally:
        tmp.unlink(missing_ok=True)
