"""Corpus planning (determinism, held-out voices, balance, ids), shard synthesis with reruns and failures,
and the Parquet manifest. The synthesis tests use espeak-ng and flite only (fast)."""

from __future__ import annotations

import collections
import math
import os
import re
import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from specbench.data.slurp import SlurpUtterance
from specbench.data.speech_corpus import (
    MANIFEST_SCHEMA,
    CorpusPlan,
    plan_utterances,
    read_manifest,
    skipped_counts,
    synthesize_row,
    synthesize_shard,
    write_manifest,
)
from specbench.data.voices import HELD_OUT_VOICES, get_voice
from specbench.errors import ConfigError, DataError

pytestmark = pytest.mark.unit


def _utt(slurp_id: int, sentence: str) -> SlurpUtterance:
    return SlurpUtterance(slurp_id, sentence, "alarm_set", "alarm", "set", 1)


TRAIN_TEXT = [
    "wake me up at 7 a.m.", "what's the weather like", "<unk>", "play jazz", "...", "turn the lights off",
]
EVAL = {
    "devel": [_utt(1, "Set an alarm for 6."), _utt(2, "how's traffic"), _utt(1, "Set an alarm for 6.")],
    "test": [_utt(3, "olly, what time is it?"), _utt(4, "remind me to call mom"), _utt(5, "<unk> ?")],
}


@pytest.fixture(scope="module")
def slurp_plan() -> pa.Table:
    """A plan over the real SLURP text: 300 training sentences x 2, all devel and test sentences."""
    return plan_utterances(CorpusPlan(seed=7, train_sentences=300))


def _tiny_rows() -> list[dict[str, Any]]:
    """6 rows: 2 train (espeak-ng, flite), 2 devel and 2 test (held-out voices), clean and noisy."""
    plan = CorpusPlan(
        seed=1, train_sentences=2, train_voices=("espeak:en-us", "flite:kal16"), eval_voices=HELD_OUT_VOICES,
        rates=(0.9, 1.2), snr_db=(None, 15.0), train_copies_per_sentence=1,
    )
    return plan_utterances(plan, training_text=TRAIN_TEXT, eval_utterances=EVAL).to_pylist()


def test_plan_is_deterministic_and_depends_on_the_seed() -> None:
    plan = CorpusPlan(seed=3, train_sentences=3, devel_sentences=1)
    a = plan_utterances(plan, training_text=TRAIN_TEXT, eval_utterances=EVAL)
    b = plan_utterances(plan, training_text=TRAIN_TEXT, eval_utterances=EVAL)
    assert a.equals(b)
    others = [
        plan_utterances(CorpusPlan(seed=s, train_sentences=3, devel_sentences=1),
                        training_text=TRAIN_TEXT, eval_utterances=EVAL)
        for s in range(4, 8)
    ]
    assert any(not a.equals(o) for o in others)
    assert a.schema.metadata[b"specbench.plan"]


def test_plan_rows_counts_and_skipped_empty_sentences() -> None:
    table = plan_utterances(CorpusPlan(seed=0, train_sentences=0, train_copies_per_sentence=3),
                            training_text=TRAIN_TEXT, eval_utterances=EVAL)
    splits = collections.Counter(table.column("split").to_pylist())
    assert splits == {"train": 4 * 3, "devel": 2, "test": 2}
    assert skipped_counts(table) == {"train": 2, "devel": 0, "test": 1}
    train = [r for r in table.to_pylist() if r["split"] == "train"]
    assert all(r["slurp_id"] is None for r in train)
    by_text = collections.defaultdict(set)
    for r in train:
        by_text[r["normalized_text"]].add(r["voice"])
    assert all(len(v) == 3 for v in by_text.values()), "copies of a sentence use distinct voices"
    devel = [r for r in table.to_pylist() if r["split"] == "devel"]
    assert [r["slurp_id"] for r in devel] == [1, 2] and devel[0]["normalized_text"] == "set an alarm for six"


def test_held_out_voices_never_train(slurp_plan: pa.Table) -> None:
    rows = slurp_plan.to_pylist()
    train_voices = {r["voice"] for r in rows if r["split"] == "train"}
    assert train_voices and not train_voices & set(HELD_OUT_VOICES)
    for split in ("devel", "test"):
        assert set(HELD_OUT_VOICES) <= {r["voice"] for r in rows if r["split"] == split}
    with pytest.raises(ConfigError, match=r"train_voices.*flite:rms.*held out"):
        CorpusPlan(train_voices=("espeak:en-us", "flite:rms"))
    with pytest.raises(ConfigError, match=r"eval_voices.*held-out.*espeak:en-us\+f4"):
        CorpusPlan(eval_voices=("flite:rms",))  # a held-out voice missing, nothing else wrong
    with pytest.raises(ConfigError, match=r"train_voices.*'espeak:klingon'"):
        CorpusPlan(train_voices=("espeak:klingon",))
    with pytest.raises(ConfigError, match="rates"):
        CorpusPlan(rates=(3.0,))


