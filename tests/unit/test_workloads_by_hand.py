"""Decoder workloads: a given frame shift wins over the scores' own; a negative shift, another file's manifest,
no held-out voice, misshapen scores, a count below one and a missing graph are refused; real_speech reads a file."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from specbench.benchmarks.decoder.workloads import load_scores, real_speech
from specbench.errors import DataError

pytestmark = pytest.mark.unit
U0, U1, U2 = (f"test-00000{i}-{v}-r100-clean" for i, v in enumerate(("espeak-en-us-f4", "flite-rms", "flite-slt")))
ROWS = {U0: (1, [1.0, 2.0]), U1: (2, [3.0, 4.0, 5.0, 6.0]), U2: (1, [0.0, 0.0])}  # U2: not held out


def _pq(path: Path, rows: dict[str, tuple[int, list[float]]]) -> Path:
    n = len(rows)  # no status column: all ok
    cols = {"utt_id": list(rows), "frame_shift_ms": [10.0] * n, "num_classes": [2] * n,
            "num_frames": [t for t, _ in rows.values()], "loglikes": [v for _, v in rows.values()]}
    pq.write_table(pa.table(cols), path)
    return path


def test_frame_shifts_and_refused_scores(tmp_path: Path) -> None:
    good = _pq(tmp_path / "s.parquet", ROWS)
    items, shift = load_scores(good, 5)
    assert shift == 10.0 and [u for u, _ in items] == [U0, U1] and load_scores(good, 5, 10.0)[1] == 10.0
    with pytest.raises(DataError, match=r"--frame-shift-ms 25: .*s.parquet records its frames 10 ms apart"):
        load_scores(good, 5, 25.0)  # obeyed before: every real-time figure scaled by 2.5
    for path, shift, message in [(good, -5.0, "-5: must be a positive number of milliseconds"), (_pq(tmp_path / "n.parquet", {U2: ROWS[U2]}),
                                  None, "no held-out-voice"),
                                 (_pq(tmp_path / "b.parquet", {U1: (1, [1.0, 2.0, 3.0])}), None, "holds 3 scores")]:
        with pytest.raises(DataError, match=message):
            load_scores(path, 5, shift)
    np.savez(tmp_path / "s.npz", **{U0: np.zeros((2, 2), np.float32)})
    (tmp_path / "manifest.json").write_text(json.dumps({"scores": {"file": "other.npz", "frame_shift_ms": 40}}))
    with pytest.raises(DataError, match="no frame shift"):
        load_scores(tmp_path / "s.npz", 5)
    (tmp_path / "manifest.json").write_text(json.dumps({"scores": {"file": "s.npz", "frame_shift_ms": 40}}))
    assert load_scores(tmp_path / "s.npz", 5)[1] == 40.0 == load_scores(tmp_path / "s.npz", 5, 40.0)[1]
    graph = tmp_path / "g.fst"
    graph.write_bytes(b"")
    workload = real_speech(graph, good, 2, 10.0)
    assert workload.ids == [U0, U1] and workload.audio_seconds == pytest.approx(3 * 0.010)
    assert real_speech(graph, good, 5).ids == [U0, U1, U2]
    for args, error in [((graph, good, 0), ValueError), ((graph, good, 2, 25.0), DataError),
                        ((tmp_path / "no.fst", good, 2), DataError)]:
        with pytest.raises(error):
            real_speech(*args)


def test_real_speech_reads_the_per_utterance_files_of_a_score_cache_folder(tmp_path: Path) -> None:
    graph = tmp_path / "g.fst"
    graph.write_bytes(b"")
    cache = tmp_path / "scores"
    cache.mkdir()
    _pq(cache / "0123456789abcdef0123.parquet", {U0: (1, [9.0, 9.0]), U1: ROWS[U1]})  # an earlier layout's chunk
    assert real_speech(graph, cache, 5).ids == [U0, U1]  # no per-utterance file: every Parquet file is read
    _pq(cache / "utt-1.parquet", {U0: ROWS[U0]})
    _pq(cache / "utt-2.parquet", {U2: ROWS[U2]})
    workload = real_speech(graph, cache, 5)
    assert workload.ids == [U0, U2] and workload.audio_seconds == pytest.approx(2 * 0.01)  # the chunk unread
