"""The compiled CPU backend (numba frame loop) against the numpy CPU backend and brute force, on tiny random
graphs: every field of every result (words, costs, word end frames, search counters, partial hypotheses,
lattices) must be equal, at an infinite beam and under tight beam / max-active / min-active pruning;
graphs with negative epsilon weights run the numpy loop and still decode; frame-by-frame decoding equals
one call."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_decoder_bruteforce import CHAIN, INFINITE_BEAM, brute_force, compile_graph, fst_text, random_graphs

from specbench.decoder.cpu import CpuDecoder
from specbench.decoder.cpu_compiled import CompiledCpuDecoder
from specbench.decoder.options import SearchOptions

pytestmark = pytest.mark.unit
FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
LATTICE_FIELDS = ("node_frame", "node_state", "src", "dst", "ilabel", "olabel", "graph_cost", "acoustic_cost",
                  "final_cost")


def _scores(seed: int, width: int, frames: int) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-5.0, 0.0, size=(frames, width)).astype(np.float32)


def _assert_same(want, got) -> None:
    assert (got.utt_id, got.status, got.word_ids, got.word_end_frames) == (
        want.utt_id, want.status, want.word_ids, want.word_end_frames)
    assert (got.graph_cost, got.acoustic_cost) == (want.graph_cost, want.acoustic_cost)
    assert got.stats == want.stats and got.partials == want.partials
    assert (got.lattice is None) == (want.lattice is None)
    if want.lattice is not None:
        for name in LATTICE_FIELDS:
            assert np.array_equal(getattr(got.lattice, name), getattr(want.lattice, name)), name


@FAST
@given(random_graphs(), st.integers(0, 6), st.integers(0, 2**32 - 1), st.sampled_from([None, math.inf]))
def test_infinite_beam_equals_numpy_and_brute_force(graph_spec, frames: int, seed: int, lattice_beam) -> None:
    arcs, finals, width = graph_spec
    graph = compile_graph(fst_text(arcs, finals))
    loglikes = _scores(seed, width, frames)
    options = replace(INFINITE_BEAM, lattice_beam=lattice_beam)
    want = CpuDecoder(graph, options).decode(loglikes, "u", partial_every=2)
    got = CompiledCpuDecoder(graph, options).decode(loglikes, "u", partial_every=2)
    _assert_same(want, got)
    if frames and got.ok:
        best, sequences = brute_force(arcs, finals, graph.num_states, -loglikes.astype(np.float64))
        assert got.total_cost == pytest.approx(best, abs=1e-6) and got.word_ids in sequences


@FAST
@given(random_graphs(), st.integers(1, 8), st.integers(0, 2**32 - 1), st.sampled_from([0.5, 1.5, 4.0]),
       st.sampled_from([2, 3, 6]), st.sampled_from([0, 1, 2]), st.sampled_from([None, 0.0, 0.75]))
def test_pruned_search_equals_numpy_exactly(graph_spec, frames, seed, beam, max_active, min_active,
                                            lattice_beam) -> None:
    arcs, finals, width = graph_spec
    graph = compile_graph(fst_text(arcs, finals))
    loglikes = _scores(seed, width, frames)
    options = SearchOptions(beam=beam, max_active=max_active, min_active=min(min_active, max_active - 1),
                            lattice_beam=lattice_beam)
    numpy_decoder, compiled = CpuDecoder(graph, options), CompiledCpuDecoder(graph, options)
    for utt in ("a", "b"):  # the second utterance replays the start's epsilon step
        _assert_same(numpy_decoder.decode(loglikes, utt, partial_every=1),
                     compiled.decode(loglikes, utt, partial_every=1))


def test_frame_by_frame_equals_one_call() -> None:
    graph = compile_graph(CHAIN)
    loglikes = _scores(3, 3, 7)
    decoder = CompiledCpuDecoder(graph, replace(INFINITE_BEAM, lattice_beam=2.0))
    whole = decoder.decode(loglikes, "w", partial_every=2)
    decoder.init("w", partial_every=2)
    for t in range(0, 7, 3):
        decoder.advance(loglikes[t:t + 3])
    _assert_same(whole, decoder.result())


def test_negative_epsilon_weights_run_the_numpy_loop() -> None:
    text = "0 1 0 0 -0.5\n1 2 1 7 0.25\n2 0.0\n"
    graph = compile_graph(text)
    loglikes = _scores(5, 2, 1)
    want = CpuDecoder(graph, INFINITE_BEAM).decode(loglikes, "neg")
    got = CompiledCpuDecoder(graph, INFINITE_BEAM).decode(loglikes, "neg")
    _assert_same(want, got)
    assert got.ok and got.word_ids == (7,)


def test_bad_scores_are_refused_like_the_numpy_backend() -> None:
    graph = compile_graph(CHAIN)
    bad = np.full((2, 3), np.nan, dtype=np.float32)
    with pytest.raises(ValueError, match="utt7"):
        CompiledCpuDecoder(graph, INFINITE_BEAM).decode(bad, "utt7")
