"""`DecodeResult` and `DecodeStats` by hand: the checks every result passes on construction (one end frame
per word, finite costs when ok, a non-empty status, non-negative int counters), the failed results
(`failed`, `bad_scores`), the output row's null costs without a hypothesis, and `decode_each`, which turns
a rejected utterance into its own failed result and goes on with the others."""

from __future__ import annotations

import math

import numpy as np
import pytest

from specbench.decoder.cpu import CpuDecoder
from specbench.decoder.options import SearchOptions
from specbench.decoder.result import (
    STATUS_BAD_SCORES,
    STATUS_NO_FINAL,
    STATUS_OK,
    DecodeResult,
    DecodeStats,
    decode_each,
)
from specbench.wfst.graph import from_arrays

pytestmark = pytest.mark.unit


def _ok(**changes) -> DecodeResult:
    fields = {"utt_id": "u", "status": STATUS_OK, "word_ids": (4, 9), "graph_cost": 1.5, "acoustic_cost": 2.25,
              "num_frames": 3, "word_end_frames": (0, 2)}
    fields.update(changes)
    return DecodeResult(**fields)


def test_a_result_needs_one_end_frame_per_word() -> None:
    assert _ok().word_end_frames == (0, 2)
    with pytest.raises(ValueError, match="word_end_frames has 1 entries for 2 words"):
        _ok(word_end_frames=(2,))


def test_an_ok_result_needs_finite_costs_and_a_status() -> None:
    assert _ok().total_cost == 3.75  # 1.5 + 2.25
    with pytest.raises(ValueError, match="needs finite costs"):
        _ok(graph_cost=math.inf)
    with pytest.raises(ValueError, match="needs finite costs"):
        _ok(acoustic_cost=math.nan)
    with pytest.raises(ValueError, match="status must be a non-empty string"):
        _ok(status="")


def test_num_frames_may_be_zero_but_not_negative() -> None:
    assert DecodeResult.failed("e", "empty utterance", 0, DecodeStats()).num_frames == 0
    with pytest.raises(ValueError, match="num_frames must be >= 0"):
        _ok(num_frames=-1)


@pytest.mark.parametrize("value", [-1, True, 2.0, None])
def test_stats_are_non_negative_ints_and_not_bools(value) -> None:
    assert DecodeStats(frames=0, tokens_created=7).tokens_created == 7
    with pytest.raises(ValueError, match="DecodeStats.frames must be a non-negative int"):
        DecodeStats(frames=value)


def test_a_failed_result_needs_a_reason_and_writes_null_costs() -> None:
    with pytest.raises(ValueError, match="needs a reason"):
        DecodeResult.failed("u", STATUS_OK, 3, DecodeStats())
    failed = DecodeResult.failed("u", STATUS_NO_FINAL, 3, DecodeStats(frames=3))
    assert not failed.ok and failed.total_cost == math.inf
    assert failed.output_row("utt") == {"utt": "u", "status": STATUS_NO_FINAL, "num_frames": 3, "word_ids": [],
                                        "word_end_frames": [], "graph_cost": None, "acoustic_cost": None}
    assert _ok().output_row() == {"id": "u", "status": "ok", "num_frames": 3, "word_ids": [4, 9],
                                  "word_end_frames": [0, 2], "graph_cost": 1.5, "acoustic_cost": 2.25}


def test_bad_scores_give_the_reason_in_words() -> None:
    bad = DecodeResult.bad_scores(12, ValueError("utterance '12' has NaN at frame 3"))
    assert bad.utt_id == "12" and bad.status == f"{STATUS_BAD_SCORES}: utterance '12' has NaN at frame 3"
    assert bad.num_frames == 0 and bad.word_ids == () and bad.stats == DecodeStats()


def test_decode_each_fails_a_rejected_utterance_alone() -> None:
    # one state-0 --1:7/0.5--> state 1 (final 0.25) arc: one frame, word 7, graph cost 0.75
    graph = from_arrays(0, np.array([np.inf, 0.25], np.float32), src=np.array([0]), dest=np.array([1]),
                        ilabel=np.array([1]), olabel=np.array([7]), weight=np.array([0.5]))
    decoder = CpuDecoder(graph, SearchOptions())
    good = np.array([[-1.0]], np.float32)
    items = [("a", good), ("nan", np.array([[np.nan]], np.float32)), ("b", good)]
    results = decode_each(decoder.decode, items)
    assert [r.utt_id for r in results] == ["a", "nan", "b"]
    assert results[0].word_ids == (7,) and results[0].graph_cost == pytest.approx(0.75)
    assert results[0].acoustic_cost == pytest.approx(1.0) and results[2] == DecodeResult(**{
        **results[0].__dict__, "utt_id": "b"})
    assert results[1].status.startswith(f"{STATUS_BAD_SCORES}: utterance 'nan'") and not results[1].ok
