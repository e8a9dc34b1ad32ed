"""The CPU decoders (numpy and compiled) by hand on tiny graphs: the tie rule for equally cheap final and
partial tokens (the lower state wins), the checks of the scores fed frame by frame (one width per utterance,
frames counted across `advance` calls), the epsilon step over epsilon arcs at exact ties (a token moves only
to a strictly cheaper one; a move landing on the cutoff is kept), the count of epsilon rounds and of epsilon
moves pruned above the cutoff, the lattice's start node when the start is not the lowest state, the refused
constructor and call arguments, and the compiled backend's limit of 65,536 score columns."""

from __future__ import annotations

import numpy as np
import pytest

from specbench.decoder.cpu import CpuDecoder
from specbench.decoder.cpu_compiled import CompiledCpuDecoder
from specbench.decoder.options import SearchOptions
from specbench.wfst.graph import from_arrays

pytestmark = pytest.mark.unit
BACKENDS = [CpuDecoder, CompiledCpuDecoder]


def _graph(arcs: list[tuple[int, int, int, int, float]], final: list[float]):
    src, dest, ilabel, olabel, weight = (np.array(c) for c in zip(*arcs))
    return from_arrays(0, np.array(final, np.float32), src=src, dest=dest, ilabel=ilabel, olabel=olabel,
                       weight=weight)


# state 0 has two label-1 arcs of weight 1: word 5 to state 2 (listed first), word 6 to state 1; both final 0
TIED = [(0, 2, 1, 5, 1.0), (0, 1, 1, 6, 1.0), (1, 1, 1, 0, 0.5), (2, 2, 1, 0, 0.5)]


@pytest.mark.parametrize("decoder_class", BACKENDS)
def test_equal_costs_go_to_the_lower_state_in_the_result_and_in_partials(decoder_class) -> None:
    # both paths cost 1 + 0.5 per later frame + acoustic 2 per frame: the tie goes to state 1, word 6
    decoder = decoder_class(_graph(TIED, [np.inf, 0.0, 0.0]), SearchOptions(beam=10.0))
    result = decoder.decode(np.full((2, 1), -2.0, np.float32), "tie", partial_every=1)
    assert (result.word_ids, result.graph_cost, result.acoustic_cost) == ((6,), 1.5, 4.0)
    assert [(p.frame, p.word_ids) for p in result.partials] == [(0, (6,)), (1, (6,))]


@pytest.mark.parametrize("decoder_class", BACKENDS)
def test_scores_fed_frame_by_frame_keep_one_width_and_count_frames_across_calls(decoder_class) -> None:
    decoder = decoder_class(_graph(TIED, [np.inf, 0.0, 0.0]), SearchOptions())
    decoder.init("w")
    decoder.advance(np.zeros((2, 1), np.float32))
    decoder.advance(np.zeros((0, 1), np.float32))  # no frames: nothing decoded
    with pytest.raises(ValueError, match=r"utterance 'w': scores have 2 columns, earlier frames had 1"):
        decoder.advance(np.zeros((1, 2), np.float32))
    bad = np.zeros((2, 1), np.float32)
    bad[1, 0] = np.nan
    with pytest.raises(ValueError, match=r"utterance 'w' has NaN at frame 3, column 0"):  # frames 0, 1 came before
        decoder.advance(bad)
    states, costs = decoder.active_tokens()
    states[:], costs[:] = 0, -1.0  # a copy: the search keeps its tokens
    # after 2 frames: state 1 costs 1 + 0.5 (word 6), state 2 the same (word 5); acoustic costs 0
    assert decoder.active_tokens()[1].tolist() == [1.5, 1.5] and decoder.result().word_ids == (6,)


# 0 -1:word 5/1-> 3; 0 -1/0.5-> 1 -eps:word 6/0.5-> 3 (a tie at 1.0); 3 -eps:word 7/1-> 4 (final 0)
AT_CUTOFF = [(0, 3, 1, 5, 1.0), (0, 1, 1, 0, 0.5), (1, 3, 0, 6, 0.5), (3, 4, 0, 7, 1.0)]


def test_epsilon_arcs_keep_the_first_of_equal_tokens_and_a_move_landing_on_the_cutoff() -> None:
    # cutoff 0.5 + beam 1.5 = 2.0; state 3 costs 1.0 both ways (first: word 5); state 4 costs exactly 2.0
    graph = _graph(AT_CUTOFF, [np.inf] * 4 + [0.0])
    result = CpuDecoder(graph, SearchOptions(beam=1.5, min_active=0), "arcs").decode(np.zeros((1, 1), np.float32), "c")
    assert (result.status, result.word_ids, result.graph_cost) == ("ok", (5, 7), 2.0)


@pytest.mark.parametrize("decoder_class", BACKENDS)
def test_the_start_epsilon_closure_is_one_round(decoder_class) -> None:
    # one epsilon arc 0 -> 1 before the emitting arc 1 -1-> 2 (final 0): 1 round at the start + 1 per frame
    graph = _graph([(0, 1, 0, 0, 0.5), (1, 2, 1, 0, 0.5), (2, 2, 1, 0, 0.5)], [np.inf, np.inf, 0.0])
    assert decoder_class(graph).decode(np.zeros((3, 1), np.float32), "e").stats.epsilon_iterations == 4


