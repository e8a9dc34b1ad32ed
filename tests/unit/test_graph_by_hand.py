"""The decoding-graph container (`wfst.graph`) by hand: inconsistent input is a ValueError naming the argument;
`max_ilabel`, `out_degree` and a start state other than 0, also in disjoint copies."""

from __future__ import annotations

import numpy as np
import pytest

from specbench.wfst.graph import ArcSet, CsrGraph, disjoint_copies, from_arrays

pytestmark = pytest.mark.unit


def arcs(offsets: list, dest: list, ilabel: int = 1) -> ArcSet:
    n = len(dest)
    return ArcSet(offsets=np.array(offsets, np.int64), dest=np.array(dest, np.int32), ilabel=np.full(n, ilabel,
                  np.int32), olabel=np.zeros(n, np.int32), weight=np.zeros(n, np.float32))


def graph(emitting: ArcSet, start: object = 0) -> CsrGraph:
    """Two states, no epsilon arcs."""
    return CsrGraph(start=start, final=np.zeros(2, np.float32), emitting=emitting, epsilon=arcs([0, 0, 0], []))


def one_arc(**kwargs: object) -> CsrGraph:
    """Two states, one arc 0 -1:1-> 1, arguments replaced by `kwargs`."""
    return from_arrays(**{"start": 0, "final": [0.0, 0.0], "src": [0], "dest": [1], "ilabel": [1], "olabel": [1],
                          "weight": [0.0], **kwargs})


@pytest.mark.parametrize("build, message", [
    (lambda: arcs([[0]], []), "ArcSet.offsets must be a 1-D int64"),
    (lambda: arcs([], []), r"ArcSet.offsets must run from 0 to the number of arcs \(0\)"),  # not even [0]
    (lambda: arcs([0, 1], [1, 1]), r"ArcSet.offsets must run from 0 to the number of arcs \(2\)"),
    (lambda: graph(arcs([0, 1, 1], [-1])), r"CsrGraph.emitting.dest has a state outside \[0, 2\)"),
    (lambda: graph(arcs([0, 1, 1], [1], ilabel=0)), "CsrGraph.emitting.ilabel must not contain 0"),
    (lambda: one_arc(src=None, offsets=[0, 1, 1], dest=[1, 1], ilabel=[1, 1], olabel=[1, 1], weight=[0, 0]),
     "offsets must have 3 entries from 0 to 2"),
    (lambda: one_arc(src=[-1]), r"src must have 1 states in \[0, 2\)"),
    (lambda: one_arc(olabel=[-(2**31) - 1]), "olabel has values outside the int32 range"),
    (lambda: one_arc(dest=[2**31]), "dest has values outside the int32 range"),
    (lambda: one_arc(final=[[0.0, 0.0]]), r"final must be 1-D, got shape \(1, 2\)"),
    (lambda: disjoint_copies(one_arc(), 2.0), "copies must be a positive int, got 2.0"),
])
def test_inconsistent_input_is_refused_naming_the_argument(build, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        build()


def test_counts_and_start_state_also_of_disjoint_copies() -> None:
    # start 2: 0 -4-> 1, 0 -eps-> 2, 1 -9:20-> 2, 1 -eps-> 0, 1 -eps-> 2; state 2 has no arcs
    g = from_arrays(np.int64(2), [np.inf, np.inf, 0.5], src=[1, 0, 1, 0, 1], dest=[2, 1, 0, 2, 2],
                    ilabel=[9, 4, 0, 0, 0], olabel=[20, 0, 0, 0, 0], weight=[1.0, 2.0, 3.0, 4.0, 5.0])
    assert type(graph(arcs([0, 0, 0], []), start=np.int64(1)).start) is int  # a plain int, not numpy's
    assert g.max_ilabel == 9  # the largest input label, not output label 20
    assert g.out_degree.tolist() == [2, 3, 0]  # emitting + epsilon: state 0: 1 + 1, state 1: 1 + 2
    copies = disjoint_copies(g, 2)
    assert copies.start == 2 and copies.max_ilabel == 9  # the search starts in copy 0's state 2
    assert copies.out_degree.tolist() == [2, 3, 0, 2, 3, 0]
    assert from_arrays(-1, [], src=[], dest=[], ilabel=[], olabel=[], weight=[]).max_ilabel == 0  # no arcs
