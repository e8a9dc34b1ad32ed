"""Acoustic scores on disk: the scores format (Parquet), Kaldi ark/scp (kaldiio), `.npy` and `.npz`.

The scores format, Parquet: one row per utterance (`utt_id`, `frame_shift_ms`, `num_frames`, `num_classes`,
`loglikes` row-major T x P float32, `status`). Kaldi: a float32 matrix per utterance, the frame shift given
separately.

Every reader checks what it reads: a damaged, truncated or mistyped file is a `DataError` that names the file,
the utterance or column at fault, and the fix. kaldiio is imported only by the Kaldi readers, so that the
Parquet and npz readers work on a machine without it.
"""

from __future__ import annotations

import json
import os
import tomllib
import zipfile
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from specbench.errors import DataError
from specbench.paths import project_root, work_dir_location
from specbench.stage import STATUS_COLUMN, STATUS_OK
from specbench.text_files import own_temp_path, replacing

# (utt_id, loglikes (T, P) float32, frame_shift_ms); column j scores graph input label j + 1
Scores = Iterator[tuple[str, np.ndarray, float]]

_FORMAT = ("the scores format that platform/specbench/data/scores.py describes: one row per utterance, "
           "columns utt_id, frame_shift_ms, num_frames, num_classes, loglikes, status")
SCORES_FIX = ("Fix: write the scores again with the eval_am job that writes this folder (`.specbench/scores/"
              "<name>/` is written by the eval_am job named <name>, e.g. jobs/am_eval.toml or "
              f"jobs/am_eval_quick.toml; it writes {_FORMAT}), or point at an intact file.")
KALDI_FIX = ("Fix: write the scores again as float matrices (Kaldi's copy-matrix, or kaldiio.WriteHelper("
             "'ark,scp:OUT.ark,OUT.scp')), or point at an intact file.")
NUMPY_FIX = ("Fix: save one 2-D float32 array (frames, columns) per utterance with numpy.savez(OUT.npz, "
             "utt_id=array), or point at an intact file.")
# The columns of the scores format, each with a check of its Arrow type and the type's name.
_COLUMN_TYPES = {
    "utt_id": (lambda t: pa.types.is_string(t) or pa.types.is_large_string(t), "string"),
    "num_frames": (pa.types.is_integer, "an integer type"),
    "num_classes": (pa.types.is_integer, "an integer type"),
    "loglikes": (lambda t: (pa.types.is_list(t) or pa.types.is_large_list(t))
                 and pa.types.is_floating(t.value_type), "a list of float32"),
    "frame_shift_ms": (lambda t: pa.types.is_floating(t) or pa.types.is_integer(t), "a float type"),
    STATUS_COLUMN: (lambda t: pa.types.is_string(t) or pa.types.is_large_string(t), "string"),
}
_REQUIRED = ("utt_id", "num_frames", "num_classes", "loglikes")
# what numpy and zipfile raise for a damaged .npy or .npz
_NUMPY_ERRORS = (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error, KeyError)


def scores_fix(path: Path) -> str:
    """`SCORES_FIX` naming the eval_am job that writes the folder of `path`, where it can be known: the
    `eval_job` of the folder's `scores.json`, else the folder's name when it is
    `.specbench/scores/<name>/`."""
    folder = Path(path).parent
    try:
        name = json.loads((folder / "scores.json").read_text(encoding="utf-8")).get("eval_job")
    except (OSError, ValueError, AttributeError):
        name = None
    if not isinstance(name, str) and folder.resolve().parent == (work_dir_location() / "scores").resolve():
        name = folder.name
    if not isinstance(name, str):
        return SCORES_FIX
    jobs = [f"jobs/{p.name}" for p in sorted((project_root() / "jobs").glob("*.toml"))
            if _eval_job_named(p, name)]
    run = " or ".join(f"`specbench run {job}`" for job in jobs) or "`specbench run` on its job file"
    return (f"Fix: write the scores again ({run}: the eval_am job named {name!r} writes this folder, in "
            f"{_FORMAT}), or point at an intact file.")


