"""Word and arc posteriors (`specbench.decoder.word_confidence`) on tiny lattices whose path probabilities are
worked out by hand: a competing path that repeats the 1-best word three times inside its window (it counts once,
not once per copy), the posterior scale applied to graph, acoustic and final costs alike, paths whose costs differ
by far more than exp() can hold, a single path (every arc posterior exactly 1), a lattice of one node and no
arcs, and the statuses of an empty lattice, of a final node the start cannot reach, and of an infinite scale."""

from __future__ import annotations

import math

import numpy as np
import pytest

from specbench.decoder import word_confidence as wc
from specbench.decoder.lattice import WordLattice

pytestmark = pytest.mark.unit

LN2, LN4 = math.log(2.0), math.log(4.0)


def lattice(node_frame: list[int], finals: dict[int, float], arcs: list[tuple[int, int, int, float, float]],
            num_frames: int) -> WordLattice:
    """arcs: (src, dst, word, graph cost, acoustic cost), already sorted by src, dst; every arc emits."""
    final_cost = np.full(len(node_frame), np.inf)
    for node, cost in finals.items():
        final_cost[node] = cost
    src, dst, olabel, graph, acoustic = (list(x) for x in zip(*arcs)) if arcs else ([], [], [], [], [])
    return WordLattice(num_frames=num_frames, node_frame=np.array(node_frame, np.int32),
                       node_state=np.arange(len(node_frame), dtype=np.int32), final_cost=final_cost,
                       src=np.array(src, np.int32), dst=np.array(dst, np.int32), ilabel=np.ones(len(arcs), np.int64),
                       olabel=np.array(olabel, np.int64), graph_cost=np.array(graph, np.float64),
                       acoustic_cost=np.array(acoustic, np.float64))


def three_paths() -> WordLattice:
    """Three paths over 3 frames from node 0:
    A (the 1-best, cost 0): word 5 then nothing, nodes 0 1 2 7;
    B (cost ln 2, half graph, half acoustic): word 5 three times, nodes 0 3 4 7;
    C (cost ln 4, all of it the final weight of node 8): word 6 then nothing, nodes 0 5 6 8."""
    return lattice([0, 1, 2, 1, 2, 1, 2, 3, 3], {7: 0.0, 8: LN4}, [
        (0, 1, 5, 0.0, 0.0), (0, 3, 5, LN2 / 2, LN2 / 2), (0, 5, 6, 0.0, 0.0),
        (1, 2, 0, 0.0, 0.0), (2, 7, 0, 0.0, 0.0),
        (3, 4, 5, 0.0, 0.0), (4, 7, 5, 0.0, 0.0),
        (5, 6, 0, 0.0, 0.0), (6, 8, 0, 0.0, 0.0),
    ], num_frames=3)


def test_a_path_repeating_the_word_three_times_counts_once() -> None:
    # weights exp(-cost): A 1, B 1/2, C 1/4; total 7/4: P(A) = 4/7, P(B) = 2/7, P(C) = 1/7.
    # The only 1-best word (5 at frame 0) has the window [0, 4): A and B emit 5 there, C does not: 6/7.
    lat = three_paths()
    result = wc.word_posteriors(lat, 1.0)
    assert result.ok and result.word_ids == (5,) and result.frames == (0,)
    assert result.posteriors == pytest.approx((6 / 7,), abs=1e-12)
    status, arcs, total = wc.arc_posteriors(lat, 1.0)
    assert status == wc.STATUS_OK and total == pytest.approx(math.log(7 / 4), abs=1e-12)
    np.testing.assert_allclose(arcs, [4 / 7, 2 / 7, 1 / 7, 4 / 7, 4 / 7, 2 / 7, 2 / 7, 1 / 7, 1 / 7], atol=1e-12)


