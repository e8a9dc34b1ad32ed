"""`specbench decode`: decode a scores file with a graph and write one JSON line (or Parquet row) per
utterance with DESIGN.md's decoder-output fields (and partial hypotheses and lattices when asked for). The
`DecoderStage` builds the backend by name (`decoder.backends.make_decoder`) with one `SearchOptions` from the
command-line options. Bad utterances are reported in their rows and counted; they never stop the others. The
lane backends (`twin`, `gpu`) decode `LANE_CHUNK` utterances together."""

from __future__ import annotations

import itertools
import json
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from tqdm import tqdm

from specbench.data.scores import read_scores
from specbench.decoder.backends import LANE_BACKENDS
from specbench.decoder.stage import OUTPUT_SCHEMA, PARTIAL_TYPE, DecoderStage
from specbench.errors import DataError
from specbench.wfst.symbols import SymbolTable

LANE_CHUNK = 256


def decode_file(graph: Path, scores: Path, out: Path, backend: str = "cpu", beam: float = 15.0,
                max_active: int = 10000, acoustic_scale: float = 1.0, frame_shift_ms: float | None = None,
                words: Path | None = None, lattice_beam: float | None = None, lattice_dir: Path | None = None,
                partial_every_ms: float | None = None, min_active: int = 20) -> dict[str, Any]:
    """Decode every utterance of `scores`; returns a summary (counts, failures by reason, frames/s)."""
    for what, path in (("graph", graph), ("words", words)):
        if path is not None and not Path(path).is_file():
            raise DataError(f"--{what} {path}: no such file")
    try:
        stage = DecoderStage(graph, backend, beam=beam, max_active=max_active, min_active=min_active,
                             acoustic_scale=acoustic_scale, lattice_beam=lattice_beam, lattice_dir=lattice_dir,
                             partial_every_ms=partial_every_ms, frame_shift_ms=frame_shift_ms)
    except ValueError as err:
        raise DataError(f"decode options: {err}") from err
    stage.setup()
    symbols = SymbolTable.read(words).symbols if words else None
    chunk = LANE_CHUNK if stage.backend in LANE_BACKENDS else 1
    rows, frames, start = [], 0, time.perf_counter()
    stream = iter(tqdm(read_scores(scores, frame_shift_ms), desc=f"decoding ({stage.backend})", unit="utt",
                       file=sys.stderr, mininterval=2.0))
    while batch := list(itertools.islice(stream, chunk)):
        for row in stage.decode_many(batch):
            if symbols is not None:
                row["words"] = _spell(row["word_ids"], symbols)
                for partial in row["partials"]:
                    partial["words"] = _spell(partial["word_ids"], symbols)
            rows.append(row)
        frames += sum(len(mat) for _, mat, _ in batch)
    seconds = time.perf_counter() - start
    if not rows:
        raise DataError(f"{scores}: no utterances to decode")
    _write(rows, out, symbols is not None)
    failures = Counter(r["status"] for r in rows if r["status"] != "ok")
    summary = {"utterances": len(rows), "failed": sum(failures.values()), "failures": dict(failures),
               "frames": frames, "frames_per_second": frames / seconds if seconds > 0 else 0.0,
               "backend": stage.backend, "out": str(out)}
    if lattice_dir is not None:
        summary["lattice_dir"] = str(lattice_dir)
        arcs = sum(r["lattice_arcs"] or 0 for r in rows)
        summary["lattice_density"] = arcs / frames if frames else 0.0
    return summary


def _spell(word_ids: list[int], symbols: list[str]) -> list[str]:
    return [symbols[w] if 0 <= w < len(symbols) else f"<{w}>" for w in word_ids]


def _write(rows: list[dict], out: Path, with_words: bool) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    if out.suffix == ".parquet":
        schema = OUTPUT_SCHEMA
        if with_words:
            partial = pa.struct(list(PARTIAL_TYPE) + [pa.field("words", pa.list_(pa.string()))])
            schema = schema.set(schema.get_field_index("partials"), pa.field("partials", pa.list_(partial)))
            schema = schema.append(pa.field("words", pa.list_(pa.string())))
        pq.write_table(pa.Table.from_pylist(rows, schema=schema), tmp)
    else:
        with tmp.open("w", encoding="utf-8") as fh:
            for row in rows:
                fh.write(json.dumps(row) + "\n")
    tmp.replace(out)
