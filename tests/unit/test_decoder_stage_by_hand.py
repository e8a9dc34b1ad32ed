"""`DecoderStage` by hand on a one-word graph: the partial interval in frames (rounded to the nearest frame,
a row's own frame shift before the stage's), the lattice beam a lattice folder implies, the failed rows of
malformed and rejected scores, the options each backend refuses, lattice file names, and the stage's
metrics computed from a table of rows."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from specbench.decoder.cpu import CpuDecoder
from specbench.decoder.stage import OUTPUT_SCHEMA, DecoderStage, _safe_name
from specbench.wfst.graph import from_arrays

pytestmark = pytest.mark.unit


def _word_then_loop():
    """State 0 --1:7/0.5--> state 1 (final) with a 1:0 self-loop: every utterance decodes to word 7."""
    return from_arrays(0, np.array([np.inf, 0.0], np.float32), src=np.array([0, 1]), dest=np.array([1, 1]),
                       ilabel=np.array([1, 1]), olabel=np.array([7, 0]), weight=np.array([0.5, 0.0]))


def _stage(tmp_path: Path, **kwargs) -> DecoderStage:
    stage = DecoderStage(tmp_path / "unused.fst", "cpu_numpy", **kwargs)
    stage._decoder = CpuDecoder(_word_then_loop(), stage.options)
    return stage


def test_the_partial_interval_is_rounded_to_the_nearest_frame(tmp_path: Path) -> None:
    stage = _stage(tmp_path, partial_every_ms=30.0)
    # 30 ms at a 20 ms shift: 1.5 frames, rounded to 2: partials after frames 1, 3, 5 of 6
    row = stage.decode_one("u", np.zeros((6, 1), np.float32), 20.0)
    assert [p["frame"] for p in row["partials"]] == [1, 3, 5]
    assert [p["time_ms"] for p in row["partials"]] == [40.0, 80.0, 120.0]  # (frame + 1) x 20 ms
    # 30 ms at a 40 ms shift: 0.75 frames, rounded to 1: a partial after every frame
    assert [p["frame"] for p in stage.decode_one("v", np.zeros((3, 1), np.float32), 40.0)["partials"]] == [0, 1, 2]


def test_a_rows_own_frame_shift_comes_before_the_stages(tmp_path: Path) -> None:
    stage = _stage(tmp_path, partial_every_ms=40.0, frame_shift_ms=10.0)
    own = stage.decode_one("own", np.zeros((4, 1), np.float32), 40.0)  # 40 ms at 40 ms: every frame
    default = stage.decode_one("default", np.zeros((4, 1), np.float32))  # 40 ms at 10 ms: every fourth frame
    assert [p["frame"] for p in own["partials"]] == [0, 1, 2, 3]
    assert [p["frame"] for p in default["partials"]] == [3]


def test_a_lattice_folder_implies_a_lattice_beam_of_8(tmp_path: Path) -> None:
    stage = _stage(tmp_path, lattice_dir=tmp_path / "lat")
    assert stage.options.lattice_beam == 8.0
    assert _stage(tmp_path, lattice_dir=tmp_path / "lat", lattice_beam=2.0).options.lattice_beam == 2.0
    assert _stage(tmp_path).options.lattice_beam is None


def test_malformed_and_rejected_scores_fail_their_own_rows(tmp_path: Path) -> None:
    stage = _stage(tmp_path)
    rows = [{"utt_id": "short", "num_frames": 2, "num_classes": 3, "loglikes": [0.0] * 5},
            {"utt_id": "nan", "num_frames": 2, "num_classes": 1, "loglikes": [0.0, float("nan")]},
            {"utt_id": "good", "num_frames": 2, "num_classes": 1, "loglikes": [0.0, 0.0]}]
    out = stage(pa.Table.from_pylist(rows)).to_pylist()
    assert [r["id"] for r in out] == ["short", "nan", "good"]
    assert out[0]["status"] == "malformed scores: 5 loglikes do not fill num_frames x num_classes = 2 x 3"
    assert out[1]["status"].startswith("bad scores: utterance 'nan'") and out[1]["num_frames"] == 2
    assert out[1]["word_ids"] == [] and out[1]["graph_cost"] is None
    assert out[2]["status"] == "ok" and out[2]["word_ids"] == [7] and out[2]["graph_cost"] == pytest.approx(0.5)


def test_a_lattice_folder_that_cannot_be_written_stops_the_stage_not_each_row(tmp_path: Path) -> None:
    (tmp_path / "blocker").write_text("a file where the lattice folder goes")
    stage = _stage(tmp_path, lattice_dir=tmp_path / "blocker" / "lat")
    with pytest.raises(NotADirectoryError):  # the decoding worked: its results are not turned into failures
        stage.decode_one("u", np.zeros((2, 1), np.float32))


def test_backends_refuse_what_they_cannot_give(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="partial_posterior_scale must be > 0"):
        DecoderStage(tmp_path / "g.fst", "cpu_numpy", lattice_beam=4.0, partial_posterior_scale=0.0)
    with pytest.raises(ValueError, match="the twin backend has no partial lattices"):
        DecoderStage(tmp_path / "g.fst", "twin", lattice_beam=4.0, partial_posterior_scale=1.0)
    assert DecoderStage(tmp_path / "g.fst", "cpu_numpy", lattice_beam=4.0,
                        partial_posterior_scale=1.0).options.partial_lattices


def test_lattice_file_names_hash_the_raw_id() -> None:
    assert _safe_name("spk.a-1_b") == "spk.a-1_b"
    assert _safe_name("a b") == "a_b-7dbde935"  # sha1("a b") begins 7dbde935
    assert _safe_name("") == "-da39a3ee"  # sha1("") begins da39a3ee: an empty id still names a file


def test_metrics_count_tokens_per_frame_and_frames_per_second(tmp_path: Path) -> None:
    out = pa.Table.from_pylist([{"id": "a", "status": "ok", "num_frames": 10, "tokens_created": 50,
                                 "beam_narrowings": 1},
                                {"id": "b", "status": "ok", "num_frames": 20, "tokens_created": 40,
                                 "beam_narrowings": 2}], schema=OUTPUT_SCHEMA)
    stage = _stage(tmp_path)
    # 30 frames, 90 tokens: 3 tokens a frame; 30 frames in 2 s: 15 a second
    assert stage.metrics(out, 2.0) == {"utterances_decoded": 2.0, "frames_decoded": 30.0, "beam_narrowings": 3.0,
                                       "active_tokens": 3.0, "frames_per_second": 15.0}
    assert "frames_per_second" not in stage.metrics(out, 0.0)
    # failed rows decode no frame: 3 rows, 1 frame, 4 tokens: 4 tokens a frame
    rows = [{"id": u, "status": "ok" if n else "empty utterance", "num_frames": n, "tokens_created": t,
             "beam_narrowings": 0} for u, n, t in (("a", 1, 4), ("b", 0, 0), ("c", 0, 0))]
    metrics = stage.metrics(pa.Table.from_pylist(rows, schema=OUTPUT_SCHEMA), 0.5)
    assert (metrics["active_tokens"], metrics["frames_per_second"], metrics["utterances_decoded"]) == (4.0, 2.0, 3.0)
