"""A graph shared by every decoder process of a machine: its CSR arrays as memory-mapped .npy files.

`mapped_graph(path)` reads an OpenFst graph once per machine (per file version) into a folder of .npy files
under the work directory (`mapped-graphs/<key>`, key: a hash of the file's absolute path, size and
modification time), then maps them copy-on-write: the pages come from the page cache, which every process
that maps the same files shares, so N decoder workers hold one copy of the graph, not N; nothing is parsed
again. The arrays are writable as numba and numpy expect, but a write would only touch the writer's private
copy of that page (the decoders never write to the graph).

The folder is written under a temporary name and renamed into place, so a concurrent reader sees either
nothing or a complete folder; processes that build it at the same time each write their own temporary
folder and the first rename wins. Each folder records the file it maps (`source.json`: path, size and
modification time); writing a new folder removes those whose file has changed or is gone since (a rebuilt
graph leaves its old arrays behind otherwise, hundreds of MB for a large HCLG) and temporary folders a killed
writer left. A process still mapping a removed folder keeps its pages until it unmaps them.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from specbench.errors import DataError
from specbench.paths import work_dir
from specbench.wfst.graph import ArcSet, CsrGraph, read_graph

_SETS = ("emitting", "epsilon")
_FIELDS = ("offsets", "dest", "ilabel", "olabel", "weight")
FORMAT = "1"
SOURCE = "source.json"
ABANDONED_S = 3600.0  # a temporary folder untouched this long was left by a writer that was killed


def mapped_dir(path: Path | str) -> Path:
    """The folder holding the mapped arrays of the graph file `path` (as it is now)."""
    path = Path(path).resolve()
    stat = path.stat()
    key = hashlib.sha256(f"{FORMAT}\0{path}\0{stat.st_size}\0{stat.st_mtime_ns}".encode()).hexdigest()[:16]
    return work_dir() / "mapped-graphs" / key


def _source_record(path: Path) -> dict:
    stat = path.stat()
    return {"path": str(path), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}


def _maps_current_file(folder: Path) -> bool:
    """Whether `folder` records a graph file that is still there with the same size and modification time."""
    try:
        record = json.loads((folder / SOURCE).read_text())
        return _source_record(Path(record["path"])) == record
    except (OSError, ValueError, KeyError, TypeError):  # no record (an older folder), a file gone, bad JSON
        return False


def remove_stale(root: Path, keep: Path) -> None:
    """Remove the folders under `root` (but `keep`) that map a graph file that changed or is gone since, or
    carry no record of it, and temporary folders untouched for `ABANDONED_S`."""
    now = time.time()
    for folder in root.iterdir():
        if folder == keep or not folder.is_dir():
            continue
        if "." in folder.name:  # a writer's temporary folder: another process may be filling it now
            try:
                abandoned = now - folder.stat().st_mtime > ABANDONED_S
            except OSError:
                continue
            if abandoned:
                shutil.rmtree(folder, ignore_errors=True)
        elif not _maps_current_file(folder):
            shutil.rmtree(folder, ignore_errors=True)


def _write(graph: CsrGraph, folder: Path, source: Path | None = None) -> None:
    """The graph's arrays into `folder` (created under a temporary name, then renamed into place), with the
    record of the `source` file they came from when given."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=folder.name + ".", dir=folder.parent))
    try:
        if source is not None:
            (tmp / SOURCE).write_text(json.dumps(_source_record(source)))
        np.save(tmp / "start.npy", np.int64(graph.start))
        np.save(tmp / "final.npy", graph.final)
        for name in _SETS:
            arcs = getattr(graph, name)
            for field in _FIELDS:
                np.save(tmp / f"{name}_{field}.npy", getattr(arcs, field))
        try:
            tmp.rename(folder)
        except OSError:  # another process put its folder there first: use that one
            if not (folder / "final.npy").is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _load(folder: Path) -> CsrGraph:
    def array(name: str) -> np.ndarray:
        return np.load(folder / f"{name}.npy", mmap_mode="c", allow_pickle=False)

    sets = {name: ArcSet(**{field: array(f"{name}_{field}") for field in _FIELDS}) for name in _SETS}
    return CsrGraph(start=int(array("start")), final=array("final"), **sets)


def mapped_graph(path: Path | str) -> CsrGraph:
    """The graph file `path` as a CsrGraph over memory-mapped arrays (written on first use; see the module
    docstring). The same arrays as `read_graph(path)`."""
    if not Path(path).is_file():
        raise DataError(f"graph {path}: no such file. Fix: build it with `specbench graph build` or pass the "
                        "right --graph")
    folder = mapped_dir(path)
    if not (folder / "final.npy").is_file():
        _write(read_graph(path), folder, Path(path).resolve())
        remove_stale(folder.parent, keep=folder)
    try:
        return _load(folder)
    except (OSError, ValueError) as err:
        raise DataError(f"{folder}: unreadable mapped graph ({err}). Fix: delete that folder; it is rebuilt "
                        f"from {path}") from err

