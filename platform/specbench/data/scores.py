"""Acoustic scores on disk: DESIGN.md's Parquet format, Kaldi ark/scp (kaldiio), `.npy` and `.npz`.

Parquet: one row per utterance (`utt_id`, `frame_shift_ms`, `num_frames`, `num_classes`, `loglikes`
row-major T x P float32, `status`). Kaldi: a float32 matrix per utterance, the frame shift given separately.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import kaldiio
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from specbench.errors import DataError
from specbench.stage import STATUS_COLUMN, STATUS_OK

# (utt_id, loglikes (T, P) float32, frame_shift_ms); column j scores graph input label j + 1
Scores = Iterator[tuple[str, np.ndarray, float]]


def write_parquet(table: pa.Table, path: Path) -> None:
    """Write atomically (temp file + rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    pq.write_table(table, tmp)
    os.replace(tmp, path)


def iter_rows(table: pa.Table, where: str = "scores") -> Iterator[tuple[str, np.ndarray, float]]:
    """(utt_id, (T, P) float32, frame_shift_ms or 0.0) for every ok row; a row whose size does not match
    its shape is an error naming `where` and the utterance."""
    for row in table.to_pylist():
        if row.get(STATUS_COLUMN, STATUS_OK) != STATUS_OK:
            continue
        flat = np.asarray(row["loglikes"], dtype=np.float32)
        shape = (int(row["num_frames"]), int(row["num_classes"]))
        if flat.size != shape[0] * shape[1]:
            raise DataError(f"{where}: utterance {row['utt_id']!r} has {flat.size} scores, not {shape[0]} x {shape[1]}")
        yield row["utt_id"], flat.reshape(shape), float(row.get("frame_shift_ms") or 0.0)


def iter_matrices(table: pa.Table) -> Iterator[tuple[str, np.ndarray]]:
    """(utt_id, (T, P) float32) for every ok row."""
    for utt_id, mat, _ in iter_rows(table):
        yield utt_id, mat


def read_parquet_table(path: Path) -> pa.Table:
    """A scores Parquet table, checked for the columns of DESIGN.md's scores format."""
    path = Path(path)
    try:
        table = pq.read_table(path)
    except (OSError, pa.ArrowInvalid) as err:
        raise DataError(f"{path}: not a readable scores Parquet file ({err})") from err
    missing = {"utt_id", "num_frames", "num_classes", "loglikes"} - set(table.column_names)
    if missing:
        raise DataError(f"{path}: scores table lacks the columns {sorted(missing)}; see DESIGN.md's Interfaces")
    return table


def read_parquet_scores(path: Path) -> dict[str, np.ndarray]:
    """utt_id -> (T, P) float32 from a scores Parquet file."""
    return dict(iter_matrices(read_parquet_table(path)))


def write_kaldi(table: pa.Table, ark: Path) -> Path:
    """Write `ark` and its `.scp` beside it; returns the scp path."""
    ark = Path(ark)
    scp = ark.with_suffix(".scp")
    ark.parent.mkdir(parents=True, exist_ok=True)
    tmp_ark, tmp_scp = ark.with_name(ark.name + ".tmp"), scp.with_name(scp.name + ".tmp")
    with kaldiio.WriteHelper(f"ark,scp:{tmp_ark},{tmp_scp}") as writer:
        for utt_id, mat in iter_matrices(table):
            writer(utt_id, mat)
    os.replace(tmp_ark, ark)
    # the scp names the ark it was written beside: point it at the final name
    tmp_scp.write_text(tmp_scp.read_text().replace(str(tmp_ark), str(ark)))
    os.replace(tmp_scp, scp)
    return scp


def read_kaldi(scp: Path) -> dict[str, np.ndarray]:
    """utt_id -> (T, P) float32 from a Kaldi scp."""
    return {k: np.asarray(v, dtype=np.float32) for k, v in kaldiio.load_scp(str(scp)).items()}


def read_scores(path: Path, frame_shift_ms: float | None = None) -> Scores:
    """Dispatch on the suffix; a missing frame shift for a format without one is an error."""
    path = Path(path)
    if not path.exists():
        raise DataError(f"scores file {path} does not exist")
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        return _parquet(path)
    if frame_shift_ms is None:
        raise DataError(f"{path}: {suffix} scores carry no frame shift. Fix: pass --frame-shift-ms (40 for the "
                        "project's acoustic model)")
    if suffix in (".scp", ".ark"):
        return _kaldi(path, frame_shift_ms)
    if suffix == ".npy":
        return iter([(path.stem, _matrix(np.load(path, allow_pickle=False), path, path.stem), frame_shift_ms)])
    if suffix == ".npz":
        return _npz(path, frame_shift_ms)
    raise DataError(f"{path}: unknown scores format {suffix!r}; allowed: .parquet, .scp, .ark, .npy, .npz")


def _matrix(value: object, path: Path, utt_id: str) -> np.ndarray:
    mat = np.asarray(value, dtype=np.float32)
    if mat.ndim != 2:
        raise DataError(f"{path}: scores of {utt_id!r} have shape {mat.shape}; expected (frames, columns)")
    return mat


def _parquet(path: Path) -> Scores:
    yield from iter_rows(read_parquet_table(path), str(path))


def _kaldi(path: Path, frame_shift_ms: float) -> Scores:
    reader = kaldiio.load_scp_sequential(str(path)) if path.suffix == ".scp" else kaldiio.load_ark(str(path))
    for utt_id, value in reader:
        yield utt_id, _matrix(value, path, utt_id), frame_shift_ms


def _npz(path: Path, frame_shift_ms: float) -> Scores:
    with np.load(path, allow_pickle=False) as data:
        for key in data.files:
            yield key, _matrix(data[key], path, key), frame_shift_ms
