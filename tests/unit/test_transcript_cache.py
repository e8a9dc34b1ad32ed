"""The predictive-ASR transcript cache (`experiments/predictive_asr/partials.py`): read once per process
while the file is unchanged, read anew after another writer changed it, and the same rows either way."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow.parquet as pq

from specbench.experiments.predictive_asr import partials


def _row(utt: str, end_ms: float) -> dict:
    return {"utt_id": utt, "status": "ok", "voice": "flite:rms", "rate": 1.1, "snr_db": 20.123456789,
            "pitch_cents": 3.3, "audio_sha256": "x", "ref_words": ["a"], "final_words": ["a"],
            "partials": [{"time_ms": 120.0, "words": ["a"]}], "end_of_speech_ms": end_ms,
            "end_source": "alignment", "duration_ms": 900.0}


def test_rows_are_kept_in_memory_until_the_file_changes(tmp_path: Path) -> None:
    path = tmp_path / "transcripts.parquet"
    partials._write_cache([_row("u1", 512.345678901)], path)
    kept = partials._read_cache(path)
    # the kept rows are what reading the file gives (float32 columns rounded), not the rows as written
    assert kept == {r["utt_id"]: r for r in pq.read_table(path).to_pylist()}
    kept["u2"] = _row("u2", 1.0)  # a caller's copy: changing it leaves the kept rows alone
    assert set(partials._read_cache(path)) == {"u1"}
    # another process rewrites the file: the new stamp makes this process read it again
    other = pq.read_table(path).to_pylist() + [_row("u3", 7.0)]
    partials._write_cache(other, tmp_path / "other.parquet")
    os.replace(tmp_path / "other.parquet", path)
    os.utime(path, ns=(1, 1))
    assert set(partials._read_cache(path)) == {"u1", "u3"}
    assert partials._read_cache(tmp_path / "missing.parquet") == {}
