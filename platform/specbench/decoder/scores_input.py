"""Read acoustic scores for decoding: Parquet (DESIGN.md's scores format), Kaldi ark/scp, `.npy`, `.npz`.

Every reader yields `(utt_id, loglikes (T, P) float32, frame_shift_ms)`; formats without a frame shift
(Kaldi, numpy) take it from the caller. Column j scores graph input label j + 1.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import kaldiio
import numpy as np

from specbench.acoustic.scores import iter_rows, read_parquet_table
from specbench.errors import DataError

Scores = Iterator[tuple[str, np.ndarray, float]]


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
