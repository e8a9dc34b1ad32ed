"""Kaldi's C++ `FasterDecoder` (package kaldi-decoder) over a TLG: the reference CPU decoder, a backend like the
others (`decode` -> `DecodeResult`).

Scores are `(T, P) float32` log-probabilities, column j for graph input label j + 1 (`DecodableCtc`); they
are multiplied by `options.acoustic_scale` before decoding (DecodableCtc reads them unscaled). Costs come
back split as Kaldi reports them: the graph cost of the best path and its acoustic cost (negated scaled
log-likelihood). Kaldi gives the 1-best only: no lattices, no partial hypotheses.

`best_path` reads any FasterDecoder's best path (a linear lattice) as a `LinearPath`: the input label of
every frame and the frame at which each word label sits (forced alignment uses it too).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import kaldi_decoder
import kaldifst
import numpy as np

from specbench.decoder.inputs import checked_scores
from specbench.decoder.options import DEFAULT_OPTIONS, SearchOptions, require_options
from specbench.decoder.result import (
    STATUS_EMPTY,
    STATUS_NO_FINAL,
    STATUS_OK,
    DecodeResult,
    DecodeStats,
    decode_each,
)
from specbench.errors import DataError
from specbench.wfst.graph import read_graph


@dataclass(frozen=True)
class LinearPath:
    """A best path read from Kaldi's linear lattice.

    word_ids: the output labels along the path, epsilons left out.
    graph_cost, acoustic_cost: the summed graph and (scaled) acoustic costs, final weight included.
    word_start_frames: per word, the frame its label sits at (the number of emitting arcs before its arc).
        Kaldi's RemoveEpsLocal may have merged the epsilon arc of a label into the emitting arc before it,
        which puts the label one frame earlier than on the graph's path.
    ilabels: the input label of every frame (T entries, never 0).
    """

    word_ids: tuple[int, ...]
    graph_cost: float
    acoustic_cost: float
    word_start_frames: tuple[int, ...]
    ilabels: tuple[int, ...]

    @property
    def total_cost(self) -> float:
        return self.graph_cost + self.acoustic_cost

    @property
    def num_frames(self) -> int:
        return len(self.ilabels)

    @property
    def word_end_frames(self) -> tuple[int, ...]:
        """DecodeResult's word end frames: end[k] = start[k + 1] - 1, and T - 1 for the last word."""
        return tuple(start - 1 for start in self.word_start_frames[1:]) + (self.num_frames - 1,) * bool(
            self.word_ids)

    def result(self, utt_id: str) -> DecodeResult:
        """The DecodeResult (status ok) of this path."""
        return DecodeResult(utt_id=utt_id, status=STATUS_OK, word_ids=self.word_ids, graph_cost=self.graph_cost,
                            acoustic_cost=self.acoustic_cost, num_frames=self.num_frames,
                            word_end_frames=self.word_end_frames, stats=DecodeStats(frames=self.num_frames))


