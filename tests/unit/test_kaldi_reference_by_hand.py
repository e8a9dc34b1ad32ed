"""Kaldi's FasterDecoder behind `decoder.kaldi_reference` on tiny graphs worked out by hand: how the best path is
read back (the input label of every frame, word frames, graph and scaled acoustic costs when a word sits on an
epsilon arc that Kaldi cannot merge away), rows of scores that are not square, the 1-best-only refusals of
partial hypotheses, scores that are not finite, and a graph file that is not an FST."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import kaldifst
import numpy as np
import pytest

from specbench.decoder.kaldi_reference import KaldiFasterDecoder, decode_rows
from specbench.decoder.options import SearchOptions
from specbench.decoder.pruning import INT32_MAX
from specbench.decoder.result import STATUS_OK
from specbench.errors import DataError

pytestmark = pytest.mark.unit

INFINITE_BEAM = SearchOptions(beam=1e9, max_active=INT32_MAX, min_active=0)

# 0 -a:5-> 1 -eps:7-> 2 -b:6-> 3 (final 0.5). Word 7 sits on an epsilon arc between two arcs that carry words
# of their own, so Kaldi's best path keeps it as an arc with input label 0 (an arc of no frame).
EPS_WORD = "0 1 1 5 0.5\n1 2 0 7 0.25\n2 3 2 6 0\n3 0.5\n"
# column j is input label j + 1: frame 0 takes column 0 (a), frame 1 column 1 (b)
LOGLIKES = np.log(np.array([[0.5, 0.25, 0.25], [0.125, 0.75, 0.125]], dtype=np.float32))
ACOUSTIC = -math.log(0.5) - math.log(0.75)  # 0.693147 + 0.287682 = 0.980829
GRAPH = 0.5 + 0.25 + 0.0 + 0.5  # three arcs and the final weight = 1.25


def _graph(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "g.fst"
    assert kaldifst.StdConstFst(kaldifst.compile(text, keep_state_numbering=True)).write(str(path))
    return path


def test_a_word_on_an_epsilon_arc_takes_no_frame(tmp_path: Path) -> None:
    decoder = KaldiFasterDecoder(_graph(tmp_path, EPS_WORD), INFINITE_BEAM)
    path = decoder.linear_path(LOGLIKES, "u")
    assert path is not None
    assert path.ilabels == (1, 2) and path.num_frames == 2  # one input label per frame, the epsilon arc none
    assert path.word_ids == (5, 7, 6)
    assert path.word_start_frames == (0, 1, 1)  # emitting arcs before each word's arc: 0, 1, 1
    assert path.word_end_frames == (0, 0, 1)  # start[k + 1] - 1, and T - 1 = 1 for the last word
    assert path.graph_cost == pytest.approx(GRAPH)
    assert path.acoustic_cost == pytest.approx(ACOUSTIC, rel=1e-6)
    assert path.total_cost == pytest.approx(GRAPH + ACOUSTIC, rel=1e-6)
    result = decoder.decode(LOGLIKES, "u")
    assert (result.status, result.word_ids, result.num_frames, result.word_end_frames) == (
        STATUS_OK, (5, 7, 6), 2, (0, 0, 1))


def test_the_acoustic_cost_is_the_scaled_negated_log_likelihood(tmp_path: Path) -> None:
    decoder = KaldiFasterDecoder(_graph(tmp_path, EPS_WORD), replace(INFINITE_BEAM, acoustic_scale=0.5))
    result = decoder.decode(LOGLIKES, "s")
    assert result.graph_cost == pytest.approx(GRAPH)  # the graph cost is not scaled
    assert result.acoustic_cost == pytest.approx(0.5 * ACOUSTIC, rel=1e-6)  # 0.490415


def test_a_path_without_words_has_no_word_frames(tmp_path: Path) -> None:
    # 0 -a-> 1 (final 0), 1 loops on b: two frames a b, no output label anywhere
    decoder = KaldiFasterDecoder(_graph(tmp_path, "0 1 1 0 0.5\n1 1 2 0 0.25\n1 0\n"), INFINITE_BEAM)
    path = decoder.linear_path(LOGLIKES, "nw")
    assert path is not None and path.word_ids == () and path.word_start_frames == ()
    assert path.word_end_frames == () and path.ilabels == (1, 2)
    assert path.graph_cost == pytest.approx(0.75) and path.acoustic_cost == pytest.approx(ACOUSTIC, rel=1e-6)


def test_decode_rows_reshapes_frames_by_classes(tmp_path: Path) -> None:
    """2 frames of 3 classes, row-major: not the same as 3 frames of 2 classes."""
    rows = [{"utt_id": "r", "num_frames": 2, "num_classes": 3, "loglikes": LOGLIKES.ravel().tolist()}]
    out = decode_rows(str(_graph(tmp_path, EPS_WORD)), rows, INFINITE_BEAM)
    assert out == [{"utt_id": "r", "status": STATUS_OK, "num_frames": 2, "word_ids": [5, 7, 6],
                    "word_end_frames": [0, 0, 1], "graph_cost": pytest.approx(GRAPH),
                    "acoustic_cost": pytest.approx(ACOUSTIC, rel=1e-6)}]


def test_partial_hypotheses_are_refused_but_zero_means_none(tmp_path: Path) -> None:
    decoder = KaldiFasterDecoder(_graph(tmp_path, EPS_WORD), INFINITE_BEAM)
    assert decoder.decode(LOGLIKES, "z", partial_every=0).word_ids == (5, 7, 6)
    assert decoder.decode_batch([("z", LOGLIKES)], partial_every=0)[0].word_ids == (5, 7, 6)
    with pytest.raises(ValueError, match="1-best only"):
        decoder.decode(LOGLIKES, "p", partial_every=2)
    with pytest.raises(ValueError, match="1-best only"):
        decoder.decode_batch([("p", LOGLIKES)], partial_every=2)


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_linear_path_rejects_scores_that_are_not_finite(tmp_path: Path, bad: float) -> None:
    loglikes = LOGLIKES.copy()
    loglikes[1, 0] = bad
    with pytest.raises(ValueError, match=r"utterance 'bad'.*frame 1, column 0"):
        KaldiFasterDecoder(_graph(tmp_path, EPS_WORD), INFINITE_BEAM).linear_path(loglikes, "bad")


def test_a_file_that_is_not_an_fst_is_a_data_error(tmp_path: Path) -> None:
    path = tmp_path / "TLG.fst"
    path.write_bytes(b"not an fst at all")
    with pytest.raises(DataError, match=r"TLG.fst: kaldifst cannot read it.*Fix"):
        KaldiFasterDecoder(path, INFINITE_BEAM)