def test_the_scale_multiplies_graph_acoustic_and_final_costs() -> None:
    # scale 2: weights A 1, B exp(-2 ln 2) = 1/4, C exp(-2 ln 4) = 1/16; total 21/16:
    # P(A) = 16/21, P(B) = 4/21, P(C) = 1/21, and word 5's posterior is 20/21
    lat = three_paths()
    assert wc.word_posteriors(lat, 2.0).posteriors == pytest.approx((20 / 21,), abs=1e-12)
    status, arcs, total = wc.arc_posteriors(lat, 2.0)
    assert status == wc.STATUS_OK and total == pytest.approx(math.log(21 / 16), abs=1e-12)
    np.testing.assert_allclose(arcs[:3], [16 / 21, 4 / 21, 1 / 21], atol=1e-12)


def test_paths_far_apart_in_cost_give_a_certain_word_not_an_overflow() -> None:
    # two one-arc paths: word 7 at cost 0, word 8 at cost 800 (exp(800) overflows a float64):
    # P(word 7) = 1 / (1 + exp(-800)) = 1.0 in float64, P(word 8) = exp(-800) = 0.0
    lat = lattice([0, 1, 1], {1: 0.0, 2: 0.0}, [(0, 1, 7, 0.0, 0.0), (0, 2, 8, 400.0, 400.0)], num_frames=1)
    status, arcs, total = wc.arc_posteriors(lat, 1.0)
    assert status == wc.STATUS_OK and total == 0.0 and arcs.tolist() == [1.0, 0.0]
    result = wc.word_posteriors(lat, 1.0)
    assert result.ok and result.word_ids == (7,) and result.posteriors == (1.0,)


def test_every_arc_of_a_single_path_has_posterior_exactly_one() -> None:
    # one path: each arc is certain. These costs make the forward and backward sums round differently
    # (exp of their difference is 1 + 1.8e-15), and a probability is still never above 1.
    lat = lattice([0, 1, 2, 3], {3: 1.8}, [(0, 1, 1, 2.9, 1.4), (1, 2, 2, 2.7, 0.7), (2, 3, 3, 2.5, 2.4)],
                  num_frames=3)
    status, arcs, total = wc.arc_posteriors(lat, 1.0)
    assert status == wc.STATUS_OK and arcs.tolist() == [1.0, 1.0, 1.0]
    assert total == pytest.approx(-(2.9 + 1.4 + 2.7 + 0.7 + 2.5 + 2.4 + 1.8), abs=1e-12)
    assert wc.word_posteriors(lat, 1.0).posteriors == (1.0, 1.0, 1.0)


def test_a_lattice_of_one_final_node_has_no_words_and_is_not_cyclic() -> None:
    # no arcs: the only path is the empty one, mass exp(-2 x 0.5) at scale 2
    lat = lattice([0], {0: 0.5}, [], num_frames=0)
    status, arcs, total = wc.arc_posteriors(lat, 2.0)
    assert status == wc.STATUS_OK and arcs.size == 0 and total == pytest.approx(-1.0, abs=1e-15)
    assert wc.word_posteriors(lat, 2.0) == wc.WordPosteriors(wc.STATUS_OK, (), (), ())


def test_an_empty_lattice_is_no_lattice() -> None:
    lat = lattice([], {}, [], num_frames=0)
    assert wc.word_posteriors(lat).status == wc.NO_LATTICE
    assert wc.arc_posteriors(lat)[0] == wc.NO_LATTICE and wc.arc_posteriors(lat)[1].size == 0


def test_a_final_node_the_start_cannot_reach_is_no_complete_path() -> None:
    # node 2 is final but has no arc into it; node 1 (reached) is not final
    lat = lattice([0, 1, 1], {2: 0.0}, [(0, 1, 3, 1.0, 1.0)], num_frames=1)
    status, arcs, total = wc.arc_posteriors(lat, 1.0)
    assert (status, arcs.size, total) == (wc.NO_PATH, 0, -math.inf)
    assert wc.word_posteriors(lat, 1.0) == wc.WordPosteriors(wc.NO_PATH)


@pytest.mark.parametrize("scale", [math.inf, np.inf, -math.inf, np.float32("inf")])
def test_an_infinite_scale_says_why_and_gives_no_numbers(scale: float) -> None:
    result = wc.word_posteriors(three_paths(), scale)
    assert not result.ok and "not a finite number > 0" in result.status and result.posteriors == ()
    assert wc.arc_posteriors(three_paths(), scale)[0] == result.status
