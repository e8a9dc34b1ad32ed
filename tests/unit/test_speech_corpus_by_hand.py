"""Corpus planning and shard synthesis checked by hand on tiny plans: utterance ids with their rate and SNR
tags, noise seeds that follow the plan's seed, training rows numbered per copy, empty sentences counted once
per unique text, devel/test sentences kept in input order with the first text of a repeated id, the sidecar
key's pitch entry, plan refusals and its JSON; and with espeak-ng on one short word: the noise seed and pitch
of a row reach the audio, and a WAV replaced behind its sidecar's back is synthesized again."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from specbench.data.slurp import SlurpUtterance
from specbench.data.speech_corpus import (
    CorpusPlan,
    plan_utterances,
    read_manifest,
    sidecar_key,
    skipped_counts,
    synthesize_row,
    write_manifest,
)
from specbench.data.synthesis import write_wav
from specbench.data.voices import HELD_OUT_VOICES
from specbench.errors import ConfigError

pytestmark = pytest.mark.unit
NO_EVAL: dict[str, list[SlurpUtterance]] = {"devel": [], "test": []}


def _plan(**kwargs: object) -> CorpusPlan:
    args = {"seed": 1, "train_sentences": 0, "train_voices": ("espeak:en-us",), "rates": (1.0,),
            "snr_db": (None,), "train_copies_per_sentence": 1}
    return CorpusPlan(**{**args, **kwargs})  # type: ignore[arg-type]


def _train(plan: CorpusPlan, texts: list[str]) -> list[dict]:
    return plan_utterances(plan, training_text=texts, eval_utterances=NO_EVAL).to_pylist()


def _utt(slurp_id: int, sentence: str) -> SlurpUtterance:
    return SlurpUtterance(slurp_id, sentence, "play_music", "play", "music", 1)


@pytest.mark.parametrize(("rate", "snr", "tag"), [
    (1.15, None, "r115-clean"),  # float32(1.15) * 100 = 114.99999... rounds to 115
    (0.85, -5.0, "r085-snrm5"),
    (1.0, 7.5, "r100-snr7p5"),
])
def test_utt_ids_carry_the_rate_and_snr(rate: float, snr: float | None, tag: str) -> None:
    (row,) = _train(_plan(rates=(rate,), snr_db=(snr,)), ["play jazz"])
    assert row["utt_id"] == f"train-000000-espeak-en-us-{tag}"
    assert row["audio_path"] == f"train/espeak-en-us/{row['utt_id']}.wav"


def test_the_noise_seed_follows_the_plan_seed() -> None:
    (a,), (b,) = _train(_plan(seed=1), ["play jazz"]), _train(_plan(seed=2), ["play jazz"])
    assert a["utt_id"] == b["utt_id"] and a["noise_seed"] != b["noise_seed"]


def test_training_rows_are_numbered_per_copy_and_truncated_to_the_sentences_asked() -> None:
    plan = _plan(train_sentences=2, train_copies_per_sentence=2,
                 train_voices=("espeak:en-us", "flite:kal16", "flite:awb"))
    rows = _train(plan, ["one", "two", "three", "four", "five"])
    # 2 sentences x 2 copies, numbered 0..3; the copies of a sentence are adjacent, with distinct voices
    assert [r["utt_id"][:12] for r in rows] == [f"train-{i:06d}" for i in range(4)]
    assert rows[0]["text"] == rows[1]["text"] != rows[2]["text"] == rows[3]["text"]
    assert rows[0]["voice"] != rows[1]["voice"] and rows[2]["voice"] != rows[3]["voice"]


def test_an_empty_sentence_is_counted_once_per_unique_text() -> None:
    table = plan_utterances(_plan(), training_text=["play jazz", "...", "...", "play jazz", "<unk>"],
                            eval_utterances=NO_EVAL)
    assert table.num_rows == 1
    assert skipped_counts(table) == {"train": 2, "devel": 0, "test": 0}  # "..." and "<unk>"


def test_eval_sentences_keep_their_input_order_and_the_first_text_of_an_id() -> None:
    devel = [_utt(9, "nine"), _utt(4, "four"), _utt(9, "nine again"), _utt(7, "seven"), _utt(2, "two"),
             _utt(5, "five")]
    plan = CorpusPlan(seed=3, train_sentences=1, devel_sentences=0, test_sentences=3)
    table = plan_utterances(plan, training_text=["x"], eval_utterances={"devel": devel, "test": devel})
    rows = table.to_pylist()
    every = [(r["slurp_id"], r["text"]) for r in rows if r["split"] == "devel"]
    assert every == [(9, "nine"), (4, "four"), (7, "seven"), (2, "two"), (5, "five")]
    order = [9, 4, 7, 2, 5]
    three = [r["slurp_id"] for r in rows if r["split"] == "test"]
    assert len(three) == 3 and [order.index(i) for i in three] == sorted(order.index(i) for i in three)


def test_the_sidecar_key_holds_the_pitch_only_when_there_is_one() -> None:
    (row,) = _train(_plan(), ["play jazz"])
    assert "pitch_cents" not in sidecar_key(row)
    assert "pitch_cents" not in sidecar_key({**row, "pitch_cents": None})
    assert "pitch_cents" not in sidecar_key({**row, "pitch_cents": 0})
    assert sidecar_key({**row, "pitch_cents": 50})["pitch_cents"] == 50.0


def test_plan_refusals_and_json() -> None:
    with pytest.raises(ConfigError, match="train_copies_per_sentence"):
        _plan(train_copies_per_sentence=0)
    for snrs in ((math.nan,), (4000.0,), (-math.inf,), (20.0, -11.0)):  # 4000 dB overflowed the noise scale
        with pytest.raises(ConfigError, match=r"snr_db: need dB values from -10 to 100, or inf \(clean\)"):
            _plan(snr_db=snrs)
    assert _plan(snr_db=(None, 100, -10)).snr_db == (math.inf, 100.0, -10.0)
    plan = CorpusPlan(snr_db=(None, 20, 10.0), eval_voices=HELD_OUT_VOICES)
    assert json.loads(plan.to_json())["snr_db"] == ["inf", 20.0, 10.0]  # standard JSON: no Infinity


def test_a_manifest_table_without_word_times_gets_them_null(tmp_path: Path) -> None:
    (row,) = _train(_plan(), ["play jazz"])
    table = pa.Table.from_pylist([{**row, "duration_s": 1.0, "num_samples": 16000, "end_of_speech_s": 0.5,
                                   "status": "ok"}])
    written = write_manifest(table, tmp_path / "m.parquet")
    assert read_manifest(tmp_path / "m.parquet").column("word_times").to_pylist() == [None]
    assert written.num_rows == 1


@pytest.fixture
def espeak() -> None:
    for tool in ("espeak-ng", "sox"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed")


def test_noise_seed_and_pitch_of_a_row_reach_the_audio(tmp_path: Path, espeak: None) -> None:
    (row,) = _train(_plan(snr_db=(10.0,)), ["hi"])
    variants = {"a": row, "seed": {**row, "noise_seed": row["noise_seed"] + 1},
                "pitch": {**row, "pitch_cents": 300.0}}
    audio = {}
    for name, r in variants.items():
        out = synthesize_row({**r, "audio_path": f"{name}.wav"}, tmp_path)
        assert out["status"] == "ok", out["status"]
        audio[name] = (tmp_path / f"{name}.wav").read_bytes()
    assert audio["a"] != audio["seed"] and audio["a"] != audio["pitch"]
    assert json.loads((tmp_path / "pitch.json").read_text())["key"]["pitch_cents"] == 300.0


def test_a_wav_replaced_behind_its_sidecar_is_synthesized_again(tmp_path: Path, espeak: None) -> None:
    (row,) = _train(_plan(), ["hi"])
    first = synthesize_row(row, tmp_path)
    wav = tmp_path / row["audio_path"]
    write_wav(wav, np.zeros(100))  # a valid WAV, but not the one the sidecar describes
    again = synthesize_row(row, tmp_path)
    assert again["num_samples"] == first["num_samples"] != 100
    assert again["end_of_speech_s"] == first["end_of_speech_s"] and again["duration_s"] == first["duration_s"]


def test_eval_voices_rates_and_snrs_are_balanced_each_and_crossed_not_confounded() -> None:
    # 60 devel texts, 2 voices, 3 rates, 3 SNRs: each voice 30 times, each rate and SNR 20 times. Each is drawn
    # in its own random order, so rate and SNR meet in all 9 pairs and no voice always gets the same rate (a
    # rotation by row number would give rate i % 3 and SNR i % 3: only 3 pairs, rate and noise confounded).
    devel = [_utt(i, f"text {i}") for i in range(60)]
    plan = CorpusPlan(seed=2, train_sentences=1, devel_sentences=0, test_sentences=1)
    rows = [r for r in plan_utterances(plan, training_text=["x"], eval_utterances={"devel": devel, "test": devel})
            .to_pylist() if r["split"] == "devel"]
    voices, rates, snrs = ([r[k] for r in rows] for k in ("voice", "rate", "snr_db"))
    assert sorted(voices.count(v) for v in set(voices)) == [30, 30] and set(voices) == set(HELD_OUT_VOICES)
    assert sorted(rates.count(x) for x in set(rates)) == [20, 20, 20]
    assert sorted(snrs.count(x) for x in set(snrs)) == [20, 20, 20]
    assert len(set(zip(rates, snrs))) == 9
    assert all(len({rate for v, rate in zip(voices, rates) if v == voice}) == 3 for voice in HELD_OUT_VOICES)
