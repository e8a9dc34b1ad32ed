"""`wfst.hmm_transducer` by hand on pocketsphinx's en-us model: the Sphinx phone of a context window at an
utterance boundary or beside a filler (both count as `SIL`, so the exact triphone is found and nothing backs
off), the count of windows that back off, and the transition matrices H refuses; `add_self_loops` on small
graphs: a graph label that is not an entry label of H (a disambiguation label left in) is refused, and a
start state other than 0 that is also entered through an entry label keeps no self-loop (a copy of it takes
the loop), with every path's cost computed by hand."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pocketsphinx
import pytest

from specbench.errors import DataError
from specbench.wfst.graph import CsrGraph, from_arrays
from specbench.wfst.hmm_transducer import add_self_loops, check_left_to_right, hmm_transducer, window_phone
from specbench.wfst.sphinx_lexicon import phone_table
from specbench.wfst.sphinx_mdef import Triphone, read_mdef

pytestmark = pytest.mark.unit

MODEL = Path(pocketsphinx.get_model_path()) / "en-us" / "en-us"


@pytest.fixture(scope="module")
def model():
    return read_mdef(MODEL / "mdef")


@pytest.fixture(scope="module")
def phones(model):
    base = [p for i, p in enumerate(model.ci_phones) if i not in model.fillers]
    return phone_table(base, ("SIL", "+NSN+", "+SPN+"), 0)


def test_a_boundary_or_filler_neighbour_is_silence_and_finds_the_exact_triphone(model, phones) -> None:
    ids = phones.ids
    g_sil_ow = model.triphones[Triphone("G", "SIL", "OW", "b")]  # "go" = G OW; the model lists this triphone
    ow_g_sil = model.triphones[Triphone("OW", "G", "SIL", "e")]
    assert window_phone((0, ids["G_B"], ids["OW_E"]), phones, model) == (g_sil_ow, False)  # utterance start
    assert window_phone((ids["+NSN+"], ids["G_B"], ids["OW_E"]), phones, model) == (g_sil_ow, False)
    assert window_phone((ids["G_B"], ids["OW_E"], 0), phones, model) == (ow_g_sil, False)  # utterance end
    assert window_phone((ids["G_B"], ids["OW_E"], ids["+SPN+"]), phones, model) == (ow_g_sil, False)
    # a filler centre is its context-independent phone
    assert window_phone((ids["G_B"], ids["+NSN+"], ids["G_B"]), phones, model) == (
        model.ci_phones.index("+NSN+"), False)


def test_h_counts_the_windows_whose_triphone_backs_off(model, phones) -> None:
    ids = phones.ids
    assert Triphone("AA", "AA", "AA", "i") not in model.triphones  # AA between two AAs: not in the model
    windows = [(), (0, ids["G_B"], ids["OW_E"]), (ids["G_B"], ids["OW_E"], 0), (ids["AA_I"], ids["AA_I"], ids["AA_I"]),
               (ids["+SPN+"], ids["G_B"], ids["OW_E"]), (-1,)]  # the last: a disambiguation window
    tmat = np.zeros((len(model.ci_phones), 3, 4))
    for s in range(3):
        tmat[:, s, s], tmat[:, s, s + 1] = 0.6, 0.4
    h = hmm_transducer(windows, phones, model, tmat)
    assert (h.windows, h.backed_off) == (4, 1)
    assert len(h.disambig_labels) == 1


def test_a_state_that_never_moves_on_is_refused() -> None:
    tmat = np.zeros((1, 3, 4))
    for s in range(3):
        tmat[0, s, s], tmat[0, s, s + 1] = 0.5, 0.5
    check_left_to_right(tmat)  # the standard topology passes
    tmat[0, 1] = [0.0, 1.0, 0.0, 0.0]  # state 1 only loops
    with pytest.raises(DataError, match="never moves on"):
        check_left_to_right(tmat)


def _two_state_tmat(model):
    tmat = np.zeros((len(model.ci_phones), 3, 4))
    for s in range(3):
        tmat[:, s, s], tmat[:, s, s + 1] = 0.6, 0.4
    return tmat


def test_a_graph_label_that_is_not_an_entry_label_of_h_is_refused(model, phones) -> None:
    ids = phones.ids
    h = hmm_transducer([(), (0, ids["G_B"], ids["OW_E"]), (-1,)], phones, model, _two_state_tmat(model))
    assert h.num_entries == 3 and h.disambig_labels == (4,)  # G's three states, then one disambiguation label

    def graph(label: int) -> CsrGraph:
        return from_arrays(0, np.array([np.inf, 0.0], np.float32), src=np.array([0]), dest=np.array([1]),
                           ilabel=np.array([label]), olabel=np.array([0]), weight=np.array([0.0]))

    out = add_self_loops(graph(3), h.senone, h.loop_prob, 0.1)  # the last entry label is fine
    assert out.num_states == 2 and out.emitting.num_arcs == 2  # the arc and state 1's self-loop
    with pytest.raises(ValueError, match="not an entry label"):
        add_self_loops(graph(h.disambig_labels[0]), h.senone, h.loop_prob, 0.1)
    with pytest.raises(ValueError, match="not an entry label"):
        add_self_loops(graph(h.disambig_labels[0] + 5), h.senone, h.loop_prob, 0.1)


def _best_cost(graph: CsrGraph, labels: list[int]) -> float:
    """The cheapest path from the start reading `labels` (one per arc; the graph has no epsilon arcs)."""
    assert graph.epsilon.num_arcs == 0
    arcs = graph.emitting
    cost = {graph.start: 0.0}
    for label in labels:
        step: dict[int, float] = {}
        for state, so_far in cost.items():
            for a in range(int(arcs.offsets[state]), int(arcs.offsets[state + 1])):
                if arcs.ilabel[a] == label:
                    dest = int(arcs.dest[a])
                    step[dest] = min(step.get(dest, math.inf), so_far + float(arcs.weight[a]))
        cost = step
    return min((c + float(graph.final[s]) for s, c in cost.items()), default=math.inf)


def test_a_start_state_other_than_0_entered_through_an_entry_label_keeps_no_self_loop() -> None:
    """2 -1/0.5-> 0 -2/0.25-> 1 (final) -1/0-> 2, start 2. Entry label 1: senone 10, loop 0.5; label 2:
    senone 20, loop 0.8; scale 1. State 2 is entered by label 1 but, as the start, is where no HMM state has
    been entered yet: it keeps no loop, and a copy of it takes label 1's loop and exit cost."""
    graph = from_arrays(2, np.array([np.inf, 0.0, np.inf], np.float32), src=np.array([2, 0, 1]),
                        dest=np.array([0, 1, 2]), ilabel=np.array([1, 2, 1]), olabel=np.array([7, 0, 0]),
                        weight=np.array([0.5, 0.25, 0.0]))
    out = add_self_loops(graph, np.array([0, 10, 20]), np.array([0.0, 0.5, 0.8]), 1.0)
    assert out.start == 2 and out.num_states == 4
    arcs = out.emitting
    start_arcs = range(int(arcs.offsets[2]), int(arcs.offsets[3]))
    assert [(int(arcs.dest[a]), int(arcs.ilabel[a])) for a in start_arcs] == [(0, 11)]  # no loop; label = senone + 1
    assert float(arcs.weight[start_arcs[0]]) == pytest.approx(0.5)  # no exit cost leaving the start
    exit_1, exit_2 = -math.log(1 - 0.5), -math.log(1 - 0.8)  # ln 2, ln 5
    loop_1, loop_2 = -math.log(0.5), -math.log(0.8)
    once = 0.5 + (0.25 + exit_1) + exit_2  # 2 -> 0 -> 1, then 1's exit in its final cost
    assert _best_cost(out, [11, 21]) == pytest.approx(once, abs=1e-5)
    assert _best_cost(out, [11, 11, 21]) == pytest.approx(once + loop_1, abs=1e-5)
    assert _best_cost(out, [11, 21, 21]) == pytest.approx(once + loop_2, abs=1e-5)
    # around again through the start's copy 2': 1 -> 2' costs 1's exit, 2' -> 0 costs 0.5 and the exit of 2'
    twice = once + exit_2 + (0.5 + exit_1) + (0.25 + exit_1)
    assert _best_cost(out, [11, 21, 11, 11, 21]) == pytest.approx(twice, abs=1e-5)
    assert _best_cost(out, [11, 21, 11, 11, 11, 21]) == pytest.approx(twice + loop_1, abs=1e-5)
    assert _best_cost(out, [11, 11]) == math.inf and _best_cost(out, [21]) == math.inf
