"""The lane decoder's host side (`lanes.LaneDecoder`, on the numpy twin's kernels) by hand: the acoustic
scale applied to the scores, the frame steps a refilled lane runs (one idle step between two utterances,
none after the last), a wave that stops taking utterances once its lattice records fill a quarter of their
capacity, no lattice on a failed result, and the default number of lattice pruning threads for the cores a
process may use."""

from __future__ import annotations

import numpy as np
import pytest

from specbench.decoder import lanes
from specbench.decoder.options import SearchOptions
from specbench.decoder.result import STATUS_OVERFLOW
from specbench.decoder.twin import TwinDecoder
from specbench.wfst.graph import from_arrays

pytestmark = pytest.mark.unit


def _one_word():
    """0 --1:5/0.5--> 1 (final 0.25) with a 1:0 self-loop of weight 0 on state 1."""
    return from_arrays(0, np.array([np.inf, 0.25], np.float32), src=np.array([0, 1]), dest=np.array([1, 1]),
                       ilabel=np.array([1, 1]), olabel=np.array([5, 0]), weight=np.array([0.5, 0.0], np.float32))


def test_the_acoustic_scale_multiplies_the_scores() -> None:
    loglikes = np.array([[-2.0], [-4.0]], np.float32)
    for scale, acoustic in ((1.0, 6.0), (0.5, 3.0), (0.25, 1.5)):  # -(scale * (-2 - 4))
        result = TwinDecoder(_one_word(), SearchOptions(acoustic_scale=scale)).decode(loglikes, "u")
        assert result.word_ids == (5,) and result.graph_cost == 0.75  # 0.5 + final 0.25
        assert result.acoustic_cost == acoustic


@pytest.mark.parametrize(("cores", "processes", "workers"), [
    (16, 1, 8),  # 16 - 2 = 14, at most 8
    (16, 2, 6),  # 16 // 2 - 2
    (16, 4, 2),  # 16 // 4 - 2
    (16, 8, 1),  # 16 // 8 - 2 = 0, at least 1
    (4, 1, 2),  # 4 - 2
])
def test_lattice_workers_share_the_cores_less_two_per_decoder(monkeypatch, cores: int, processes: int,
                                                               workers: int) -> None:
    monkeypatch.setattr(lanes.os, "sched_getaffinity", lambda pid: set(range(cores)), raising=False)
    assert lanes.default_lattice_workers(processes) == workers


def test_a_refilled_lane_idles_one_step_between_utterances() -> None:
    decoder = TwinDecoder(_one_word(), SearchOptions(), max_lanes=1)
    results = decoder.decode_batch([("short", np.zeros((2, 1), np.float32)), ("long", np.zeros((3, 1), np.float32))])
    assert [r.utt_id for r in results] == ["short", "long"] and all(r.word_ids == (5,) for r in results)
    # longest first: "long" runs steps 0-2, the lane idles at step 3, "short" runs steps 4-5: 6 frame steps,
    # 5 frames of utterances
    assert (decoder.frame_steps, decoder.lane_frames) == (6, 5)
    # "a" ends at step 15, just before the status point that refills the lane: "b" joins at step 16 in the
    # same wave (31 steps), not in a wave of its own (15 + 15)
    decoder.reset_counts()
    results = decoder.decode_batch([(name, np.zeros((15, 1), np.float32)) for name in ("a", "b")])
    assert all(r.word_ids == (5,) for r in results) and (decoder.frame_steps, decoder.lane_frames) == (31, 30)


def test_a_wave_takes_no_utterance_once_its_lattice_records_fill_a_quarter() -> None:
    options = SearchOptions(lattice_beam=1.0)
    items = [("a", np.zeros((20, 1), np.float32)), ("b", np.zeros((20, 1), np.float32))]
    # one record a frame (the emitting link); at the status point after step 15, 16 records: under a
    # quarter of 2^26, "b" joins the lane at step 21 (41 steps); not under a quarter of 40, "b" waits for a
    # second wave (20 + 20 steps)
    for capacity, steps in ((1 << 26, 41), (40, 40)):
        decoder = TwinDecoder(_one_word(), options, max_lanes=1, lattice_capacity=capacity, lattice_workers=1)
        results = decoder.decode_batch(items)
        assert decoder.frame_steps == steps and decoder.lane_frames == 40
        assert all(r.ok and r.lattice is not None and r.lattice.best_path()[0] == (5,) for r in results)


def test_a_failed_result_carries_no_lattice() -> None:
    # 0 --1:5--> 1 and 0 --1:6--> 2, both final: 2 candidate arcs at frame 0, room for 1
    graph = from_arrays(0, np.array([np.inf, 0.0, 0.0], np.float32), src=np.array([0, 0]), dest=np.array([1, 2]),
                        ilabel=np.array([1, 1]), olabel=np.array([5, 6]), weight=np.array([0.0, 0.5], np.float32))
    decoder = TwinDecoder(graph, SearchOptions(lattice_beam=1.0), arc_capacity=1, lattice_workers=1)
    result = decoder.decode(np.zeros((1, 1), np.float32), "u")
    assert result.status == STATUS_OVERFLOW and result.lattice is None
