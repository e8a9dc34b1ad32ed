"""Kaldi's C++ `FasterDecoder` (package kaldi-decoder) over a TLG: the reference CPU decoder.

Scores are `(T, P) float32` log-probabilities, column j for graph input label j + 1 (`DecodableCtc`); they
are multiplied by `acoustic_scale` before decoding (DecodableCtc reads them unscaled). Costs come back
split as Kaldi reports them: the graph cost of the best path and its acoustic cost (negated scaled
log-likelihood).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import kaldi_decoder
import kaldifst
import numpy as np

from specbench.errors import DataError


@dataclass(frozen=True)
class KaldiResult:
    """The 1-best of one utterance: word ids, costs, and the frame each word label was emitted at."""

    word_ids: tuple[int, ...]
    graph_cost: float
    acoustic_cost: float
    word_start_frames: tuple[int, ...]
    ilabels: tuple[int, ...]  # the input label of every frame (0 never appears: one per frame)

    @property
    def total_cost(self) -> float:
        return self.graph_cost + self.acoustic_cost


class KaldiFasterDecoder:
    """Load the graph once, decode many utterances."""

    def __init__(self, tlg_path: Path, beam: float = 15.0, max_active: int = 10000, min_active: int = 20,
                 acoustic_scale: float = 1.0) -> None:
        self.fst = kaldifst.StdConstFst.read(str(tlg_path))
        if self.fst is None:
            raise DataError(f"{tlg_path}: kaldifst cannot read it as a const-format OpenFst graph. Fix: give the "
                            "TLG.fst written by `specbench graph build JOB.toml`.")
        self.options = kaldi_decoder.FasterDecoderOptions(beam=beam, max_active=max_active, min_active=min_active)
        self.acoustic_scale = acoustic_scale

    def decode(self, loglikes: np.ndarray) -> KaldiResult | None:
        """Decode one utterance; None when no path reaches a final state."""
        scores = np.ascontiguousarray(loglikes * self.acoustic_scale, dtype=np.float32)
        decoder = kaldi_decoder.FasterDecoder(self.fst, self.options)
        decoder.decode(kaldi_decoder.DecodableCtc(scores))
        if not decoder.reached_final():
            return None
        ok, best = decoder.get_best_path()
        if not ok:
            return None
        return _linear_result(best)


def _linear_result(best: object) -> KaldiResult:
    """Walk the linear best-path lattice (its OpenFst text: `src dst ilabel olabel graph,acoustic` lines,
    the start state first; a final state's line holds its weight): ilabels per frame, words with the frame
    where their label sits, and the summed graph and acoustic costs."""
    arcs: dict[int, tuple[int, int, int, float, float]] = {}
    finals: dict[int, tuple[float, float]] = {}
    start = None
    for line in best.to_str().splitlines():  # type: ignore[attr-defined]
        parts = line.split()
        if not parts:
            continue
        src = int(parts[0])
        start = src if start is None else start
        if len(parts) >= 4:
            g, a = (parts[4].split(",") if len(parts) > 4 else ("0", "0"))
            arcs[src] = (int(parts[1]), int(parts[2]), int(parts[3]), float(g), float(a))
        else:
            g, a = (parts[1].split(",") if len(parts) > 1 else ("0", "0"))
            finals[src] = (float(g), float(a))
    state, frame = start, 0
    ilabels, words, starts = [], [], []
    graph = acoustic = 0.0
    while state in arcs:
        dst, ilabel, olabel, g, a = arcs.pop(state)
        graph, acoustic = graph + g, acoustic + a
        if olabel:
            words.append(olabel)
            starts.append(frame)
        if ilabel:
            ilabels.append(ilabel)
            frame += 1
        state = dst
    g, a = finals.get(state, (0.0, 0.0)) if state is not None else (0.0, 0.0)
    return KaldiResult(tuple(words), graph + g, acoustic + a, tuple(starts), tuple(ilabels))


def decode_rows(tlg_path: str, rows: list[dict], acoustic_scale: float, beam: float = 15.0,
                max_active: int = 10000) -> list[dict]:
    """Decode scores rows (`utt_id`, `num_frames`, `num_classes`, `loglikes`) with one loaded graph;
    returns `{utt_id, word_ids, graph_cost, acoustic_cost, word_start_frames, status}` per row.
    A plain function so that it can run as a Ray task over a shard of rows."""
    decoder = KaldiFasterDecoder(Path(tlg_path), beam=beam, max_active=max_active, acoustic_scale=acoustic_scale)
    out = []
    for row in rows:
        mat = np.asarray(row["loglikes"], dtype=np.float32).reshape(int(row["num_frames"]), int(row["num_classes"]))
        result = decoder.decode(mat)
        if result is None:
            out.append({"utt_id": row["utt_id"], "word_ids": [], "graph_cost": None, "acoustic_cost": None,
                        "word_start_frames": [], "status": "no path reached a final state"})
            continue
        out.append({"utt_id": row["utt_id"], "word_ids": list(result.word_ids), "graph_cost": result.graph_cost,
                    "acoustic_cost": result.acoustic_cost, "word_start_frames": list(result.word_start_frames),
                    "status": "ok"})
    return out
