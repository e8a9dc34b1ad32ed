"""`specbench decode`: decode a scores file with a graph and write one JSON line (or Parquet row) per
utterance with DESIGN.md's decoder-output fields. Bad utterances are reported in their rows and counted;
they never stop the others."""

from __future__ import annotations

import json
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from tqdm import tqdm

from specbench.decoder.scores_input import read_scores
from specbench.decoder.stage import OUTPUT_SCHEMA, DecoderStage
from specbench.errors import DataError
from specbench.wfst.symbols import SymbolTable


def decode_file(graph: Path, scores: Path, out: Path, backend: str = "cpu", beam: float = 15.0,
                max_active: int = 10000, acoustic_scale: float = 1.0, frame_shift_ms: float | None = None,
                words: Path | None = None) -> dict[str, Any]:
    """Decode every utterance of `scores`; returns a summary (counts, failures by reason, frames/s)."""
    for what, path in (("graph", graph), ("words", words)):
        if path is not None and not Path(path).is_file():
            raise DataError(f"--{what} {path}: no such file")
    stage = DecoderStage(graph, backend, beam=beam, max_active=max_active, acoustic_scale=acoustic_scale)
    stage.setup()
    symbols = SymbolTable.read(words).symbols if words else None
    rows, frames, start = [], 0, time.perf_counter()
    for utt_id, mat, _ in tqdm(read_scores(scores, frame_shift_ms), desc="decoding", unit="utt",
                               file=sys.stderr, mininterval=2.0):
        row = stage.decode_one(utt_id, mat)
        if symbols is not None:
            row["words"] = [symbols[w] if 0 <= w < len(symbols) else f"<{w}>" for w in row["word_ids"]]
        rows.append(row)
        frames += len(mat)
    seconds = time.perf_counter() - start
    if not rows:
        raise DataError(f"{scores}: no utterances to decode")
    _write(rows, out)
    failures = Counter(r["status"] for r in rows if r["status"] != "ok")
    return {"utterances": len(rows), "failed": sum(failures.values()), "failures": dict(failures),
            "frames": frames, "frames_per_second": frames / seconds if seconds > 0 else 0.0, "out": str(out)}


def _write(rows: list[dict], out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    if out.suffix == ".parquet":
        schema = OUTPUT_SCHEMA.append(pa.field("words", pa.list_(pa.string()))) if "words" in rows[0] else OUTPUT_SCHEMA
        pq.write_table(pa.Table.from_pylist(rows, schema=schema), tmp)
    else:
        with tmp.open("w", encoding="utf-8") as fh:
            for row in rows:
                fh.write(json.dumps(row) + "\n")
    tmp.replace(out)
