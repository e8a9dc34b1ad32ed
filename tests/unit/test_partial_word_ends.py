"""Which last word a partial hypothesis keeps: `traceback.word_end_states` against a depth-first search on
random graphs, and the rule through every backend that gives partials (numpy CPU, compiled CPU, twin).

A partial keeps its last word when the best path's state lies between words: a final state is reachable
through epsilon arcs that put out no word. In G (arpa2fst) most word ends reach a final state only through
back-off arcs, so a rule that asked for a final weight on the state itself dropped complete words.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from test_decoder_bruteforce import CHAIN, INFINITE_BEAM, compile_graph, fst_text, random_graphs

from specbench.decoder.backends import make_decoder
from specbench.decoder.traceback import partial_words, word_end_states
from specbench.decoder.twin import TwinDecoder

pytestmark = pytest.mark.unit

# CHAIN plus a word-free epsilon arc from state 1 (after word 5's only token) to a new final state 5; state 1
# itself stays non-final, as a G history without an explicit </s> n-gram is.
BACKED_OFF = CHAIN + "1 5 0 0 2.0\n5 1.5\n"
LOGLIKES = np.log(np.array([[0.9, 0.1, 0.5], [0.2, 0.8, 0.5], [0.2, 0.7, 0.5]], dtype=np.float32))


def _reaches_final_by_search(arcs, finals, num_states: int) -> np.ndarray:
    """Per state, a depth-first search over epsilon arcs with output 0 for a final state."""
    out = np.zeros(num_states, dtype=bool)
    for start in range(num_states):
        seen, stack = {start}, [start]
        while stack:
            state = stack.pop()
            if state in finals:
                out[start] = True
                break
            for src, dest, ilabel, olabel, _ in arcs:
                if src == state and ilabel == 0 and olabel == 0 and dest not in seen:
                    seen.add(dest)
                    stack.append(dest)
    return out


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_graphs())
def test_word_end_states_equal_a_depth_first_search(graph_spec) -> None:
    arcs, finals, _ = graph_spec
    graph = compile_graph(fst_text(arcs, finals))
    want = _reaches_final_by_search(arcs, finals, graph.num_states)
    assert np.array_equal(word_end_states(graph), want)


def test_word_end_states_follow_chains_and_cycles_but_not_word_arcs() -> None:
    # 0 -eps-> 1 -eps-> 2 (final); 3 <-> 4 an epsilon cycle with 4 -eps-> 2; 5 -eps:word 9-> 2
    graph = compile_graph("0 1 0 0 0\n1 2 0 0 0\n3 4 0 0 0\n4 3 0 0 0\n4 2 0 0 0\n5 2 0 9 0\n0 6 1 0 0\n"
                          "2 0\n")
    assert word_end_states(graph).tolist() == [True, True, True, True, True, False, False]


def test_partial_words_cuts_only_an_unfinished_last_word() -> None:
    ends = np.array([False, True])
    assert partial_words((4, 7), 0, ends) == (4,)
    assert partial_words((4, 7), 1, ends) == (4, 7)
    assert partial_words((), 0, ends) == ()


@pytest.mark.parametrize("backend", ["cpu_numpy", "cpu", "twin"])
def test_a_word_final_only_through_back_off_is_kept(backend) -> None:
    """After frame 0 the best token is in state 1, path words (5,). State 1 is not final, but a word-free
    epsilon arc leads from it to final state 5: word 5 is complete and the partial keeps it. In CHAIN, without
    that arc, state 1 lies inside a word (only word-bearing arcs leave it) and the partial is empty."""
    options = replace(INFINITE_BEAM, partial_every=1)
    for text, first in ((BACKED_OFF, (5,)), (CHAIN, ())):
        graph = compile_graph(text)
        assert not np.isfinite(graph.final[1])
        decoder = TwinDecoder(graph, options) if backend == "twin" else make_decoder(backend, graph, options)
        result = decoder.decode(LOGLIKES, "c")
        assert result.word_ids == (5, 7, 6)
        assert [p.word_ids for p in result.partials] == [first, (5, 7, 6), (5, 7, 6)]
