"""The recorded-speech sets from Debian packages (`data.recorded_speech`): Asterisk's prompts and
pocketsphinx-testdata, and what happens with a transcript without audio, audio without a transcript, or a
file ffmpeg cannot decode."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from specbench.data.recorded_speech import (
    asterisk_prompts,
    decode_g722,
    prompt_half,
    sphinx_testdata,
)
from specbench.data.synthesis import read_wav
from specbench.errors import ToolError
from specbench.stage import STATUS_OK


def test_the_installed_asterisk_prompts_are_listed_with_their_halves() -> None:
    prompts = asterisk_prompts()
    ok = [p for p in prompts if p.status == STATUS_OK]
    assert len(ok) == 551  # 568 G.722 files, five of them tones, ten silences and two beeps
    assert sum(p.status.startswith("not speech") for p in prompts) == 17
    assert all(p.text and p.audio_path.suffix == ".g722" for p in ok)
    halves = [prompt_half(p.utt_id) for p in ok]
    assert halves.count("test") == 266 and halves.count("tune") == 285  # the declared split (docs/real_speech.md)
    texts = {p.utt_id: p.text for p in prompts}
    assert texts["letters/at"] == "at"  # the bracketed aside "[@]" is dropped, and so are (...) and <...>:
    assert texts["silence/10"] == "" and texts["confbridge-join"] == "" and texts["spy-iax2"] == "iax"


def test_the_telephone_keys_are_read_as_the_speaker_says_them() -> None:
    # "press * to toggle pause, press # to enter ...": spoken "press star ...", "press pound ..."
    texts = {p.utt_id: p.text for p in asterisk_prompts()}
    assert texts["dictate/both_help"] == "press star to toggle pause press pound to enter a new dictation filename"
    assert texts["dictate/enter_filename"].endswith("followed by pound or just pound to exit")
    assert "separated by star and then press" in texts["demo-enterkeywords"]


def test_the_sphinx_testdata_sentences_and_card_commands() -> None:
    rows = sphinx_testdata()
    assert [r.set for r in rows].count("librivox") == 5 and [r.set for r in rows].count("cards") == 5
    assert all(r.status == STATUS_OK and r.audio_path.is_file() for r in rows)
    assert next(r for r in rows if r.utt_id == "001").text == "ten of clubs"


def test_a_prompt_decodes_to_16_khz_mono(tmp_path: Path) -> None:
    prompt = next(p for p in asterisk_prompts() if p.utt_id == "auth-thankyou")
    decode_g722(prompt.audio_path, tmp_path / "thanks.wav")
    samples, rate = read_wav(tmp_path / "thanks.wav")
    # G.722 codes 16 kHz audio at 64 kbit/s: each byte holds two samples, every one of them decoded
    assert rate == 16000 and len(samples) == 2 * prompt.audio_path.stat().st_size and abs(samples).max() > 0.05
    assert [p.name for p in tmp_path.iterdir()] == ["thanks.wav"]  # no temporary file left beside it


def test_an_empty_or_damaged_cached_wav_is_decoded_again(tmp_path: Path) -> None:
    """A WAV in the cache is reused only when it reads as audio: an empty file (a decode that was cut
    short) or a truncated one is made again from the G.722."""
    from specbench.experiments.real_speech.audio import gather

    first = [r for r in gather(("asterisk",), 1, tmp_path, min_words=3) if r.status == STATUS_OK]
    assert len(first) == 2
    good = {r.utt_id: r.wav.read_bytes() for r in first}
    empty, cut = first[0].wav, first[1].wav
    empty.write_bytes(b"")
    cut.write_bytes(good[first[1].utt_id][:30])  # a header cut short
    again = {r.utt_id: r for r in gather(("asterisk",), 1, tmp_path, min_words=3) if r.status == STATUS_OK}
    assert {u: r.wav.read_bytes() for u, r in again.items()} == good
    assert read_wav(empty)[0].size > 0


def test_mismatched_transcripts_and_audio_are_flagged_rows(tmp_path: Path) -> None:
    sounds = tmp_path / "sounds"
    (sounds / "digits").mkdir(parents=True)
    (sounds / "hello.g722").write_bytes(b"")  # raw G.722 has no header: only an empty file cannot decode
    (sounds / "digits" / "1.g722").write_bytes(b"\x00" * 10)
    (sounds / "stray.g722").write_bytes(b"\x00" * 10)
    (sounds / "beep.g722").write_bytes(b"\x00" * 10)
    transcripts = tmp_path / "core.txt.gz"
    with gzip.open(transcripts, "wt") as fh:
        fh.write("; comment\nhello: Hello.\ndigits/1: one\nmissing: Not recorded.\nbeep: [a beep]\n")
    rows = {r.utt_id: r for r in asterisk_prompts(sounds, transcripts)}
    assert rows["hello"].status == STATUS_OK and rows["digits/1"].text == "one"
    assert "has a transcript but no missing.g722" in rows["missing"].status and "Fix" in rows["missing"].status
    assert "no transcript line 'stray: ...'" in rows["stray"].status
    assert rows["beep"].status.startswith("not speech")
    with pytest.raises(ToolError, match=r"hello.g722: ffmpeg cannot decode it.*Fix"):
        decode_g722(sounds / "hello.g722", tmp_path / "out.wav")
    assert not (tmp_path / "out.wav").exists()


def test_missing_packages_name_the_fix(tmp_path: Path) -> None:
    with pytest.raises(ToolError, match="apt-get install asterisk-core-sounds-en-g722"):
        asterisk_prompts(tmp_path / "none", tmp_path / "none.txt.gz")
    with pytest.raises(ToolError, match="pocketsphinx-testdata"):
        sphinx_testdata(tmp_path)


def test_a_sample_decodes_only_the_prompts_it_keeps(tmp_path: Path) -> None:
    from specbench.experiments.real_speech.audio import gather

    rows = gather(("asterisk", "cards"), 2, tmp_path)
    usable = [r for r in rows if r.status == STATUS_OK]
    halves = [r.half for r in usable if r.set == "asterisk"]
    assert sorted(halves) == ["test", "test", "tune", "tune"] and [r.set for r in usable].count("cards") == 2
    assert all(r.wav.suffix == ".wav" and read_wav(r.wav)[1] == 16000 for r in usable if r.set == "asterisk")
    decoded = sorted(p.relative_to(tmp_path / "asterisk").with_suffix("").as_posix()
                     for p in (tmp_path / "asterisk").rglob("*.wav"))
    assert decoded == sorted(r.utt_id for r in usable if r.set == "asterisk")  # not the other 559
    assert sum(r.status.startswith("not speech") for r in rows) == 17  # flagged rows are kept
    ok = [p.utt_id for p in asterisk_prompts() if p.status == STATUS_OK]
    first_tune = next(u for u in ok if prompt_half(u) == "tune")
    assert first_tune in decoded  # the first usable ones in name order


def test_a_sample_can_skip_clips_of_few_words(tmp_path: Path) -> None:
    from specbench.experiments.real_speech.audio import gather

    rows = gather(("asterisk", "cards"), 2, tmp_path, min_words=3)
    usable = [r for r in rows if r.status == STATUS_OK]
    assert len(usable) == 6 and all(len(r.text.split()) >= 3 for r in usable)
    ok = [p for p in asterisk_prompts() if p.status == STATUS_OK and prompt_half(p.utt_id) == "test"]
    first_long = next(p.utt_id for p in ok if len(p.text.split()) >= 3)
    assert ok[0].utt_id != first_long and first_long in {r.utt_id for r in usable}  # a one-word prompt skipped
    assert ok[0].utt_id not in {r.utt_id for r in usable}
    assert sum(r.status.startswith("not speech") for r in rows) == 17  # flagged rows are still kept
