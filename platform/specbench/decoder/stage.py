"""`DecoderStage`: decode a table of scores with one loaded graph per worker (a Ray actor, or a plain loop).

Input columns: `utt_id`, `num_frames`, `num_classes`, `loglikes` (row-major T x P). Output columns follow
DESIGN.md's decoder output: `id`, `status`, `word_ids`, `graph_cost`, `acoustic_cost`, `num_frames`,
`word_end_frames`. `backend` is `cpu` (ours) or `kaldi` (kaldi-decoder's FasterDecoder). One bad
utterance gets its reason in `status`; the others are decoded.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa

from specbench.decoder.cpu import CpuDecoder
from specbench.decoder.kaldi_reference import KaldiFasterDecoder
from specbench.stage import Resources, Stage
from specbench.wfst.graph import read_graph

OUTPUT_SCHEMA = pa.schema([
    ("id", pa.string()), ("status", pa.string()), ("word_ids", pa.list_(pa.int32())),
    ("graph_cost", pa.float64()), ("acoustic_cost", pa.float64()), ("num_frames", pa.int32()),
    ("word_end_frames", pa.list_(pa.int32())),
])
BACKENDS = ("cpu", "kaldi")


class DecoderStage(Stage):
    """Stateful: `setup()` loads the graph once."""

    stateful = True

    def __init__(self, graph_path: Path, backend: str = "cpu", beam: float = 15.0, max_active: int = 10000,
                 min_active: int = 20, acoustic_scale: float = 1.0) -> None:
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
        self.graph_path, self.backend = Path(graph_path), backend
        self.options = {"beam": beam, "max_active": max_active, "min_active": min_active,
                        "acoustic_scale": acoustic_scale}
        self.resources = Resources(num_cpus=1.0)
        self._decoder: CpuDecoder | KaldiFasterDecoder | None = None

    def setup(self) -> None:
        if self.backend == "cpu":
            self._decoder = CpuDecoder(read_graph(self.graph_path), **self.options)
        else:
            self._decoder = KaldiFasterDecoder(self.graph_path, **self.options)

    def decode_one(self, utt_id: str, loglikes: np.ndarray) -> dict:
        """One utterance to an output row (errors become the row's status)."""
        if self._decoder is None:
            self.setup()
        row = {"id": utt_id, "num_frames": len(loglikes), "word_ids": [], "word_end_frames": [],
               "graph_cost": None, "acoustic_cost": None}
        try:
            if isinstance(self._decoder, CpuDecoder):
                res = self._decoder.decode(loglikes, utt_id)
                row.update(status=res.status, word_ids=list(res.word_ids), word_end_frames=list(res.word_end_frames))
                if res.ok:
                    row.update(graph_cost=res.graph_cost, acoustic_cost=res.acoustic_cost)
            else:
                kres = self._decoder.decode(loglikes)  # type: ignore[union-attr]
                if kres is None:
                    row["status"] = "no final state reached"
                else:
                    ends = [s - 1 for s in kres.word_start_frames[1:]] + [len(loglikes) - 1]
                    row.update(status="ok", word_ids=list(kres.word_ids), word_end_frames=ends[: len(kres.word_ids)],
                               graph_cost=kres.graph_cost, acoustic_cost=kres.acoustic_cost)
        except Exception as err:  # noqa: BLE001 - one bad utterance never stops the batch
            row["status"] = f"{type(err).__name__}: {err}"
        return row

    def __call__(self, batch: pa.Table) -> pa.Table:
        rows = []
        for r in batch.to_pylist():
            try:
                mat = np.asarray(r["loglikes"], dtype=np.float32).reshape(int(r["num_frames"]), int(r["num_classes"]))
            except (TypeError, ValueError) as err:  # a malformed row fails alone
                rows.append({"id": r["utt_id"], "status": f"malformed scores: {err}", "word_ids": [],
                             "graph_cost": None, "acoustic_cost": None, "num_frames": r.get("num_frames"),
                             "word_end_frames": []})
                continue
            rows.append(self.decode_one(r["utt_id"], mat))
        return pa.Table.from_pylist(rows, schema=OUTPUT_SCHEMA)