def test_bad_arguments_are_refused_with_the_reason() -> None:
    graph = _graph(TIED, [np.inf, 0.0, 0.0])
    cases = [(lambda: CpuDecoder("g.fst"), "must be a CsrGraph, got str"),  # type: ignore[arg-type]
             (lambda: CpuDecoder(from_arrays(-1, np.zeros(0), src=np.zeros(0, int), dest=np.zeros(0, int),
                                             ilabel=np.zeros(0, int), olabel=np.zeros(0, int),
                                             weight=np.zeros(0))), "no start state"),
             (lambda: CpuDecoder(graph, SearchOptions(lattice_beam=1.0), "arcs"),
              "lattices need the epsilon closure, which this decoder lacks: epsilon mode 'arcs'"),
             (lambda: CpuDecoder(graph).decode(np.zeros((1, 1), np.float32), "p", partial_every=-1),
              "partial_every must be >= 1 frame")]
    for make, message in cases:
        with pytest.raises(ValueError, match=message):
            make()
    assert CpuDecoder(graph).decode(np.zeros((1, 1), np.float32), "p", partial_every=0).partials == ()
    huge = np.zeros((2, 1))
    huge[1, 0] = -1e300  # finite in float64, -inf as float32
    with pytest.raises(ValueError, match=r"utterance 'h' has -1e\+300 at frame 1, column 0, beyond float32's"):
        CpuDecoder(graph).decode(huge, "h")
    for backend in BACKENDS:  # the same refusal from each, for a batch too
        for every in (1.5, -1, True):
            with pytest.raises(ValueError, match="partial_every must be >= 1 frame, a whole number"):
                backend(graph).decode_batch([("p", np.zeros((2, 1), np.float32))], partial_every=every)


def test_the_compiled_backend_takes_up_to_65536_score_columns() -> None:
    # one arc 0 -label L:word 3/0.25-> 1 (final 0.5); label 65536 is score column 65535, the last that fits
    wide = _graph([(0, 1, 65536, 3, 0.25)], [np.inf, 0.5])
    scores = np.zeros((1, 65536), np.float32)
    scores[0, -1] = -1.5
    result = CompiledCpuDecoder(wide).decode(scores, "wide")
    assert (result.word_ids, result.graph_cost, result.acoustic_cost) == ((3,), 0.75, 1.5)
    with pytest.raises(ValueError, match="at most 65,536 score columns; the graph's input labels go up to 65537"):
        CompiledCpuDecoder(_graph([(0, 1, 65537, 3, 0.25)], [np.inf, 0.5]))


@pytest.mark.parametrize("decoder_class", BACKENDS)
def test_an_empty_chunk_of_any_width_changes_nothing(decoder_class) -> None:
    decoder = decoder_class(_graph(TIED, [np.inf, 0.0, 0.0]))
    whole = decoder.decode(np.zeros((2, 1), np.float32), "z")
    decoder.init("z")
    decoder.advance(np.zeros((2, 1), np.float32))
    decoder.advance(np.zeros((0, 4), np.float32))  # a streaming source's empty chunk
    assert decoder.result() == whole


@pytest.mark.parametrize("decoder_class", BACKENDS)
def test_epsilon_moves_above_the_cutoff_count_as_pruned(decoder_class) -> None:
    # AT_CUTOFF plus 3 -eps:word 8/1.5-> 5: cutoff 2.0; emitting: 2 created (3 at 1.0, 1 at 0.5); epsilon round 1:
    # 3->4 at 2.0 and 1->3 at 1.0 kept, 3->5 at 2.5 pruned; round 2 from the new token at 4 moves nowhere
    graph = _graph(AT_CUTOFF + [(3, 5, 0, 8, 1.5)], [np.inf] * 4 + [0.0, np.inf])
    decoder = decoder_class(graph, SearchOptions(beam=1.5, min_active=0), "arcs")
    for _ in range(2):  # the second utterance starts from the same state
        result = decoder.decode(np.zeros((1, 1), np.float32), "p")
        assert (result.word_ids, result.graph_cost) == ((5, 7), 2.0)
        stats = result.stats
        assert (stats.tokens_created, stats.tokens_pruned, stats.epsilon_iterations) == (4, 1, 2)


@pytest.mark.parametrize("decoder_class", BACKENDS)
def test_the_lattice_starts_at_the_start_state_when_it_is_not_the_lowest(decoder_class) -> None:
    # start 1 -eps:word 4/0.5-> 0 -1:word 5/1-> 2 (final 0), 1 -1:word 6/2-> 2; acoustic 0.25; nodes: 0 = start
    # (frame 0, state 1), 1 = (frame 0, state 0), 2 = (frame 1, state 2); lattice beam inf keeps all 3 arcs
    src, dest, ilabel, olabel, weight = (np.array(c) for c in zip((1, 0, 0, 4, 0.5), (0, 2, 1, 5, 1.0),
                                                                   (1, 2, 1, 6, 2.0)))
    graph = from_arrays(1, np.array([np.inf, np.inf, 0.0], np.float32), src=src, dest=dest, ilabel=ilabel,
                        olabel=olabel, weight=weight)
    result = decoder_class(graph, SearchOptions(lattice_beam=np.inf)).decode(np.full((1, 1), -0.25, np.float32))
    lat = result.lattice
    assert (result.word_ids, lat.node_frame.tolist(), lat.node_state.tolist()) == ((4, 5), [0, 0, 1], [1, 0, 2])
    assert list(zip(lat.src.tolist(), lat.dst.tolist(), lat.olabel.tolist(), lat.graph_cost.tolist(),
                    lat.acoustic_cost.tolist())) == [(0, 1, 4, 0.5, 0.0), (0, 2, 6, 2.0, 0.25), (1, 2, 5, 1.0, 0.25)]
