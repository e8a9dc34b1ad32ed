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
from specbench.errors import DataError, SpecbenchError

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


def _asterisk() -> list[RealUtterance]:
    """The prompts in name order, not yet decoded: `wav` holds the G.722 file until `_decoded`."""
    return [RealUtterance("asterisk", u.utt_id, u.audio_path, u.text, recorded_speech.prompt_half(u.utt_id),
                          u.status) for u in recorded_speech.asterisk_prompts()]


def _usable_wav(wav: Path) -> bool:
    """Whether a cached WAV reads as 16 kHz mono 16-bit audio with samples (else it is made again)."""
    try:
        samples, _ = read_wav(wav)
    except (SpecbenchError, OSError, EOFError):
        return False
    return len(samples) > 0


def _decoded(row: RealUtterance, cache: Path) -> RealUtterance:
    """An Asterisk prompt with its G.722 audio decoded into the cache, or flagged with the reason. A cached
    WAV is reused only when it reads as audio; an empty or damaged one is decoded again."""
    wav = cache / "asterisk" / f"{row.utt_id}.wav"
    try:
        if not _usable_wav(wav):
            recorded_speech.decode_g722(row.wav, wav)
        return replace(row, wav=wav)
    except SpecbenchError as err:
        return replace(row, wav=None, status=str(err))


def _recordings(cache: Path) -> list[RealUtterance]:
    out = []
    for r in real_speech.real_recordings():
        wav = r.path if r.path.suffix == ".wav" else cache / "recordings" / f"{r.utt_id}.wav"
        row = RealUtterance("recordings", r.utt_id, wav, r.text, "-")
        try:
            if wav != r.path and not _usable_wav(wav):  # a conversion in the cache, made again when damaged
                write_wav(wav, real_speech.load_audio(r.path))  # atomic: a temporary file, then renamed
            samples, _ = read_wav(wav)  # 16 kHz mono 16-bit, else a DataError naming the file and the fix
            if not len(samples):
                raise DataError(f"{wav}: the recording has no samples (the recognizers cannot decode it). "
                                "Fix: replace it with the recording, or remove it with its transcript.")
        except SpecbenchError as err:
            row = replace(row, wav=None, status=str(err))
        out.append(row)
    return out


def gather(sets: tuple[str, ...], max_per_set: int, cache: Path, min_words: int = 0) -> list[RealUtterance]:
    """Every utterance of `sets` (flagged rows included); with `max_per_set`, the first usable ones of each
    set in name order (for the Asterisk prompts, of each half) among those of at least `min_words` words, so a
    small sample is not a handful of one-word prompts. Only the prompts kept are decoded: a sample of a few per
    half does not wait for all 569."""
    rows: list[RealUtterance] = []
    if "asterisk" in sets:
        rows += _asterisk()
    if {"librivox", "cards"} & set(sets):
        rows += [RealUtterance(u.set, u.utt_id, u.audio_path, u.text, "-", u.status)
                 for u in recorded_speech.sphinx_testdata() if u.set in sets]
    if "recordings" in sets:
        rows += _recordings(cache)
    kept, seen = [], {}
    for row in rows:
        group = (row.set, row.half)
        if row.status == STATUS_OK and max_per_set and (seen.get(group, 0) >= max_per_set
                                                        or len(row.text.split()) < min_words):
            continue
        if row.set == "asterisk" and row.status == STATUS_OK:
            row = _decoded(row, cache)
        kept.append(row)
        seen[group] = seen.get(group, 0) + (row.status == STATUS_OK)
    return kept