def test_an_eval_voice_heard_in_training_is_refused() -> None:
    """No devel/test voice may be a training voice, or a voice built from a training voice's speaker."""
    held = tuple(HELD_OUT_VOICES)
    with pytest.raises(ConfigError, match=r"eval_voices: espeak:en-us also in train_voices.*Fix"):
        CorpusPlan(train_voices=("espeak:en-us", "flite:awb"), eval_voices=(*held, "espeak:en-us"))
    with pytest.raises(ConfigError, match=r"eval_voices: flite:slt \(the speaker of training voice "
                                          r"festival:slt-hts\).*Fix"):
        CorpusPlan(train_voices=("espeak:en-us", "festival:slt-hts"), eval_voices=(*held, "flite:slt"))
    with pytest.raises(ConfigError, match=r"festival:slt-hts \(the speaker of training voice flite:slt\)"):
        CorpusPlan(train_voices=("flite:slt",), eval_voices=(*held, "festival:slt-hts"))
    # an unheard voice of a familiar engine is fine, and so are both SLT voices in training
    plan = CorpusPlan(train_voices=("flite:slt", "festival:slt-hts", "espeak:en-us"), eval_voices=(*held, "flite:awb"))
    assert plan.eval_voices == (*held, "flite:awb")
    assert set(CorpusPlan().eval_voices) == set(held)  # the default: the held-out voices alone


def test_the_shipped_speech_job_keeps_its_voices_apart() -> None:
    from specbench.experiments.registry import load_config

    job = load_config(Path(__file__).resolve().parents[2] / "jobs" / "speech_slurp.toml")
    plan = job.corpus.plan()
    assert {"flite:slt", "festival:slt-hts"} <= set(plan.train_voices)
    assert plan.eval_voices == ("flite:rms", "espeak:en-us+f4")


def test_utt_ids_unique_and_filesystem_safe(slurp_plan: pa.Table) -> None:
    rows = slurp_plan.to_pylist()
    ids = [r["utt_id"] for r in rows]
    assert len(set(ids)) == len(ids) == slurp_plan.num_rows
    for r in rows:
        assert re.fullmatch(r"(train|devel|test)-\d{6}-[a-z0-9-]+-r\d{3}-(clean|snr[0-9p]+)", r["utt_id"])
        assert r["audio_path"] == f"{r['split']}/{get_voice(r['voice']).slug}/{r['utt_id']}.wav"
    devel_ids = [r["slurp_id"] for r in rows if r["split"] == "devel"]
    assert len(devel_ids) == len(set(devel_ids)) == 2033


@pytest.mark.parametrize("split", ["devel", "test"])
def test_eval_voices_rates_and_snrs_are_balanced(slurp_plan: pa.Table, split: str) -> None:
    rows = [r for r in slurp_plan.to_pylist() if r["split"] == split]
    for column, values in (("voice", CorpusPlan().eval_voices), ("rate", (0.85, 1.0, 1.15)),
                           ("snr_db", (math.inf, 20.0, 10.0))):
        counts = collections.Counter(r[column] for r in rows)
        assert len(counts) == len(values)
        assert max(counts.values()) - min(counts.values()) <= 1


