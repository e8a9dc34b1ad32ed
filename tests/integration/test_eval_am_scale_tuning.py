"""The acoustic evaluation tunes its acoustic scale on devel and only reads test at that scale.

One set of scores, a devel reference and a test reference that disagree on which scale is right: eight frames
whose phones spell "stop" (log-likelihood 0 a frame) and, slightly worse, "play" (-0.025 a frame, 0.2 in all);
a unigram LM that prefers "play" by 0.1 in log10 (0.230 in cost). Kaldi's FasterDecoder (the decoder the job
uses, here run directly) says "play" at scale 0.5 (0.5 x 0.2 < 0.230) and "stop" at 2.0 (2.0 x 0.2 > 0.230).
The devel utterance says "play", the test utterance "stop": the devel-tuned scale is 0.5 (0.25 says "play"
too: a tie goes to the smaller scale, 0.25), and the test WER at that scale is 1, though test alone would pick
2.0 and a WER of 0. Real Ray tasks, a real composed TLG.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from specbench.acoustic.inference import scores_table
from specbench.config import EvalAmConfig
from specbench.config.jobs import DecodeSection
from specbench.decoder.kaldi_reference import decode_rows
from specbench.decoder.options import SearchOptions
from specbench.experiments.eval_am import _scored_metrics
from specbench.wfst.lexicon import PHONES
from specbench.wfst.symbols import SymbolTable

pytestmark = pytest.mark.integration


def _scores() -> np.ndarray:
    """(8, blank + phones): "stop" at 0 a frame, "play" at -0.025 a frame, everything else at -20."""
    column = {p: i + 1 for i, p in enumerate(PHONES)}
    mat = np.full((8, len(PHONES) + 1), -20.0, dtype=np.float32)
    for frame, (stop, play) in enumerate(zip("S S T T AA AA P P".split(), "P P P L L L EY EY".split())):
        mat[frame, column[play]] = -0.025
        mat[frame, column[stop]] = 0.0
    return mat


def test_the_acoustic_scale_is_the_devel_best_and_test_is_read_only_at_it(
        ray_cluster: object, tiny_tlg: Callable[..., Path]) -> None:
    graph = tiny_tlg("g", order=1)
    tlg, words = graph / "TLG.fst", SymbolTable.read(graph / "words.txt")
    mat = _scores()
    row = scores_table([("u", mat)]).to_pylist()
    said = {scale: [words.symbols[w] for w in decode_rows(str(tlg), row, SearchOptions(acoustic_scale=scale))[0]
                    ["word_ids"]] for scale in (0.25, 0.5, 2.0)}
    assert said == {0.25: ["play"], 0.5: ["play"], 2.0: ["stop"]}  # the premise, from the decoder alone

    devel = [{"utt_id": "d", "normalized_text": "play", "voice": "v"}]
    test = [{"utt_id": "t", "normalized_text": "stop", "voice": "v"}]
    config = EvalAmConfig(decode=DecodeSection(acoustic_scales=(2.0, 0.5, 0.25)))
    prons = {w: list(p) for w, p in (("jazz", [("JH", "AE", "Z")]), ("play", [("P", "L", "EY")]),
                                     ("stop", [("S", "T", "AA", "P")]))}
    metrics, tuning, hyps = _scored_metrics(tlg, devel, test, scores_table([("d", mat)]), scores_table([("t", mat)]),
                                            config, words, prons, {"play", "jazz", "stop"})
    assert tuning == {2.0: 1.0, 0.5: 0.0, 0.25: 0.0}
    assert (metrics["asr.acoustic_scale"], metrics["asr.devel_wer"], metrics["asr.wer"]) == (0.25, 0.0, 1.0)
    assert hyps == {"t": ["play"]}
    assert metrics["asr.wer.v"] == 1.0 and metrics["asr.wer_all_words_in_lm_text"] == 1.0
