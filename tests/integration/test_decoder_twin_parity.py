"""The GPU algorithm's numpy twin against the CPU backend on the SLURP TLG with real acoustic scores (200
held-out-voice test utterances): identical 1-best, costs, search counters and partial hypotheses, with and
without max-active binding, and identical lattices. This is the check of the GPU algorithm that runs on
every commit; tests/gpu compares the GPU itself with the CPU backend on the H200."""

from __future__ import annotations

import numpy as np
import pytest

from specbench.decoder.cpu import CpuDecoder
from specbench.decoder.options import SearchOptions
from specbench.decoder.twin import TwinDecoder
from specbench.experiments.graph_recipe import GraphArtifacts
from specbench.wfst.graph import read_graph

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("max_active", [10000, 200])
def test_twin_equals_cpu_on_real_scores(slurp_graph: GraphArtifacts, real_test_scores: list,
                                        max_active: int) -> None:
    graph = read_graph(slurp_graph.tlg)
    options = SearchOptions(beam=15.0, max_active=max_active, min_active=20)
    twin = TwinDecoder(graph, options, max_lanes=64).decode_batch(real_test_scores, partial_every=3)
    cpu = CpuDecoder(graph, options)
    bound = 0
    for (utt, loglikes), got in zip(real_test_scores, twin, strict=True):
        want = cpu.decode(loglikes, utt, partial_every=3)
        assert (got.status, got.word_ids, got.word_end_frames) == (want.status, want.word_ids,
                                                                    want.word_end_frames), utt
        assert (got.graph_cost, got.acoustic_cost) == (want.graph_cost, want.acoustic_cost), utt
        assert got.stats == want.stats and got.partials == want.partials, utt
        bound += want.stats.max_active_binds > 0
    assert len(real_test_scores) >= 200
    if max_active == 200:
        assert bound > 0  # the exact radix-select cutoff is exercised


def test_twin_lattices_equal_cpu_on_real_scores(slurp_graph: GraphArtifacts, real_test_scores: list) -> None:
    graph = read_graph(slurp_graph.tlg)
    items = real_test_scores[:30]
    options = SearchOptions(beam=15.0, max_active=10000, lattice_beam=8.0)
    twin = TwinDecoder(graph, options).decode_batch(items)
    cpu = CpuDecoder(graph, options)
    for (utt, loglikes), got in zip(items, twin, strict=True):
        want = cpu.decode(loglikes, utt)
        if not want.ok:
            continue
        for name in ("node_frame", "node_state", "src", "dst", "ilabel", "olabel", "graph_cost",
                     "acoustic_cost", "final_cost"):
            assert np.array_equal(getattr(got.lattice, name), getattr(want.lattice, name)), (utt, name)
        _, graph_cost, acoustic_cost = want.lattice.best_path()
        assert graph_cost + acoustic_cost == pytest.approx(want.total_cost, abs=1e-3)
        assert want.lattice.oracle_errors(want.word_ids) == 0
