"""The numpy twin of the GPU decoder (`TwinDecoder`) by hand on graphs of two or three states: the min-active
rule when the worst token lies exactly on the beam (the beam binds, as in Kaldi's GetCutoff and the CPU
backend), and which lanes of a wave overflow when the candidate-arc queue or the backpointer arena is too
small (only the lanes whose entries did not fit, each counting exactly what it lost; the kernel log counts
the candidate arcs expanded, at most the queue's capacity)."""

from __future__ import annotations

import numpy as np
import pytest

from specbench.decoder.cpu import CpuDecoder
from specbench.decoder.options import SearchOptions
from specbench.decoder.result import STATUS_OK, STATUS_OVERFLOW, DecodeStats
from specbench.decoder.twin import TwinDecoder
from specbench.wfst.graph import from_arrays

pytestmark = pytest.mark.unit


def _graph(final, arcs):
    """arcs: (src, dest, ilabel, olabel, weight)."""
    src, dest, ilabel, olabel, weight = (np.array(column) for column in zip(*arcs, strict=True))
    return from_arrays(0, np.array(final, np.float32), src=src, dest=dest, ilabel=ilabel, olabel=olabel,
                       weight=weight.astype(np.float32))


def _wave(decoder: TwinDecoder, items):
    """The results of one wave of `items` (no retry of the lanes that overflow)."""
    chunk = [(i, u, decoder._checked_costs(u, m)) for i, (u, m) in enumerate(items)]
    return [result for _, result in sorted(decoder._decode_wave(chunk, None), key=lambda pair: pair[0])]


def test_a_worst_token_exactly_on_the_beam_lets_the_beam_bind() -> None:
    # 0 --1:5--> 1 and 0 --2:6--> 2, each with a 1:0 self-loop, both final at 0; all weights 0.
    graph = _graph([np.inf, 0.0, 0.0], [(0, 1, 1, 5, 0.0), (0, 2, 2, 6, 0.0), (1, 1, 1, 0, 0.0),
                                         (2, 2, 1, 0, 0.0)])
    # frame 0: tokens in 1 (cost 0) and 2 (cost 2); frame 1: column 1 costs 0
    loglikes = np.array([[0.0, -2.0], [0.0, 0.0]], np.float32)
    options = SearchOptions(beam=2.0, min_active=1)
    # frame 0: one token, not more than min_active: nothing pruned, a min-active bind (cutoff +inf); both
    # candidates kept (2 created). Frame 1: two tokens > min_active, the worst (2.0) within best + beam = 2.0,
    # so the beam binds: cutoff 2.0, the token at 2.0 is not expanded (1 pruned), 1 created.
    want = DecodeStats(frames=2, tokens_created=3, tokens_pruned=1, min_active_binds=1, epsilon_iterations=2)
    for result in (TwinDecoder(graph, options).decode(loglikes, "u"), CpuDecoder(graph, options).decode(loglikes, "u")):
        assert (result.status, result.word_ids, result.word_end_frames) == (STATUS_OK, (5,), (1,))
        assert (result.graph_cost, result.acoustic_cost) == (0.0, 0.0)
        assert result.stats == want


def test_only_the_lane_whose_arcs_do_not_fit_overflows_by_the_arcs_it_lost() -> None:
    # 0 --1:5--> 1 and 0 --1:6--> 2, both final: a frame-0 token with 2 arcs in each lane
    graph = _graph([np.inf, 0.0, 0.0], [(0, 1, 1, 5, 0.0), (0, 2, 1, 6, 0.5)])
    items = [("a", np.zeros((1, 1), np.float32)), ("b", np.zeros((1, 1), np.float32))]
    # room for 2 candidate arcs a frame: lane 0 takes both slots, lane 1 loses its 2 arcs
    first, second = _wave(TwinDecoder(graph, SearchOptions(), max_lanes=2, arc_capacity=2), items)
    assert first.status == STATUS_OK and first.word_ids == (5,) and first.stats.queue_overflows == 0
    assert second.status == STATUS_OVERFLOW and second.stats.queue_overflows == 2
    # alone with room for 1 arc: 1 of its 2 arcs lost
    decoder = TwinDecoder(graph, SearchOptions(), arc_capacity=1)
    alone = decoder.decode(items[0][1], "a")
    assert alone.status == STATUS_OVERFLOW and alone.stats.queue_overflows == 1
    assert decoder.kernel_log.arcs == 1  # the candidate arcs the frame expanded: 1 slot of the 2 arcs
    # retried apart, both fit
    assert [r.word_ids for r in TwinDecoder(graph, SearchOptions(), max_lanes=2, arc_capacity=2).decode_batch(items)] \
        == [(5,), (5,)]


def test_lanes_are_admitted_only_while_the_arena_holds_all_their_frame_0_tokens() -> None:
    # 0 --eps:0--> 1 --1:5--> 2 (final): a lane starts with 2 tokens (state 0 and, by closure, state 1)
    graph = _graph([np.inf, np.inf, 0.0], [(0, 1, 0, 0, 0.0), (1, 2, 1, 5, 0.0)])
    items = [("a", np.zeros((1, 1), np.float32)), ("b", np.zeros((1, 1), np.float32))]
    # an arena of 3 entries: lane 0's 2 start tokens and its 1 frame-0 winner fit; lane 1's 2 start tokens
    # do not (3 // 2 = 1 lane admitted) and are counted as its overflow
    first, second = _wave(TwinDecoder(graph, SearchOptions(), max_lanes=2, arena_capacity=3), items)
    assert first.status == STATUS_OK and first.word_ids == (5,) and first.stats.queue_overflows == 0
    assert second.status == STATUS_OVERFLOW and second.stats.queue_overflows == 2