class KaldiFasterDecoder:
    """Load the graph once, decode many utterances (1-best only).

    graph_path: an OpenFst const-format graph file (kaldifst reads it). options: the search settings
    (`SearchOptions`); lattice_beam and partial_every must be unset.
    """

    def __init__(self, graph_path: Path, options: SearchOptions = DEFAULT_OPTIONS) -> None:
        self.options = require_options("KaldiFasterDecoder", options)
        options.require_one_best("kaldi")
        self.fst = kaldifst.StdConstFst.read(str(graph_path))
        if self.fst is None:
            raise DataError(f"{graph_path}: kaldifst cannot read it as a const-format OpenFst graph. Fix: give "
                            "the TLG.fst written by `specbench graph build JOB.toml`.")
        self.kaldi_options = kaldi_decoder.FasterDecoderOptions(
            beam=options.beam, max_active=options.max_active, min_active=options.min_active,
            beam_delta=options.beam_delta)
        self.acoustic_scale = float(options.acoustic_scale)
        # DecodableCtc reads column label - 1 without a bounds check: scores narrower than the graph's largest
        # input label would be read past their row (another frame's scores, or past the array).
        self.max_ilabel = read_graph(graph_path).max_ilabel

    def linear_path(self, loglikes: np.ndarray, utt_id: str = "") -> LinearPath | None:
        """The best path of loglikes (T, P) float32 as a LinearPath; None when no path reaches a final
        state. Scores that `inputs.checked_scores` rejects raise ValueError naming the utterance."""
        return self._search(checked_scores(str(utt_id), loglikes, self.max_ilabel))

    def decode(self, loglikes: np.ndarray, utt_id: str = "", partial_every: int | None = None) -> DecodeResult:
        """Decode one utterance: loglikes (T, P) float32; T == 0 gives "empty utterance", no path to a final
        state "no final state reached"; fewer columns than the graph's largest input label raise ValueError
        (as in every backend). `partial_every` must be None or 0 (Kaldi gives the 1-best only)."""
        if partial_every:
            self.options.require_one_best("kaldi", partials=True)
        utt_id = str(utt_id)
        scores = checked_scores(utt_id, loglikes, self.max_ilabel)
        frames = scores.shape[0]
        if frames == 0:
            return DecodeResult.failed(utt_id, STATUS_EMPTY, 0, DecodeStats())
        path = self._search(scores)
        if path is None:
            return DecodeResult.failed(utt_id, STATUS_NO_FINAL, frames, DecodeStats(frames=frames))
        return path.result(utt_id)

    def decode_batch(self, items: Sequence[tuple[str, np.ndarray]],
                     partial_every: int | None = None) -> list[DecodeResult]:
        """(utt_id, loglikes (T, P) float32) items, one after the other: one DecodeResult each, in order; an
        item with bad scores gets a failed result ("bad scores: ...") and never stops the others."""
        if partial_every:
            self.options.require_one_best("kaldi", partials=True)
        return decode_each(self.decode, items)

    def _search(self, scores: np.ndarray) -> LinearPath | None:
        """Kaldi's FasterDecoder over checked (T, P) float32 scores, scaled here by the acoustic scale."""
        scaled = np.ascontiguousarray(scores * self.acoustic_scale, dtype=np.float32)
        decoder = kaldi_decoder.FasterDecoder(self.fst, self.kaldi_options)
        decoder.decode(kaldi_decoder.DecodableCtc(scaled))
        if not decoder.reached_final():
            return None
        ok, best = decoder.get_best_path()
        return best_path(best) if ok else None


def best_path(lattice: object) -> LinearPath:
    """Walk a FasterDecoder's linear best-path lattice (`get_best_path()`'s FST; its OpenFst text: `src dst
    ilabel olabel graph,acoustic` lines, the start state first; a final state's line holds its weight): the
    ilabel of every frame, the words with the frame where their label sits, and the summed graph and
    acoustic costs."""
    arcs: dict[int, tuple[int, int, int, float, float]] = {}
    finals: dict[int, tuple[float, float]] = {}
    start = None
    for line in lattice.to_str().splitlines():  # type: ignore[attr-defined]
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
    return LinearPath(tuple(words), graph + g, acoustic + a, tuple(starts), tuple(ilabels))


def decode_rows(tlg_path: str, rows: list[dict], options: SearchOptions) -> list[dict]:
    """Decode scores rows (`utt_id`, `num_frames`, `num_classes`, `loglikes` row-major T x P float32) with
    one loaded graph; returns `DecodeResult.output_row("utt_id")` per row, in order (`utt_id`, `status`,
    `word_ids`, `graph_cost`, `acoustic_cost` (None unless ok), `num_frames`, `word_end_frames`). A plain
    function so that it can run as a Ray task over a shard of rows."""
    decoder = KaldiFasterDecoder(Path(tlg_path), options)
    items = [(row["utt_id"], np.asarray(row["loglikes"], dtype=np.float32).reshape(
        int(row["num_frames"]), int(row["num_classes"]))) for row in rows]
    return [result.output_row("utt_id") for result in decoder.decode_batch(items)]
