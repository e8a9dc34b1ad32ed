"""Acoustic scores files read back against hand-built matrices: the Parquet rows (failed rows skipped, an ok
row without scores or with the wrong number of them refused, frame shifts, a sliced table), the required
columns and their types, `.npy` (named by the file's stem) and `.npz` (in archive order, with `select`),
dispatch by suffix and the frame shift that non-Parquet formats need, and arrays of the wrong shape or kind."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from specbench.data import scores
from specbench.errors import DataError

pytestmark = pytest.mark.unit
A = np.arange(6, dtype=np.float32).reshape(2, 3)  # 2 frames x 3 classes
B = -np.arange(4, dtype=np.float32).reshape(4, 1) - 0.5  # 4 frames x 1 class


def _table(**columns: list) -> pa.Table:
    base = {"utt_id": ["a", "b"], "frame_shift_ms": [40.0, 10.0], "num_frames": [2, 4], "num_classes": [3, 1],
            "loglikes": pa.array([A.ravel().tolist(), B.ravel().tolist()], pa.list_(pa.float32())),
            "status": ["ok", "ok"]}
    return pa.table({**base, **columns})


def test_parquet_rows_come_back_as_their_matrices_with_their_frame_shifts(tmp_path: Path) -> None:
    scores.write_parquet(_table(), tmp_path / "s.parquet")
    got = list(scores.read_scores(tmp_path / "s.parquet"))
    assert [(u, shift) for u, _, shift in got] == [("a", 40.0), ("b", 10.0)]
    np.testing.assert_array_equal(got[0][1], A)
    np.testing.assert_array_equal(got[1][1], B)
    assert got[0][1].dtype == np.float32
    no_shift = {u: s for u, _, s in scores.iter_rows(_table().drop_columns(["frame_shift_ms"]))}
    assert no_shift == {"a": 0.0, "b": 0.0}


def test_a_sliced_table_reads_the_rows_it_holds() -> None:
    table = pa.concat_tables([_table(), _table(utt_id=["c", "d"])]).slice(1, 2)  # rows b, c
    got = dict(scores.iter_matrices(table))
    assert list(got) == ["b", "c"]
    np.testing.assert_array_equal(got["b"], B)
    np.testing.assert_array_equal(got["c"], A)


def test_failed_rows_are_skipped_and_an_ok_row_without_scores_is_refused() -> None:
    loglikes = pa.array([None, B.ravel().tolist()], pa.list_(pa.float32()))
    failed = _table(loglikes=loglikes, status=["decode failed: x", "ok"], num_frames=[None, 4])
    assert list(dict(scores.iter_matrices(failed))) == ["b"]
    with pytest.raises(DataError, match=r"utterance 'a' has no value in the column\(s\) \['num_frames', "
                                        r"'loglikes'\] although its status is ok"):
        list(scores.iter_rows(_table(loglikes=loglikes, num_frames=[None, 4]), "here"))


def test_a_row_whose_size_is_not_frames_times_classes_is_refused() -> None:
    with pytest.raises(DataError, match=r"here: utterance 'b': column 'loglikes' holds 4 scores, not "
                                        r"num_frames x num_classes = 2 x 1"):
        list(scores.iter_rows(_table(num_frames=[2, 2]), "here"))


@pytest.mark.parametrize(("change", "match"), [
    ({"drop": "num_classes"}, r"the scores table lacks the column\(s\) \['num_classes'\]"),
    ({"num_frames": pa.array([2.0, 4.0])}, (r"column 'num_frames' is of type double; the scores format needs an "
                                           r"integer type")),
    ({"loglikes": pa.array([["x"] * 6, ["y"] * 4])}, (r"column 'loglikes' is of type list<\w+: string>; "
                                                     r"the scores format needs a list of float32")),
    ({"status": pa.array([0, 0])}, r"column 'status' is of type int64; the scores format needs string"),
], ids=["missing-column", "float-frames", "string-scores", "int-status"])
def test_scores_tables_with_a_missing_or_mistyped_column_are_refused(tmp_path: Path, change: dict,
                                                                     match: str) -> None:
    table = _table().drop_columns([change["drop"]]) if "drop" in change else _table(**change)
    pq.write_table(table, tmp_path / "s.parquet")
    with pytest.raises(DataError, match=r"s\.parquet: " + match):
        scores.read_parquet_table(tmp_path / "s.parquet")


def test_npy_and_npz_need_a_frame_shift_and_keep_names_and_order(tmp_path: Path) -> None:
    np.save(tmp_path / "utt7.npy", A)
    np.savez(tmp_path / "s.npz", zed=B, alpha=A.astype(np.float64))
    with pytest.raises(DataError, match=r"\.npy scores carry no frame shift"):
        scores.read_scores(tmp_path / "utt7.npy")
    ((utt, mat, shift),) = list(scores.read_scores(tmp_path / "utt7.npy", 25.0))
    assert (utt, shift) == ("utt7", 25.0)
    np.testing.assert_array_equal(mat, A)
    got = list(scores.read_scores(tmp_path / "s.npz", 40.0))
    assert [u for u, _, _ in got] == ["zed", "alpha"] and got[1][1].dtype == np.float32
    picked = scores.read_npz(tmp_path / "s.npz", select=lambda keys: [k for k in keys if k.startswith("a")])
    assert list(picked) == ["alpha"]


def test_arrays_of_the_wrong_shape_or_kind_and_unknown_suffixes_are_refused(tmp_path: Path) -> None:
    np.savez(tmp_path / "s.npz", ok=A, flat=np.zeros(5, np.float32))
    with pytest.raises(DataError, match=r"utterance 'flat' are a float32 array of shape \(5,\); expected a 2-D"):
        list(scores.read_scores(tmp_path / "s.npz", 40.0))
    np.savez(tmp_path / "t.npz", words=np.array([["a", "b"]]))
    with pytest.raises(DataError, match=r"utterance 'words' are a <U1 array"):
        scores.read_npz(tmp_path / "t.npz")
    np.save(tmp_path / "single.npy", A)
    (tmp_path / "single.npy").rename(tmp_path / "single.npz")
    with pytest.raises(DataError, match=r"a single \.npy array, not a \.npz archive"):
        list(scores.read_scores(tmp_path / "single.npz", 40.0))
    (tmp_path / "s.txt").write_text("1 2\n")
    with pytest.raises(DataError, match=r"unknown scores format '\.txt'"):
        scores.read_scores(tmp_path / "s.txt", 40.0)
    with pytest.raises(DataError, match=r"scores file .*missing\.npz does not exist"):
        scores.read_scores(tmp_path / "missing.npz", 40.0)



def test_the_fixes_name_the_file_that_describes_the_scores_format(tmp_path: Path) -> None:
    (tmp_path / "text.parquet").write_text("utt1 a b c\n")
    (tmp_path / "s.txt").write_text("1 2\n")
    for call in (lambda: scores.read_parquet_table(tmp_path / "text.parquet"),
                 lambda: scores.read_scores(tmp_path / "s.txt", 40.0)):
        with pytest.raises(DataError) as err:  # DESIGN.md is not in the repository
            call()
        assert "DESIGN.md" not in str(err.value) and "platform/specbench/data/scores.py" in str(err.value)
    assert "utt_id, frame_shift_ms, num_frames, num_classes, loglikes" in scores.SCORES_FIX
    assert (Path(__file__).resolve().parents[2] / "platform/specbench/data/scores.py").is_file()


def test_utterance_ids_are_those_read_scores_yields(tmp_path: Path) -> None:
    scores.write_parquet(_table(status=["ok", "failed"]), tmp_path / "s.parquet")
    np.savez(tmp_path / "s.npz", x=A, y=B)
    assert scores.utterance_ids(tmp_path / "s.parquet") == ["a"]
    assert scores.utterance_ids(tmp_path / "s.npz") == ["x", "y"]
    assert scores.utterance_ids(tmp_path / "s.ark") is None  # known only by reading the whole archive
    assert scores.utterance_ids(tmp_path / "no.npz") is None


def test_a_damaged_scores_file_names_the_eval_job_that_writes_its_folder(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The eval job's name comes from the folder's scores.json, else from `.specbench/scores/<name>/`."""
    monkeypatch.setenv("SPECBENCH_HOME", str(tmp_path / "home"))
    fixes = {}
    for folder, record in (("home/scores/quick", '{"eval_job": "quick"}'), ("home/scores/bench", None),
                           ("elsewhere", None)):
        path = tmp_path / folder / "test.parquet"
        scores.write_parquet(_table(), path)
        path.write_bytes(path.read_bytes()[:100])  # truncated: no Parquet footer
        if record:
            (path.parent / "scores.json").write_text(record)
        with pytest.raises(DataError, match="not a readable scores Parquet file") as err:
            scores.read_parquet_table(path)
        fixes[folder] = str(err.value)
    assert ("(`specbench run jobs/am_eval_quick.toml`: the eval_am job named 'quick' writes this folder"
            in fixes["home/scores/quick"])
    assert "(`specbench run jobs/am_eval_bench.toml`: the eval_am job named 'bench'" in fixes[
        "home/scores/bench"]
    assert scores.SCORES_FIX in fixes["elsewhere"]
    assert "job named <name>, e.g. jobs/am_eval.toml or jobs/am_eval_quick.toml" in scores.SCORES_FIX


def test_two_writers_of_one_file_never_share_a_temporary_file(tmp_path: Path) -> None:
    """Each write renames only its own temporary file into place (writer B does not truncate or publish A's
    half-written one); a write that fails leaves the old file and no temporary file."""
    path = tmp_path / "s.parquet"
    with scores.replacing(path) as a_tmp:
        a_tmp.write_bytes(b"half of writer A's file")
        scores.write_parquet(_table(), path)  # writer B, meanwhile
        assert a_tmp.exists() and [u for u, *_ in scores.read_scores(path)] == ["a", "b"]
        a_tmp.unlink()
        pq.write_table(_table(), a_tmp)
    with pytest.raises(pa.ArrowInvalid), scores.replacing(path) as tmp:
        tmp.write_bytes(b"x")
        raise pa.ArrowInvalid("the writer failed")
    assert [u for u, *_ in scores.read_scores(path)] == ["a", "b"] and list(tmp_path.iterdir()) == [path]
