"""The recorded sets of the real-speech job, as 16 kHz mono WAVs with normalized transcripts.

`asterisk`: Asterisk's core prompts (G.722, decoded by ffmpeg into the job's cache), each in its declared
`tune` or `test` half (`recorded_speech.prompt_half`, a CRC-32 of the name, fixed before anything is
decoded); `librivox` and `cards`: pocketsphinx-testdata's clips; `recordings`: the six shared recordings
(`../shared/data/speech`; five of them are the same LibriVox clips as pocketsphinx-testdata's). A file
that cannot be used is a flagged row with the reason; it never stops the others.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from specbench.data import real_speech, recorded_speech
from specbench.data.synthesis import read_wav, write_wav
from specbench.errors import SpecbenchError

STATUS_OK = recorded_speech.STATUS_OK


@dataclass(frozen=True)
class RealUtterance:
    """One recording: its set, id, 16 kHz WAV (None when unusable), normalized words, half and status."""

    set: str
    utt_id: str
    wav: Path | None
    text: str
    half: str  # "tune" or "test" for the Asterisk prompts, "-" for the other sets
    status: str = STATUS_OK

    @property
    def key(self) -> str:
        return f"{self.set}/{self.utt_id}"


def _asterisk(cache: Path) -> list[RealUtterance]:
    out = []
    for u in recorded_speech.asterisk_prompts():
        row = RealUtterance("asterisk", u.utt_id, None, u.text, recorded_speech.prompt_half(u.utt_id), u.status)
        if u.status == STATUS_OK:
            wav = cache / "asterisk" / f"{u.utt_id}.wav"
            try:
                if not wav.is_file():
                    recorded_speech.decode_g722(u.audio_path, wav)
                row = replace(row, wav=wav)
            except SpecbenchError as err:
                row = replace(row, status=str(err))
        out.append(row)
    return out


def _recordings(cache: Path) -> list[RealUtterance]:
    out = []
    for r in real_speech.real_recordings():
        wav = r.path if r.path.suffix == ".wav" else cache / "recordings" / f"{r.utt_id}.wav"
        row = RealUtterance("recordings", r.utt_id, wav, r.text, "-")
        try:
            if not wav.is_file():
                wav.parent.mkdir(parents=True, exist_ok=True)
                write_wav(wav, real_speech.load_audio(r.path))
            read_wav(wav)  # 16 kHz mono 16-bit, else a DataError naming the file and the fix
        except SpecbenchError as err:
            row = replace(row, wav=None, status=str(err))
        out.append(row)
    return out


def gather(sets: tuple[str, ...], max_per_set: int, cache: Path) -> list[RealUtterance]:
    """Every utterance of `sets` (flagged rows included); with `max_per_set`, the first usable ones of each
    set in name order (for the Asterisk prompts, of each half)."""
    rows: list[RealUtterance] = []
    if "asterisk" in sets:
        rows += _asterisk(cache)
    if {"librivox", "cards"} & set(sets):
        rows += [RealUtterance(u.set, u.utt_id, u.audio_path, u.text, "-", u.status)
                 for u in recorded_speech.sphinx_testdata() if u.set in sets]
    if "recordings" in sets:
        rows += _recordings(cache)
    if not max_per_set:
        return rows
    kept, seen = [], {}
    for row in rows:
        group = (row.set, row.half)
        if row.status != STATUS_OK or seen.get(group, 0) < max_per_set:
            kept.append(row)
            seen[group] = seen.get(group, 0) + (row.status == STATUS_OK)
    return kept
