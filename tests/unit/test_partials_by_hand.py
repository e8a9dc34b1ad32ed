"""Predictive-ASR transcripts by hand: oracle partials run to the audio's end and keep a word ending on the
partial's time (despite float rounding); a transcript spells the decoder's partials (times, words, posteriors)
and final words, ends speech at the last aligned word (else the energy end) and says why it has none; failed
utterances are rendered again; renditions draw rate, SNR and a two-sided pitch apart; scores split per utterance."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from specbench.config import AsrSection
from specbench.experiments.predictive_asr import partials as p
from specbench.wfst.symbols import SymbolTable

pytestmark = pytest.mark.unit
# word ends at whole 40 ms frames, as the alignment gives them: set 9 frames (360 ms), an 30 (1200 ms), alarm 57
# (57 * 0.04 s * 1000 = 2280.0000000000005 ms, on the 19th partial); audio 22 * 0.12 s = 2639.9999999999995 ms
TIMES = [{"word": w, "start_s": 0.0, "end_s": n * 0.04} for w, n in (("set", 9), ("an", 30), ("alarm", 57))]
WORDS = [[]] * 2 + [["set"]] * 7 + [["set", "an"]] * 9 + [["set", "an", "alarm"]] * 4


def test_oracle_partials_reach_the_audio_end_and_keep_a_word_ending_on_the_partial_time() -> None:
    parts = p.oracle_partials(TIMES, duration_ms=1000.0 * (22 * 0.12), every_ms=120.0)
    assert [x["time_ms"] for x in parts] == [120.0 * k for k in range(1, 23)]  # the 22nd at 2640 ms included
    assert [x["words"] for x in parts] == WORDS


def _row(status: str = "ok", **extra) -> dict:
    return {"utt_id": "u1", "voice": "flite:rms", "rate": 1.0, "snr_db": 20.0, "pitch_cents": 0.0,
            "normalized_text": "set an alarm", "audio_path": "usage/rms/u1.wav", "status": status,
            "duration_s": 22 * 0.12, "end_of_speech_s": 2.5, **extra}


def test_transcripts_by_hand(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECBENCH_HOME", str(tmp_path))
    (tmp_path / "speech" / "usage" / "rms").mkdir(parents=True)
    (tmp_path / "speech" / "usage" / "rms" / "u1.wav").write_bytes(b"RIFF")
    oracle, words = AsrSection(mode="oracle-asr", partial_every_ms=120.0), SymbolTable(("<eps>", "set", "an", "alarm"))
    got = p._transcript(_row(word_times=TIMES, duration_s=2.2), None, oracle, words)
    # end: the last aligned word's, not the energy's (2.5 s); partials to the audio's end (2160 ms, before
    # alarm's end); final: the reference
    assert (got["end_of_speech_ms"], got["end_source"], got["status"]) == (2280.0000000000005, "alignment", "ok")
    assert [x["words"] for x in got["partials"]] == WORDS[:18] and got["final_words"] == ["set", "an", "alarm"]
    assert got["audio_sha256"] == hashlib.sha256(b"RIFF").hexdigest()
    decoded = {"status": "ok", "word_ids": [1, 3], "partials": [
        {"time_ms": 120.0, "word_ids": [], "posteriors": []}, {"time_ms": 240.0, "word_ids": [1], "posteriors": [0.5]},
        {"time_ms": 360.0, "word_ids": [1, 2], "posteriors": [0.9, 0.25]}]}
    got = p._transcript(_row(word_times=[]), decoded, AsrSection(), words)  # no alignment: energy end, in ms
    assert (got["end_of_speech_ms"], got["end_source"], got["final_words"]) == (2500.0, "energy", ["set", "alarm"])
    assert got["partials"] == [{"time_ms": 120.0, "words": [], "posteriors": []},
                               {"time_ms": 240.0, "words": ["set"], "posteriors": [0.5]},
                               {"time_ms": 360.0, "words": ["set", "an"], "posteriors": [0.9, 0.25]}]
    failed = [(_row("timeout"), decoded, AsrSection(), "synthesis: timeout"),
              (_row(end_of_speech_s=None), decoded, AsrSection(), "no end of speech: alignment and energy both failed"),
              (_row(word_times=[], align_status="no path"), None, oracle, "alignment: no path"),
              (_row(), None, AsrSection(), "scoring failed"),
              (_row(), {**decoded, "status": "no path"}, AsrSection(), "decoding: no path")]
    for row, dec, asr, status in failed:
        got = p._transcript(row, dec, asr, words)
        assert (got["status"], got["partials"], got["final_words"]) == (status, [], [])


def test_failed_utterances_are_rendered_again() -> None:
    plan = [{"utt_id": u} for u in ("a", "b", "c")]
    assert p._missing(plan, {"a": {"status": "ok"}, "b": {"status": "decoding: no path"}}) == plan[1:]


def test_renditions_draw_rate_snr_and_a_two_sided_pitch_independently() -> None:
    draws = [p.request_rendition(f"test/0/u{i}/{i}", AsrSection()) for i in range(300)]
    rate, snr, pitch = (np.array([getattr(d, f) for d in draws]) for f in ("rate", "snr_db", "pitch_cents"))
    assert (pitch < -40).any() and (pitch > 40).any()  # uniform on [-80, 80] cents
    assert abs(np.corrcoef(rate, snr)[0, 1]) < 0.3 and abs(np.corrcoef(rate, pitch)[0, 1]) < 0.3
    assert any(abs(r - round(r, 2)) > 1e-4 for r in rate)  # rate kept to 1e-4, not to 1e-2


def test_scores_split_into_each_utterances_frames() -> None:
    a, b = np.arange(6, dtype=np.float32).reshape(2, 3), -np.arange(9, dtype=np.float32).reshape(3, 3)
    table = pa.table({"utt_id": ["a", "b"], "num_frames": [2, 3], "num_classes": [3, 3],
                      "loglikes": pa.array([a.ravel(), b.ravel()], pa.list_(pa.float32()))})
    got = p._loglikes_by_utterance(table)
    assert np.array_equal(got["a"], a) and np.array_equal(got["b"], b)