@pytest.fixture
def tts() -> None:
    for tool in ("espeak-ng", "flite", "sox"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed")


def test_tiny_corpus_synthesizes_writes_and_reruns(tmp_path: Path, tts: None) -> None:
    rows = _tiny_rows()
    assert len(rows) == 6
    out = synthesize_shard(rows, tmp_path / "corpus")
    assert [r["status"] for r in out] == ["ok"] * 6
    for r in out:
        wav = tmp_path / "corpus" / r["audio_path"]
        assert wav.is_file() and wav.with_suffix(".json").is_file()
        assert 0.0 < r["end_of_speech_s"] <= r["duration_s"]
        assert r["num_samples"] == round(r["duration_s"] * 16000)
    written = write_manifest(out, tmp_path / "manifest.parquet")
    back = read_manifest(tmp_path / "manifest.parquet")
    assert back.equals(written) and back.num_rows == 6
    assert back.column("word_times").null_count == 6
    mtimes = {p: p.stat().st_mtime_ns for p in (tmp_path / "corpus").rglob("*") if p.is_file()}
    again = synthesize_shard(rows, tmp_path / "corpus")
    assert again == out
    assert {p: p.stat().st_mtime_ns for p in (tmp_path / "corpus").rglob("*") if p.is_file()} == mtimes


def test_a_changed_row_is_synthesized_again(tmp_path: Path, tts: None) -> None:
    row = _tiny_rows()[0]
    first = synthesize_row(row, tmp_path)
    changed = synthesize_row({**row, "rate": 0.6}, tmp_path)
    assert first["status"] == changed["status"] == "ok"
    assert changed["duration_s"] > first["duration_s"], "a stale file is not reused"


def test_an_engine_upgrade_synthesizes_the_row_again_and_an_older_sidecar_is_kept(tmp_path: Path, tts: None) -> None:
    """The sidecar records the versions of the voice's engine and of sox; a row whose recorded version differs
    from the installed one is synthesized again with it. A sidecar written before versions were recorded is
    accepted as is (its WAV is not thrown away)."""
    import json

    from specbench.tool_versions import tool_version

    row = next(r for r in _tiny_rows() if r["voice"] == "espeak:en-us")
    wav = tmp_path / row["audio_path"]
    sidecar = wav.with_suffix(".json")
    assert synthesize_row(row, tmp_path)["status"] == "ok"
    meta = json.loads(sidecar.read_text())
    assert meta["engines"] == {"espeak-ng": tool_version("espeak-ng"), "sox": tool_version("sox")}
    # the version number of what `espeak-ng --version` says (as the graph's hash reads it), not its data path
    assert re.fullmatch(r"1\.\d+(\.\d+)*", meta["engines"]["espeak-ng"]), meta["engines"]
    assert re.fullmatch(r"\d+(\.\d+)+", meta["engines"]["sox"]), meta["engines"]

    def rewritten(sidecar_meta: dict | list) -> bool:
        sidecar.write_text(json.dumps(sidecar_meta))
        before = wav.stat().st_mtime_ns
        os.utime(wav, ns=(before - 10**9, before - 10**9))  # so that a rewrite shows in the mtime
        assert synthesize_row(row, tmp_path)["status"] == "ok"
        return wav.stat().st_mtime_ns != before - 10**9

    older = {**meta, "engines": {**meta["engines"], "espeak-ng": "1.49.2"}}
    assert rewritten(older), "a WAV from another espeak-ng version is reused"
    assert json.loads(sidecar.read_text())["engines"] == meta["engines"]
    assert rewritten({**meta, "engines": {**meta["engines"], "sox": "14.4.1"}})
    legacy = {k: v for k, v in meta.items() if k != "engines"}
    assert not rewritten(legacy), "a sidecar from before the versions were recorded is kept"
    assert json.loads(sidecar.read_text()) == legacy
    assert not rewritten(meta)
    assert rewritten([meta]) and rewritten({k: v for k, v in meta.items() if k != "end_of_speech_s"})  # damaged


def test_a_broken_row_reports_its_reason_and_the_others_complete(tmp_path: Path, tts: None) -> None:
    rows = _tiny_rows()[:3]
    broken = {**rows[1], "voice": "espeak:klingon", "utt_id": "broken", "audio_path": "train/x/broken.wav"}
    out = synthesize_shard([rows[0], broken, rows[2]], tmp_path)
    assert [r["status"] for r in out][::2] == ["ok", "ok"]
    assert "espeak:klingon" in out[1]["status"] and out[1]["duration_s"] is None
    empty = synthesize_row({**rows[0], "normalized_text": "", "audio_path": "e.wav", "utt_id": "e"}, tmp_path)
    assert empty["status"].startswith("synthesis failed: ") and "empty" in empty["status"]
    table = write_manifest(out, tmp_path / "m.parquet")
    assert table.column("status").to_pylist()[1] == out[1]["status"]


def test_manifest_schema_errors_name_the_columns(tmp_path: Path) -> None:
    bad = pa.table({"utt_id": ["a"], "rate": pa.array([1.0], pa.float64())})
    pq.write_table(bad, tmp_path / "bad.parquet")
    pattern = r"bad\.parquet.*'rate' is double, expected float.*missing column 'status'"
    with pytest.raises(DataError, match=pattern):
        read_manifest(tmp_path / "bad.parquet")
    (tmp_path / "junk.parquet").write_bytes(b"not parquet")
    with pytest.raises(DataError, match=r"junk\.parquet"):
        read_manifest(tmp_path / "junk.parquet")
    plan_row = _tiny_rows()[0]
    with pytest.raises(DataError, match=r"\['status'\] have null"):
        write_manifest([plan_row], tmp_path / "m.parquet")
    with pytest.raises(DataError, match="duplicate utt_id"):
        write_manifest([{**plan_row, "status": "ok"}] * 2, tmp_path / "m.parquet")
    assert not (tmp_path / "m.parquet").exists()
    assert set(MANIFEST_SCHEMA.names) >= {"word_times", "end_of_speech_s", "slurp_id", "audio_path"}


def test_the_speech_job_counts_the_rows_it_synthesized_again_not_only_those_without_a_wav(
        tmp_path: Path, tts: None) -> None:
    """`speech.synthesized` and the progress bar counted WAVs that did not exist: after an engine upgrade,
    which remakes every row, they said 0."""
    import json

    from specbench.experiments.speech import synthesize_counted

    rows = [r for r in _tiny_rows() if r["voice"] in ("espeak:en-us", "flite:kal16")]
    first, made = synthesize_counted(rows, tmp_path)
    assert [r["status"] for r in first] == ["ok", "ok"] and made == 2
    assert synthesize_counted(rows, tmp_path)[1] == 0  # all reused
    espeak = next(r for r in rows if r["voice"] == "espeak:en-us")
    sidecar = (tmp_path / espeak["audio_path"]).with_suffix(".json")
    meta = json.loads(sidecar.read_text())
    sidecar.write_text(json.dumps({**meta, "engines": {**meta["engines"], "espeak-ng": "1.49.2"}}))
    assert synthesize_counted(rows, tmp_path)[1] == 1  # the WAV exists, but an older espeak-ng made it
