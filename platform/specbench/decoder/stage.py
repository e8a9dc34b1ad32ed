"""`DecoderStage`: decode a table of scores with one loaded graph per worker (a Ray actor, or a plain loop).

Input columns: `utt_id`, `num_frames`, `num_classes`, `loglikes` (row-major T x P), optionally
`frame_shift_ms`. Output columns follow DESIGN.md's decoder output: `id`, `status`, `word_ids`,
`graph_cost`, `acoustic_cost`, `num_frames`, `word_end_frames`, `partials` (a list of {frame, time_ms,
word_ids}, empty unless asked for), `lattice_arcs` and `lattice_path` (when lattices are written),
`tokens_created` and `beam_narrowings` (search counters; empty for the kaldi backend).

Backends: `cpu` (ours), `kaldi` (kaldi-decoder's FasterDecoder), `twin` (the GPU algorithm in numpy) and
`gpu`. The lane backends (`twin`, `gpu`) decode a whole batch together. `gpu` asks Ray for `gpu_fraction` of
a GPU per actor (0.25: four decoders share one GPU, the sequence parallelism that stands in for MPS); `auto`
is `gpu` where this process sees a CUDA device, else `cpu`. One bad utterance gets its reason in `status`;
the others are decoded.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute  # noqa: F401 - pa.compute

from specbench.decoder.result import DecodeResult
from specbench.stage import Resources, Stage
from specbench.wfst.graph import read_graph

PARTIAL_TYPE = pa.struct([("frame", pa.int32()), ("time_ms", pa.float32()), ("word_ids", pa.list_(pa.int32()))])
OUTPUT_SCHEMA = pa.schema([
    ("id", pa.string()), ("status", pa.string()), ("word_ids", pa.list_(pa.int32())),
    ("graph_cost", pa.float64()), ("acoustic_cost", pa.float64()), ("num_frames", pa.int32()),
    ("word_end_frames", pa.list_(pa.int32())), ("partials", pa.list_(PARTIAL_TYPE)),
    ("lattice_arcs", pa.int64()), ("lattice_path", pa.string()), ("tokens_created", pa.int64()),
    ("beam_narrowings", pa.int64()),
])
BACKENDS = ("cpu", "kaldi", "twin", "gpu", "auto")


def resolve_backend(backend: str) -> str:
    """`auto` -> `gpu` when a CUDA device is usable here, else `cpu`; others unchanged (checked)."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if backend != "auto":
        return backend
    from specbench.decoder.gpu import gpu_available

    return "gpu" if gpu_available() else "cpu"


