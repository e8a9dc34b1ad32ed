"""Disjoint copies of a graph (the decoder benchmark's graph-size sweep): copy c holds the graph's arcs with
every state shifted by c * num_states, the search starts in copy 0, so every decoder finds what it finds on
the graph itself."""

from __future__ import annotations

import numpy as np
import pytest

from specbench.decoder.backends import make_decoder
from specbench.decoder.options import SearchOptions
from specbench.wfst.graph import disjoint_copies, from_arrays

pytestmark = pytest.mark.unit


def small_graph():
    """Four states, emitting arcs over labels 1-3, epsilon arcs (one with a word), states 2 and 3 final."""
    return from_arrays(0, np.array([np.inf, np.inf, 0.5, 0.0], dtype=np.float32),
                       src=np.array([0, 0, 1, 1, 2, 2, 3, 0, 2]), dest=np.array([1, 2, 2, 3, 3, 0, 1, 3, 1]),
                       ilabel=np.array([1, 2, 3, 1, 2, 3, 1, 0, 0]), olabel=np.array([5, 0, 6, 0, 7, 0, 0, 8, 0]),
                       weight=np.array([0.5, 1.0, 0.2, 0.3, 0.1, 0.7, 0.4, 1.5, 0.25], dtype=np.float32))


def test_copies_hold_the_graph_shifted_by_its_size() -> None:
    graph = small_graph()
    copies = disjoint_copies(graph, 3)
    assert copies.num_states == 12 and copies.num_arcs == 3 * graph.num_arcs and copies.start == graph.start
    for c in range(3):
        for s in range(4):
            for name in ("emitting", "epsilon"):
                mine, theirs = getattr(copies, name), getattr(graph, name)
                a, b = mine.state_arcs(c * 4 + s), theirs.state_arcs(s)
                assert np.array_equal(mine.dest[a], theirs.dest[b] + c * 4)
                assert np.array_equal(mine.weight[a], theirs.weight[b])
                assert np.array_equal(mine.olabel[a], theirs.olabel[b])
    assert np.array_equal(copies.final, np.tile(graph.final, 3))
    assert disjoint_copies(graph, 1).num_states == 4
    with pytest.raises(ValueError, match="positive int"):
        disjoint_copies(graph, 0)


@pytest.mark.parametrize("backend", ["cpu", "twin"])
def test_decoding_on_copies_finds_what_the_graph_gives(backend: str) -> None:
    rng = np.random.default_rng(3)
    items = [(f"u{i}", np.log(rng.dirichlet(np.ones(4), size=int(rng.integers(2, 9)))).astype(np.float32))
             for i in range(6)]
    options = SearchOptions(beam=6.0, max_active=3, min_active=1, acoustic_scale=1.0)
    one = make_decoder(backend, small_graph(), options)
    many = make_decoder(backend, disjoint_copies(small_graph(), 5), options)
    for utt_id, mat in items:
        a, b = one.decode(mat, utt_id), many.decode(mat, utt_id)
        assert (a.status, a.word_ids, a.total_cost, a.word_end_frames, a.stats) == (
            b.status, b.word_ids, b.total_cost, b.word_end_frames, b.stats)
