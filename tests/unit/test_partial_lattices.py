"""Partial lattices (`SearchOptions.partial_lattices`): the lattice each partial hypothesis carries is the
lattice of the audio so far, built in the same pass from the links recorded up to its frame. The search is
causal, so it must equal, array for array, the final lattice of decoding those frames alone over the same
graph with every state final at cost 0 (Kaldi's `use_final_probs = false`); the compiled backend must give
the numpy backend's; backends without partial lattices refuse them with the fix."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_compiled_decoder import LATTICE_FIELDS
from test_decoder_bruteforce import compile_graph, fst_text, random_graphs

from specbench.decoder.cpu import CpuDecoder
from specbench.decoder.cpu_compiled import CompiledCpuDecoder
from specbench.decoder.options import SearchOptions
from specbench.decoder.twin import TwinDecoder

pytestmark = pytest.mark.unit
FAST = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _same_lattice(got, want) -> None:
    assert (got is None) == (want is None)
    if want is not None:
        assert got.num_frames == want.num_frames
        for name in LATTICE_FIELDS:
            assert np.array_equal(getattr(got, name), getattr(want, name)), name


@FAST
@given(random_graphs(), st.integers(1, 7), st.integers(0, 2**32 - 1), st.sampled_from([0.0, 0.75, math.inf]),
       st.sampled_from([(1e9, 2**31 - 1, 0), (1.5, 3, 1)]), st.sampled_from([1, 2]))
def test_partial_lattice_is_the_lattice_of_the_prefix(graph_spec, frames, seed, lattice_beam, pruning,
                                                      every) -> None:
    arcs, finals, width = graph_spec
    graph = compile_graph(fst_text(arcs, finals))
    all_final = replace(graph, final=np.zeros(graph.num_states, dtype=np.float32))
    loglikes = np.random.default_rng(seed).uniform(-5.0, 0.0, size=(frames, width)).astype(np.float32)
    beam, max_active, min_active = pruning
    options = SearchOptions(beam=beam, max_active=max_active, min_active=min_active, lattice_beam=lattice_beam,
                            partial_lattices=True)
    plain = SearchOptions(beam=beam, max_active=max_active, min_active=min_active, lattice_beam=lattice_beam)
    numpy_result = CpuDecoder(graph, options).decode(loglikes, "u", partial_every=every)
    compiled_result = CompiledCpuDecoder(graph, options).decode(loglikes, "u", partial_every=every)
    assert numpy_result.partials == compiled_result.partials
    prefix_decoder = CpuDecoder(all_final, plain)
    for partial, compiled in zip(numpy_result.partials, compiled_result.partials, strict=True):
        prefix = prefix_decoder.decode(loglikes[:partial.frame + 1], "prefix")
        _same_lattice(partial.lattice, prefix.lattice if prefix.ok else None)
        _same_lattice(compiled.lattice, partial.lattice)


def test_partial_lattices_need_a_lattice_and_a_backend_that_has_them() -> None:
    with pytest.raises(ValueError, match="lattice_beam"):
        SearchOptions(partial_lattices=True)
    graph = compile_graph(fst_text([(0, 0, 1, 1, 0.5)], {0: 0.0}))
    with pytest.raises(ValueError, match="no partial lattices yet"):
        TwinDecoder(graph, SearchOptions(lattice_beam=4.0, partial_lattices=True))
    result = CpuDecoder(graph, SearchOptions(lattice_beam=4.0)).decode(np.zeros((3, 1), np.float32), "u", 1)
    assert [p.lattice for p in result.partials] == [None, None, None]


@FAST
@given(random_graphs(), st.integers(1, 7), st.integers(0, 2**32 - 1), st.booleans())
def test_compiled_best_path_relaxation_equals_the_reference(graph_spec, frames, seed, ties) -> None:
    """`WordLattice._relaxed` (the compiled kernel `best_path` uses) gives the numpy reference's costs and
    predecessor arcs, array for array, on final and partial lattices; with whole-number scores (`ties`),
    equally cheap paths are everywhere and the tie rule must hold too."""
    arcs, finals, width = graph_spec
    graph = compile_graph(fst_text(arcs, finals))
    rng = np.random.default_rng(seed)
    loglikes = (-rng.integers(0, 3, size=(frames, width)) if ties else rng.uniform(-5.0, 0.0, size=(frames, width)))
    options = SearchOptions(beam=1e9, max_active=2**31 - 1, min_active=0, lattice_beam=math.inf, partial_lattices=True)
    result = CpuDecoder(graph, options).decode(loglikes.astype(np.float32), "u", partial_every=1)
    lattices = [p.lattice for p in result.partials if p.lattice is not None]
    if result.lattice is not None:
        lattices.append(result.lattice)
    for lattice in lattices:
        init = np.full(lattice.num_nodes, np.inf)
        init[0] = 0.0
        got, want = lattice._relaxed(init), lattice._relaxed_reference(init)
        assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])