class DecoderStage(Stage):
    """Stateful: `setup()` loads the graph once (and, for `gpu`, uploads it to the device)."""

    stateful = True

    def __init__(self, graph_path: Path, backend: str = "cpu", beam: float = 15.0, max_active: int = 10000,
                 min_active: int = 20, acoustic_scale: float = 1.0, lattice_beam: float | None = None,
                 lattice_dir: Path | None = None, partial_every_ms: float | None = None,
                 frame_shift_ms: float | None = None, gpu_fraction: float = 0.25, max_lanes: int = 256) -> None:
        self.graph_path, self.backend = Path(graph_path), resolve_backend(backend)
        if lattice_dir is not None and lattice_beam is None:
            lattice_beam = 8.0
        if self.backend == "kaldi" and (lattice_beam is not None or partial_every_ms):
            raise ValueError("the kaldi backend gives 1-best only: lattices and partials need cpu, twin or gpu")
        if partial_every_ms is not None and not partial_every_ms > 0:
            raise ValueError(f"partial_every_ms must be > 0, got {partial_every_ms!r}")
        self.options = {"beam": beam, "max_active": max_active, "min_active": min_active,
                        "acoustic_scale": acoustic_scale}
        self.lattice_beam, self.lattice_dir = lattice_beam, Path(lattice_dir) if lattice_dir else None
        self.partial_every_ms, self.frame_shift_ms = partial_every_ms, frame_shift_ms
        self.max_lanes = max_lanes
        self.resources = Resources(num_cpus=1.0, num_gpus=gpu_fraction if self.backend == "gpu" else 0.0)
        self._decoder = None

    def setup(self) -> None:
        if self.backend == "kaldi":
            from specbench.decoder.kaldi_reference import KaldiFasterDecoder

            self._decoder = KaldiFasterDecoder(self.graph_path, **self.options)
            return
        graph = read_graph(self.graph_path)
        if self.backend == "cpu":
            from specbench.decoder.cpu import CpuDecoder

            self._decoder = CpuDecoder(graph, lattice_beam=self.lattice_beam, **self.options)
        elif self.backend == "twin":
            from specbench.decoder.twin import TwinDecoder

            self._decoder = TwinDecoder(graph, lattice_beam=self.lattice_beam, max_lanes=self.max_lanes,
                                        **self.options)
        else:
            from specbench.decoder.gpu import GpuDecoder

            self._decoder = GpuDecoder(graph, lattice_beam=self.lattice_beam, max_lanes=self.max_lanes,
                                       **self.options)

    # ---- decoding -------------------------------------------------------------------------------------

    def _partial_every(self, shift_ms: float | None) -> int | None:
        """The partial interval in frames (at least one frame)."""
        if not self.partial_every_ms:
            return None
        if not shift_ms:
            raise ValueError("partials need the frame shift: scores without one need --frame-shift-ms")
        return max(1, round(self.partial_every_ms / shift_ms))

    def decode_many(self, items: list[tuple[str, np.ndarray, float | None]]) -> list[dict]:
        """(utt_id, loglikes (T, P), frame shift ms or None) -> output rows, in order."""
        if self._decoder is None:
            self.setup()
        shifts = [shift or self.frame_shift_ms for _, _, shift in items]
        if self.backend in ("twin", "gpu"):
            try:
                every = self._partial_every(shifts[0] if shifts else None)
                results = self._decoder.decode_batch([(u, m) for u, m, _ in items], every)
            except ValueError as err:
                return [_failed_row(u, m, f"{type(err).__name__}: {err}") for u, m, _ in items]
            return [self._row(r, s) for r, s in zip(results, shifts, strict=True)]
        return [self._one(utt_id, mat, shift) for (utt_id, mat, _), shift in zip(items, shifts, strict=True)]

    def decode_one(self, utt_id: str, loglikes: np.ndarray, frame_shift_ms: float | None = None) -> dict:
        """One utterance to an output row (errors become the row's status)."""
        return self.decode_many([(utt_id, loglikes, frame_shift_ms)])[0]

    def _one(self, utt_id: str, mat: np.ndarray, shift: float | None) -> dict:
        try:
            if self.backend == "kaldi":
                return _kaldi_row(utt_id, mat, self._decoder.decode(mat))
            return self._row(self._decoder.decode(mat, utt_id, self._partial_every(shift)), shift)
        except Exception as err:  # noqa: BLE001 - one bad utterance never stops the batch
            return _failed_row(utt_id, mat, f"{type(err).__name__}: {err}")

    def _row(self, res: DecodeResult, shift: float | None) -> dict:
        row = {"id": res.utt_id, "status": res.status, "num_frames": res.num_frames,
               "word_ids": list(res.word_ids), "word_end_frames": list(res.word_end_frames),
               "graph_cost": res.graph_cost if res.ok else None,
               "acoustic_cost": res.acoustic_cost if res.ok else None,
               "partials": [{"frame": p.frame, "time_ms": (p.frame + 1) * shift if shift else None,
                             "word_ids": list(p.word_ids)} for p in res.partials],
               "lattice_arcs": res.lattice.num_arcs if res.lattice is not None else None, "lattice_path": None,
               "tokens_created": res.stats.tokens_created, "beam_narrowings": res.stats.beam_narrowings}
        if res.lattice is not None and self.lattice_dir is not None:
            path = self.lattice_dir / f"{_safe_name(res.utt_id)}.fst"
            res.lattice.write(path)
            row["lattice_path"] = str(path)
        return row

    def metrics(self, out: pa.Table, seconds: float) -> dict[str, float]:
        """Utterances and frames decoded, frames per second, mean created tokens per frame, beam narrowings."""
        frames = float(pa.compute.sum(out.column("num_frames")).as_py() or 0)
        tokens = float(pa.compute.sum(out.column("tokens_created")).as_py() or 0)
        values = {"utterances_decoded": float(out.num_rows), "frames_decoded": frames,
                  "beam_narrowings": float(pa.compute.sum(out.column("beam_narrowings")).as_py() or 0)}
        if frames:
            values["active_tokens"] = tokens / frames
            if seconds > 0:
                values["frames_per_second"] = frames / seconds
        return values

    def __call__(self, batch: pa.Table) -> pa.Table:
        rows: list[dict | None] = []
        items: list[tuple[str, np.ndarray, float | None]] = []
        for r in batch.to_pylist():
            try:
                mat = np.asarray(r["loglikes"], dtype=np.float32).reshape(int(r["num_frames"]), int(r["num_classes"]))
            except (TypeError, ValueError) as err:  # a malformed row fails alone
                rows.append({"id": r["utt_id"], "status": f"malformed scores: {err}", "num_frames": r.get("num_frames"),
                             "word_ids": [], "word_end_frames": [], "partials": []})
                continue
            rows.append(None)
            items.append((r["utt_id"], mat, r.get("frame_shift_ms")))
        decoded = iter(self.decode_many(items))
        return pa.Table.from_pylist([row if row is not None else next(decoded) for row in rows],
                                    schema=OUTPUT_SCHEMA)


def _safe_name(utt_id: str) -> str:
    """A file name for an utterance id (path separators and odd characters replaced)."""
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in utt_id) or "_"


def _failed_row(utt_id: str, mat: np.ndarray, status: str) -> dict:
    return {"id": utt_id, "status": status, "num_frames": len(mat), "word_ids": [], "word_end_frames": [],
            "graph_cost": None, "acoustic_cost": None, "partials": []}


def _kaldi_row(utt_id: str, mat: np.ndarray, kres) -> dict:
    if kres is None:
        return _failed_row(utt_id, mat, "no final state reached")
    ends = [s - 1 for s in kres.word_start_frames[1:]] + [len(mat) - 1]
    return {"id": utt_id, "status": "ok", "num_frames": len(mat), "word_ids": list(kres.word_ids),
            "word_end_frames": ends[: len(kres.word_ids)], "graph_cost": kres.graph_cost,
            "acoustic_cost": kres.acoustic_cost, "partials": []}
