"""Forced alignment of synthesized utterances: word start/end times from the acoustic model.

For each utterance a linear graph U accepts exactly its words (every lexicon pronunciation of each word,
the word's position on the first arc); T o U is decoded with Kaldi's `FasterDecoder` over the model's
log-probabilities. A word starts at the frame where its first phone is emitted and ends after the last
non-blank frame before the next word starts; the end of speech is the end of the last word. Times are in
seconds at the model's 40 ms frame shift (quantized to it; a unidirectional CTC model tends to emit a phone
a little after it is heard, so times lean late by up to a frame or two).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import kaldi_decoder
import kaldifst
import numpy as np

from specbench.decoder.kaldi_reference import best_path
from specbench.errors import DataError


@dataclass(frozen=True)
class WordTime:
    word: str
    start_s: float
    end_s: float


def utterance_graph_text(words: Sequence[str], prons: Mapping[str, Sequence[tuple[str, ...]]],
                         token_ids: Mapping[str, int]) -> str:
    """OpenFst text of U: phones in, word positions (1-based) out, one final state."""
    lines, next_state = [], len(words) + 1
    for i, word in enumerate(words):
        if word not in prons:
            raise DataError(f"word {word!r} has no pronunciation; rebuild the graph so the lexicon covers it")
        for pron in prons[word]:
            src = i
            for j, phone in enumerate(pron):
                last = j == len(pron) - 1
                dst = i + 1 if last else next_state
                next_state += 0 if last else 1
                lines.append(f"{src} {dst} {token_ids[phone]} {i + 1 if j == 0 else 0}")
                src = dst
    lines.append(str(len(words)))
    return "\n".join(lines) + "\n"


class ForcedAligner:
    """Holds the CTC topology; aligns one utterance at a time."""

    def __init__(self, ctc_topology_text: str, prons: Mapping[str, Sequence[tuple[str, ...]]],
                 token_ids: Mapping[str, int], frame_shift_s: float = 0.04, beam: float = 40.0) -> None:
        self.topo = kaldifst.compile(ctc_topology_text)
        kaldifst.arcsort(self.topo, sort_type="olabel")
        self.prons, self.token_ids, self.shift = prons, token_ids, frame_shift_s
        self.options = kaldi_decoder.FasterDecoderOptions(beam=beam, max_active=100000)

    def align(self, words: Sequence[str], loglikes: np.ndarray) -> list[WordTime]:
        """Word times for `words` under `loglikes (T, P)`; raises DataError when no alignment exists."""
        if not words:
            return []
        u = kaldifst.compile(utterance_graph_text(words, self.prons, self.token_ids))
        kaldifst.arcsort(u, sort_type="ilabel")
        graph = kaldifst.StdVectorFst(kaldifst.compose(self.topo, u))
        kaldifst.arcsort(graph, sort_type="ilabel")
        decoder = kaldi_decoder.FasterDecoder(graph, self.options)
        decoder.decode(kaldi_decoder.DecodableCtc(np.ascontiguousarray(loglikes, dtype=np.float32)))
        ok, best = decoder.get_best_path() if decoder.reached_final() else (False, None)
        if not ok:
            raise DataError(f"no alignment of {' '.join(words)!r} to {len(loglikes)} frames (audio too short "
                            "for the text, or the wrong text)")
        path = best_path(best)
        return self._times(words, path.word_start_frames, path.ilabels)

    def _times(self, words: Sequence[str], starts: Sequence[int], ilabels: Sequence[int]) -> list[WordTime]:
        blank = self.token_ids["<blk>"]
        bounds = [*starts, len(ilabels)]
        out = []
        for i, word in enumerate(words):
            frames = [t for t in range(bounds[i], bounds[i + 1]) if ilabels[t] != blank]
            end = (frames[-1] + 1) if frames else bounds[i] + 1
            out.append(WordTime(word, round(bounds[i] * self.shift, 3), round(end * self.shift, 3)))
        return out


def _aligner(graph_dir: str) -> ForcedAligner:
    """The forced aligner of a graph folder's tokens and lexicon."""
    from pathlib import Path

    from specbench.wfst.lexicon import PHONES, read_lexicon
    from specbench.wfst.symbols import SymbolTable
    from specbench.wfst.topology import ctc_topology_text

    graph = Path(graph_dir)
    tokens = SymbolTable.read(graph / "tokens.txt")
    return ForcedAligner(ctc_topology_text(tokens, PHONES), read_lexicon(graph / "lexicon.txt").prons, tokens.ids)


def _align_rows(rows: list[dict], aligner: ForcedAligner, loglikes_of: Callable[[dict], np.ndarray]) -> list[dict]:
    """Rows with `word_times` and `align_status` filled (ok rows only; a failure is reported in the row)."""
    out = []
    for row in rows:
        row = dict(row)
        if row.get("status") != "ok":
            out.append(row)
            continue
        try:
            times = aligner.align(row["normalized_text"].split(), loglikes_of(row))
            row["word_times"] = [{"word": t.word, "start_s": t.start_s, "end_s": t.end_s} for t in times]
            row["align_status"] = "ok"
        except Exception as err:  # noqa: BLE001 - reported per row
            row["word_times"] = None
            row["align_status"] = f"alignment failed: {str(err).strip() or 'no reason given'}"
        out.append(row)
    return out


def align_shard(rows: list[dict], corpus_root: str, checkpoint: str, graph_dir: str) -> list[dict]:
    """Fill `word_times` (and `align_status`) of manifest rows whose status is ok, scoring each WAV with
    the checkpoint; a row that cannot be aligned keeps null word times and gets the reason in
    `align_status`. Runs as a Ray task over a shard."""
    from pathlib import Path

    from specbench.acoustic.checkpoint import load_checkpoint
    from specbench.acoustic.inference import score_samples
    from specbench.data.synthesis import read_wav
    from specbench.wfst.lexicon import PHONES

    ckpt = load_checkpoint(Path(checkpoint), PHONES)
    return _align_rows(rows, _aligner(graph_dir),
                       lambda row: score_samples(ckpt, read_wav(Path(corpus_root) / row["audio_path"])[0]))


def align_scored_shard(rows: list[dict], loglikes: dict[str, np.ndarray], graph_dir: str) -> list[dict]:
    """`align_shard` from scores already computed (`utt_id` -> `(T, P)` log-probabilities, as the acoustic
    stage writes them), so an utterance that is decoded too is scored once; a row without scores is
    reported as not aligned."""
    return _align_rows(rows, _aligner(graph_dir), scores_lookup(loglikes))


def scores_lookup(loglikes: Mapping[str, np.ndarray]) -> Callable[[dict], np.ndarray]:
    """A row's scores by its `utt_id`; ValueError (reported in the row) when there are none."""

    def loglikes_of(row: dict) -> np.ndarray:
        if row["utt_id"] not in loglikes:
            raise ValueError("the acoustic model gave no scores for it")
        return loglikes[row["utt_id"]]

    return loglikes_of
