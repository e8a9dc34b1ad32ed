"""The decoder benchmark's workloads: which graph and which scores every backend decodes.

A workload is a name in WORKLOADS -> a loader `(graph_path, scores_path, utterances, frame_shift_ms) ->
Workload` (adding one is adding an entry):
- `held_out_test`: the graph given (the SLURP TLG) and the first `utterances` held-out-voice utterances of a
  scores file, sorted by id;
- `real_speech`: the graph given (the Sphinx model's HCLG, `jobs/graph_sphinx.toml`) and the first
  `utterances` ok rows, by id, of a scores file or of the `*.parquet` files in a folder (the `real_speech`
  job's score cache, `.specbench/real_speech/scores/`: its per-utterance `utt-*.parquet` files where there
  are any, so that files of its earlier per-chunk layout are not read too): recorded speech over a
  context-dependent graph of millions of states, the realistic case for memory per lane.

Scores come from a Parquet file (DESIGN.md's scores format, read with `data.scores.read_parquet_table`; rows
whose status is not ok are left out) or a `.npz` of one (T, P) float32 array per utterance (the frame shift
then from `frame_shift_ms`, else from the `manifest.json` beside it, as the GPU carry folder writes it).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from specbench.data.voices import VOICES
from specbench.decoder.backends import GraphFile
from specbench.errors import DataError
from specbench.input_files import check_frame_shift

HELD_OUT_SLUGS = tuple(v.slug for v in VOICES if v.held_out)  # ("espeak-en-us-f4", "flite-rms")
_HELD_OUT = re.compile(r"(?:^|-)(?:" + "|".join(map(re.escape, HELD_OUT_SLUGS)) + r")(?:-|$)")
Items = list[tuple[str, np.ndarray]]  # (utt_id, loglikes (T, P) float32), column j scores input label j + 1


@dataclass(frozen=True)
class Workload:
    """What the backends decode: the graph file (read into a CsrGraph once, `graph.csr`), the utterances
    (`items`, in order) and their frame shift in ms."""

    name: str
    graph: GraphFile
    items: tuple[tuple[str, np.ndarray], ...]
    frame_shift_ms: float

    @property
    def graph_path(self) -> Path:
        return self.graph.path

    @property
    def ids(self) -> list[str]:
        return [u for u, _ in self.items]

    @property
    def frames(self) -> int:
        """Frames over all utterances."""
        return sum(len(m) for _, m in self.items)

    @property
    def audio_seconds(self) -> float:
        """Seconds of audio: frames x frame shift."""
        return self.frames * self.frame_shift_ms / 1000.0


WorkloadLoader = Callable[[Path, Path, int, "float | None"], Workload]


def load_workload(name: str, graph_path: Path, scores_path: Path, utterances: int,
                  frame_shift_ms: float | None = None) -> Workload:
    """The workload `name` (see WORKLOADS) over these files."""
    if name not in WORKLOADS:
        raise ValueError(f"unknown decoder workload {name!r}; registered: {', '.join(sorted(WORKLOADS))}")
    return WORKLOADS[name](Path(graph_path), Path(scores_path), utterances, frame_shift_ms)


def held_out_test(graph_path: Path, scores_path: Path, utterances: int,
                  frame_shift_ms: float | None = None) -> Workload:
    """The graph at `graph_path` and the first `utterances` held-out-voice utterances of `scores_path`."""
    if not graph_path.is_file():
        raise DataError(f"--graph {graph_path}: no such file")
    items, shift = load_scores(scores_path, utterances, frame_shift_ms)
    return Workload("held_out_test", GraphFile(graph_path), tuple(items), shift)


def real_speech(graph_path: Path, scores_path: Path, utterances: int,
                frame_shift_ms: float | None = None) -> Workload:
    """The graph at `graph_path` and the first `utterances` ok rows (by id) of `scores_path`: a scores
    Parquet file or a folder of them."""
    from specbench.data.scores import iter_rows, read_parquet_table
    from specbench.experiments.real_speech.score_cache import PREFIX

    if not graph_path.is_file():
        raise DataError(f"--graph {graph_path}: no such file")
    if utterances < 1:
        raise ValueError(f"utterances must be >= 1, got {utterances}")
    files = ((sorted(scores_path.glob(f"{PREFIX}*.parquet")) or sorted(scores_path.glob("*.parquet")))
             if scores_path.is_dir() else [scores_path])
    if not files or not files[0].is_file():
        raise DataError(f"--scores {scores_path}: no scores Parquet file there. Fix: run the real-speech job "
                        "(`specbench run jobs/real_speech.toml`), which writes them to "
                        ".specbench/real_speech/scores/")
    chosen: dict[str, tuple[np.ndarray, float]] = {}
    for path in files:
        for utt_id, mat, shift in iter_rows(read_parquet_table(path), str(path)):
            chosen[utt_id] = (mat, shift)
            if len(chosen) > utterances:  # keep the memory bounded: the first N by id survive
                chosen.pop(max(chosen))
    items = [(u, chosen[u][0]) for u in sorted(chosen)]
    shift = check_frame_shift(scores_path, frame_shift_ms, [chosen[u][1] for u, _ in items])
    if not items:
        raise DataError(f"--scores {scores_path}: no usable utterance (every row's status is an error)")
    if not shift or shift <= 0:
        raise DataError(f"{scores_path}: the scores carry no frame shift. Fix: pass --frame-shift-ms")
    return Workload("real_speech", GraphFile(graph_path), tuple(items), float(shift))


# a new workload: one more entry (and its name in config.benchmarks.DECODER_WORKLOADS)
WORKLOADS: dict[str, WorkloadLoader] = {"held_out_test": held_out_test, "real_speech": real_speech}


# ---- utterances and score files --------------------------------------------------------------------------

def is_held_out(utt_id: str) -> bool:
    """Whether an utterance id names a held-out voice (`...-flite-rms-...`, `...-espeak-en-us-f4-...`)."""
    return _HELD_OUT.search(utt_id) is not None


def select_utterances(utt_ids: Iterable[str], count: int) -> list[str]:
    """The first `count` held-out-voice ids in sorted order."""
    if count < 1:
        raise ValueError(f"utterances must be >= 1, got {count}")
    return sorted(u for u in set(utt_ids) if is_held_out(u))[:count]


def load_scores(path: Path, utterances: int, frame_shift_ms: float | None = None) -> tuple[Items, float]:
    """[(utt_id, (T, P) float32)] of the selected utterances, and the frame shift in ms."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"scores file {path} does not exist. Fix: give --scores the path of a .parquet or "
                        ".npz scores file")
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        items, shift = _parquet_scores(path, utterances)
        frame_shift_ms = check_frame_shift(path, frame_shift_ms, [shift])
    elif suffix == ".npz":
        from specbench.data.scores import read_npz  # its module imports kaldiio lazily: safe without it

        chosen = read_npz(path, lambda keys: select_utterances(keys, utterances))
        items = [(u, np.ascontiguousarray(m)) for u, m in chosen.items()]
        frame_shift_ms = check_frame_shift(path, frame_shift_ms, [_manifest_frame_shift(path)])
    else:
        raise DataError(f"{path}: `bench decoder` reads .parquet or .npz scores, not {suffix!r}. Fix: "
                        "convert them to one of those (`specbench decode` also reads .scp, .ark and .npy)")
    if not items:
        raise DataError(f"{path}: no held-out-voice utterances (ids with {' or '.join(HELD_OUT_SLUGS)}). "
                        "Fix: score the held-out-voice test utterances (`specbench run jobs/am_eval.toml`)")
    if not frame_shift_ms or frame_shift_ms <= 0:
        raise DataError(f"{path}: the scores carry no frame shift. Fix: pass --frame-shift-ms")
    return items, float(frame_shift_ms)