def _eval_job_named(job: Path, name: str) -> bool:
    try:
        data = tomllib.loads(job.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return False
    return data.get("kind") == "eval_am" and data.get("name") == name


def write_parquet(table: pa.Table, path: Path) -> None:
    """Write atomically (temp file + rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with replacing(path) as tmp:
        pq.write_table(table, tmp)


def iter_rows(table: pa.Table, where: str = "scores") -> Iterator[tuple[str, np.ndarray, float]]:
    """(utt_id, (T, P) float32, frame_shift_ms or 0.0) for every ok row; a row whose size does not match
    its shape is an error naming `where` and the utterance. Each matrix is copied from the table's buffers
    (no per-score Python objects), one record batch at a time."""
    for batch in table.to_batches():
        columns = {name: batch.column(name) for name in batch.schema.names}
        n = batch.num_rows
        status = columns[STATUS_COLUMN].to_pylist() if STATUS_COLUMN in columns else [STATUS_OK] * n
        shifts = columns["frame_shift_ms"].to_pylist() if "frame_shift_ms" in columns else [None] * n
        ids, frames, classes = (columns[k].to_pylist() for k in ("utt_id", "num_frames", "num_classes"))
        loglikes = columns["loglikes"]
        valid = loglikes.is_valid().to_numpy(zero_copy_only=False)
        offsets = loglikes.offsets.to_numpy()
        values = loglikes.values.to_numpy(zero_copy_only=False)
        for i in range(n):
            if status[i] != STATUS_OK:
                continue
            utt_id = ids[i]
            empty = [k for k, v in (("utt_id", utt_id), ("num_frames", frames[i]), ("num_classes", classes[i]),
                                    ("loglikes", valid[i] or None)) if v is None]
            if empty:
                raise DataError(f"{where}: utterance {utt_id!r} has no value in the column(s) {empty} although "
                                f"its status is ok. {scores_fix(Path(where))}")
            flat = values[offsets[i]:offsets[i + 1]]
            shape = (int(frames[i]), int(classes[i]))
            if min(shape) < 0 or flat.size != shape[0] * shape[1]:
                raise DataError(f"{where}: utterance {utt_id!r}: column 'loglikes' holds {flat.size} scores, "
                                f"not num_frames x num_classes = {shape[0]} x {shape[1]}. "
                                f"{scores_fix(Path(where))}")
            yield utt_id, np.array(flat, dtype=np.float32).reshape(shape), float(shifts[i] or 0.0)


def iter_matrices(table: pa.Table) -> Iterator[tuple[str, np.ndarray]]:
    """(utt_id, (T, P) float32) for every ok row."""
    for utt_id, mat, _ in iter_rows(table):
        yield utt_id, mat


def read_parquet_table(path: Path) -> pa.Table:
    """A scores Parquet table, checked for the columns of the scores format and their types."""
    path = Path(path)
    try:
        table = pq.read_table(path)
    except (OSError, pa.ArrowException) as err:
        raise DataError(f"{path}: not a readable scores Parquet file ({err}). {scores_fix(path)}") from err
    missing = [c for c in _REQUIRED if c not in table.column_names]
    if missing:
        raise DataError(f"{path}: the scores table lacks the column(s) {missing} (it has "
                        f"{table.column_names}); the scores format needs {list(_REQUIRED)}. "
                        f"{scores_fix(path)}")
    for name, (ok, expected) in _COLUMN_TYPES.items():
        if name in table.column_names and not ok(table.schema.field(name).type):
            raise DataError(f"{path}: column '{name}' is of type {table.schema.field(name).type}; the scores "
                            f"format needs {expected}. {scores_fix(path)}")
    return table


def read_parquet_scores(path: Path) -> dict[str, np.ndarray]:
    """utt_id -> (T, P) float32 from a scores Parquet file."""
    return dict(iter_matrices(read_parquet_table(path)))


def write_kaldi(table: pa.Table, ark: Path) -> Path:
    """Write `ark` and its `.scp` beside it; returns the scp path."""
    import kaldiio

    ark = Path(ark)
    scp = ark.with_suffix(".scp")
    ark.parent.mkdir(parents=True, exist_ok=True)
    tmp_ark, tmp_scp = own_temp_path(ark), own_temp_path(scp)
    try:
        with kaldiio.WriteHelper(f"ark,scp:{tmp_ark},{tmp_scp}") as writer:
            for utt_id, mat in iter_matrices(table):
                writer(utt_id, mat)
        os.replace(tmp_ark, ark)
        # the scp names the ark it was written beside: point it at the final name
        tmp_scp.write_text(tmp_scp.read_text().replace(str(tmp_ark), str(ark)))
        os.replace(tmp_scp, scp)
    finally:
        tmp_ark.unlink(missing_ok=True)
        tmp_scp.unlink(missing_ok=True)
    return scp


def read_kaldi(scp: Path) -> dict[str, np.ndarray]:
    """utt_id -> (T, P) float32 from a Kaldi scp."""
    return {utt_id: mat for utt_id, mat, _ in _kaldi(Path(scp), 0.0)}


def read_npz(path: Path, select: Callable[[list[str]], list[str]] | None = None) -> dict[str, np.ndarray]:
    """utt_id -> (T, P) float32 from a `.npz` of one 2-D float array per utterance, each checked; `select`
    picks the keys to read from the archive's keys (all when None), in its order."""
    return {utt_id: mat for utt_id, mat, _ in _npz(Path(path), 0.0, select)}


def read_scores(path: Path, frame_shift_ms: float | None = None) -> Scores:
    """Dispatch on the suffix; a missing frame shift for a format without one is an error."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"scores file {path} {'is a folder, not a file' if path.is_dir() else 'does not exist'}. "
                        "Fix: give --scores the path of a .parquet, "
                        ".scp, .ark, .npy or .npz scores file.")
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        return _parquet(path)
    if suffix not in (".scp", ".ark", ".npy", ".npz"):
        raise DataError(f"{path}: unknown scores format {suffix!r}. Fix: give a file ending in .parquet, "
                        ".scp, .ark, .npy or .npz (the formats platform/specbench/data/scores.py "
                        "describes).")
    if frame_shift_ms is None:
        raise DataError(f"{path}: {suffix} scores carry no frame shift. Fix: pass --frame-shift-ms (40 for "
                        "the project's acoustic model)")
    if suffix in (".scp", ".ark"):
        return _kaldi(path, frame_shift_ms)
    if suffix == ".npy":
        return iter([(path.stem, _matrix(_load_npy(path), path, path.stem, NUMPY_FIX), frame_shift_ms)])
    return _npz(path, frame_shift_ms)


def unscored(path: Path) -> list[tuple[str, str]]:
    """(utt_id, status) of the rows of a Parquet scores file whose scoring failed (status not ok), which
    `read_scores` leaves out; none for other formats, which hold scores only."""
    path = Path(path)
    try:
        if path.suffix.lower() != ".parquet" or STATUS_COLUMN not in pq.read_schema(path).names:
            return []
        rows = pq.read_table(path, columns=["utt_id", STATUS_COLUMN]).to_pylist()
    except (OSError, pa.ArrowException):  # missing or damaged: `read_scores` names the fault
        return []
    return [(r["utt_id"], r[STATUS_COLUMN]) for r in rows if r[STATUS_COLUMN] != STATUS_OK]


def utterance_ids(path: Path) -> list[str] | None:
    """The ids of the utterances `read_scores(path)` yields, read without their scores (None: not known so, as
    for an .ark, or the file cannot be read; `read_scores` names its fault)."""
    path = Path(path)
    suffix = path.suffix.lower()
    try:
        if suffix == ".parquet":
            names = [c for c in ("utt_id", STATUS_COLUMN) if c in pq.read_schema(path).names]
            rows = pq.read_table(path, columns=names).to_pylist()
            return [r["utt_id"] for r in rows if r.get(STATUS_COLUMN, STATUS_OK) == STATUS_OK]
        if suffix == ".scp":
            return [line.split()[0] for line in path.read_text(encoding="utf-8").splitlines() if line.split()]
        if suffix == ".npz":
            with np.load(path, allow_pickle=False) as data:
                return list(data.files)
        return [path.stem] if suffix == ".npy" else None
    except (*_NUMPY_ERRORS, UnicodeDecodeError, pa.ArrowException, AttributeError):
        return None


def _matrix(value: object, path: Path, utt_id: str, fix: str = SCORES_FIX) -> np.ndarray:
    """`value` as a (T, P) float32 matrix; anything else is an error naming the file and the utterance."""
    array = np.asarray(value)
    numeric = np.issubdtype(array.dtype, np.floating) or np.issubdtype(array.dtype, np.integer)
    if not numeric or array.ndim != 2:
        raise DataError(f"{path}: the scores of utterance {utt_id!r} are a {array.dtype} array of shape "
                        f"{array.shape}; expected a 2-D float array (frames, columns). {fix}")
    return array.astype(np.float32, copy=False)


def _parquet(path: Path) -> Scores:
    yield from iter_rows(read_parquet_table(path), str(path))


def _kaldi(path: Path, frame_shift_ms: float) -> Scores:
    """The matrices of an ark or scp, in file order, each checked; kaldiio's failures become `DataError`s."""
    import kaldiio

    what = "Kaldi scp" if path.suffix == ".scp" else "Kaldi ark"
    load = kaldiio.load_scp_sequential if path.suffix == ".scp" else kaldiio.load_ark
    reader = iter(load(str(path)))
    last = None
    while True:
        try:
            utt_id, value = next(reader)
        except StopIteration:
            return
        except FileNotFoundError as err:  # an scp line naming an ark that is not there
            entry = "its first entry" if last is None else f"the entry after utterance {last!r}"
            raise DataError(f"{path}: {entry} names {err.filename}, which does not exist. Fix: keep the ark "
                            "at the path the scp names, or write the scp again beside its ark.") from err
        except Exception as err:  # noqa: BLE001 - kaldiio raises many types for a damaged file
            after = f"after utterance {last!r}" if last is not None else "at its first utterance"
            reason = " ".join(str(err).split())[:200] or "the bytes there are not a Kaldi matrix"
            raise DataError(f"{path}: not a readable {what} of float matrices {after} ({reason}). "
                            f"{KALDI_FIX}") from err
        last = utt_id
        yield utt_id, _matrix(value, path, utt_id, KALDI_FIX), frame_shift_ms


def _load_npy(path: Path) -> np.ndarray:
    try:
        return np.load(path, allow_pickle=False)
    except _NUMPY_ERRORS as err:
        raise DataError(f"{path}: not a readable .npy array of scores ({_numpy_reason(err)}). "
                        f"{NUMPY_FIX}") from err


def _npz(path: Path, frame_shift_ms: float, select: Callable[[list[str]], list[str]] | None = None) -> Scores:
    try:
        data = np.load(path, allow_pickle=False)
    except _NUMPY_ERRORS as err:
        raise DataError(f"{path}: not a readable .npz archive of scores ({_numpy_reason(err)}). "
                        f"{NUMPY_FIX}") from err
    if not isinstance(data, np.lib.npyio.NpzFile):
        raise DataError(f"{path}: a single .npy array, not a .npz archive of one array per utterance. "
                        f"Fix: rename it to .npy, or {NUMPY_FIX[5:]}")
    with data:
        for key in data.files if select is None else select(list(data.files)):
            try:
                value = data[key]
            except _NUMPY_ERRORS as err:
                raise DataError(f"{path}: the array of utterance {key!r} cannot be read "
                                f"({_numpy_reason(err)}). {NUMPY_FIX}") from err
            yield key, _matrix(value, path, key, NUMPY_FIX), frame_shift_ms


def _numpy_reason(err: Exception) -> str:
    """numpy's words for a damaged file, without its advice to load pickled data."""
    text = str(err).split(". If you trust")[0].strip()
    if "pickle" in text:
        return "it holds Python objects or is not a numpy file at all, and specbench never unpickles"
    return text or "the file ends early or is damaged"