def _parquet_scores(path: Path, utterances: int) -> tuple[Items, float]:
    """The selected ok rows of a scores Parquet file (pyarrow only: no polars), and its frame shift (0.0
    when it has none)."""
    from specbench.data.scores import SCORES_FIX, read_parquet_table

    table = read_parquet_table(path)
    ids = table.column("utt_id").to_pylist()
    status = table.column("status").to_pylist() if "status" in table.column_names else [None] * len(ids)
    row_of = {u: i for i, (u, s) in enumerate(zip(ids, status)) if s in (None, "ok")}
    chosen = select_utterances(row_of, utterances)
    rows = [row_of[u] for u in chosen]
    frames = table.column("num_frames").to_pylist()
    classes = table.column("num_classes").to_pylist()
    loglikes = table.column("loglikes").combine_chunks()
    values = loglikes.values.to_numpy(zero_copy_only=False)
    offsets = loglikes.offsets.to_numpy()
    valid = loglikes.is_valid().to_pylist()
    items = []
    for utt_id, row in zip(chosen, rows):
        if frames[row] is None or classes[row] is None or not valid[row]:
            raise DataError(f"{path}: utterance {utt_id!r} has no value in num_frames, num_classes or "
                            f"loglikes although its status is ok. {SCORES_FIX}")
        shape = (int(frames[row]), int(classes[row]))
        flat = values[offsets[row]:offsets[row + 1]]
        if min(shape) < 0 or flat.size != shape[0] * shape[1]:
            raise DataError(f"{path}: utterance {utt_id!r}: column 'loglikes' holds {flat.size} scores, not "
                            f"num_frames x num_classes = {shape[0]} x {shape[1]}. {SCORES_FIX}")
        items.append((utt_id, np.ascontiguousarray(flat, dtype=np.float32).reshape(shape)))
    shift = 0.0
    if "frame_shift_ms" in table.column_names and rows:
        shift = float(table.column("frame_shift_ms")[rows[0]].as_py() or 0.0)
    return items, shift


def _manifest_frame_shift(npz: Path) -> float | None:
    """The frame shift recorded for `npz` in a `manifest.json` beside it (the GPU carry folder's)."""
    manifest = npz.parent / "manifest.json"
    if not manifest.is_file():
        return None
    try:
        scores = json.loads(manifest.read_text()).get("scores", {})
    except (OSError, ValueError, AttributeError):
        return None
    if scores.get("file") != npz.name:
        return None
    return scores.get("frame_shift_ms")
