"""The CPU decoder at an infinite beam against brute force on tiny random graphs, plus edge cases.

Graphs are OpenFst text compiled with kaldifst and read with `read_graph`: epsilon arcs (chains and cycles,
all with positive weights), emitting self-loops, several final states with final weights. The brute force
is independent of the decoder: a forward and a backward Viterbi pass over (frame, state) with epsilon
closures by Bellman-Ford relaxation give the best total cost; a depth-first search that prunes with the
backward costs lists every word sequence of a path within 1e-6 of it.
"""

from __future__ import annotations

import math
import tempfile
from dataclasses import replace
from pathlib import Path

import kaldifst
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specbench.decoder.backends import make_decoder
from specbench.decoder.cpu import CpuDecoder
from specbench.decoder.kaldi_reference import decode_rows
from specbench.decoder.options import SearchOptions
from specbench.decoder.pruning import INT32_MAX
from specbench.decoder.result import STATUS_BAD_SCORES, STATUS_EMPTY, STATUS_NO_FINAL, STATUS_OK, DecodeResult
from specbench.wfst.graph import CsrGraph, read_graph

pytestmark = pytest.mark.unit

TOL = 1e-6
INFINITE_BEAM = SearchOptions(beam=1e9, max_active=INT32_MAX, min_active=0)
KALDI_DEFAULTS = SearchOptions(beam=16.0, max_active=INT32_MAX)  # the CPU decoder's defaults before SearchOptions

Arc = tuple[int, int, int, int, float]  # src, dest, ilabel, olabel, weight


# ---------------------------------------------------------------------------------------------- graphs


def fst_text(arcs: list[Arc], finals: dict[int, float]) -> str:
    """OpenFst text with state 0 first (the start state), then the final states."""
    arcs = sorted(arcs, key=lambda a: a[0] != 0)
    lines = [f"{s} {d} {i} {o} {w!r}" for s, d, i, o, w in arcs]
    lines += [f"{s} {w!r}" for s, w in sorted(finals.items())]
    return "\n".join(lines) + "\n"


def compile_graph(text: str) -> CsrGraph:
    """kaldifst.compile -> vector FST file -> read_graph."""
    fst = kaldifst.compile(text, keep_state_numbering=True)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "g.fst"
        assert fst.write(str(path))
        return read_graph(path)


@st.composite
def random_graphs(draw: st.DrawFn) -> tuple[list[Arc], dict[int, float], int]:
    """(arcs, finals, P): 1-6 states, 0-4 arcs each (a third epsilon), labels up to P in 3..4."""
    num_states = draw(st.integers(1, 6))
    width = draw(st.integers(3, 4))
    weights = st.floats(-1.0, 3.0, allow_nan=False).map(lambda w: float(np.float32(round(w, 3))))
    eps_weights = st.floats(0.25, 3.0).map(lambda w: float(np.float32(round(w, 3))))
    arcs: list[Arc] = []
    for src in range(num_states):
        for _ in range(draw(st.integers(1 if src == 0 else 0, 4))):
            dest = draw(st.integers(0, num_states - 1))
            ilabel = draw(st.sampled_from([0] + list(range(1, width + 1)) * 2))
            olabel = draw(st.integers(0, 3))
            weight = draw(eps_weights if ilabel == 0 else weights)
            arcs.append((src, dest, ilabel, olabel, weight))
    finals = {s: draw(st.floats(0.0, 2.0).map(lambda w: float(np.float32(round(w, 3)))))
              for s in range(num_states) if draw(st.booleans())}
    return arcs, finals, width


# ---------------------------------------------------------------------------------------------- brute force


def _closure(cost: np.ndarray, eps: list[Arc]) -> np.ndarray:
    """Bellman-Ford over epsilon arcs (forward) from the costs `cost` (S,)."""
    cost = cost.copy()
    for _ in range(len(cost) + 1):
        changed = False
        for s, d, _, _, w in eps:
            if cost[s] + w < cost[d]:
                cost[d], changed = cost[s] + w, True
        if not changed:
            return cost
    raise AssertionError("negative epsilon cycle in a test graph")


def _back_closure(cost: np.ndarray, eps: list[Arc]) -> np.ndarray:
    """Bellman-Ford over epsilon arcs backwards: cost[s] = min(cost[s], w + cost[d])."""
    cost = cost.copy()
    for _ in range(len(cost) + 1):
        changed = False
        for s, d, _, _, w in eps:
            if w + cost[d] < cost[s]:
                cost[s], changed = w + cost[d], True
        if not changed:
            return cost
    raise AssertionError("negative epsilon cycle in a test graph")


def brute_force(arcs: list[Arc], finals: dict[int, float], num_states: int,
                ac: np.ndarray) -> tuple[float, set[tuple[int, ...]]]:
    """(best total cost, every word sequence of a path within TOL of it); ac: (T, P) float64 costs."""
    eps = [a for a in arcs if a[2] == 0]
    emitting = [a for a in arcs if a[2] != 0]
    frames = ac.shape[0]
    final = np.full(num_states, np.inf)
    for s, w in finals.items():
        final[s] = w
    beta = [np.full(num_states, np.inf) for _ in range(frames + 1)]
    beta[frames] = _back_closure(final, eps)
    for t in range(frames - 1, -1, -1):
        step = np.full(num_states, np.inf)
        for s, d, i, _, w in emitting:
            step[s] = min(step[s], w + ac[t, i - 1] + beta[t + 1][d])
        beta[t] = _back_closure(step, eps)
    best = float(beta[0][0])
    if not math.isfinite(best):
        return best, set()
    found: set[tuple[int, ...]] = set()

    def search(t: int, s: int, g: float, words: tuple[int, ...]) -> None:
        if g + beta[t][s] > best + TOL:
            return
        if t == frames and abs(g + final[s] - best) <= TOL:
            found.add(words)
        for src, d, i, o, w in arcs:
            if src != s or (i and t == frames):
                continue
            cost = w + (ac[t, i - 1] if i else 0.0)
            search(t + (1 if i else 0), d, g + cost, words + ((o,) if o else ()))

    search(0, 0, 0.0, ())
    return best, found


def forward_best(arcs: list[Arc], finals: dict[int, float], num_states: int, ac: np.ndarray) -> float:
    """The best total cost by the forward Viterbi pass (checks the backward pass)."""
    eps = [a for a in arcs if a[2] == 0]
    alpha = np.full(num_states, np.inf)
    alpha[0] = 0.0
    alpha = _closure(alpha, eps)
    for t in range(ac.shape[0]):
        nxt = np.full(num_states, np.inf)
        for s, d, i, _, w in arcs:
            if i:
                nxt[d] = min(nxt[d], alpha[s] + w + ac[t, i - 1])
        alpha = _closure(nxt, eps)
    return float(min((alpha[s] + w for s, w in finals.items()), default=np.inf))


# ---------------------------------------------------------------------------------------------- property


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_graphs(), st.integers(1, 5), st.integers(0, 2**32 - 1), st.sampled_from([1.0, 0.5]))
def test_infinite_beam_finds_a_best_path(graph_spec: tuple, frames: int, seed: int, scale: float) -> None:
    arcs, finals, width = graph_spec
    graph = compile_graph(fst_text(arcs, finals))
    loglikes = np.random.default_rng(seed).uniform(-5.0, 0.0, size=(frames, width)).astype(np.float32)
    ac = -(loglikes * np.float32(scale)).astype(np.float64)
    best, sequences = brute_force(arcs, finals, graph.num_states, ac)
    forward = forward_best(arcs, finals, graph.num_states, ac)
    assert forward == pytest.approx(best, abs=TOL) if math.isfinite(best) else forward == math.inf
    for mode in ("closure", "arcs"):
        decoder = CpuDecoder(graph, replace(INFINITE_BEAM, acoustic_scale=scale), epsilon_mode=mode)
        result = decoder.decode(loglikes, "u")
        if not math.isfinite(best):
            assert result.status == STATUS_NO_FINAL and result.word_ids == ()
            assert result.total_cost == math.inf
            continue
        assert result.ok, (mode, result.status)
        assert result.total_cost == pytest.approx(best, abs=TOL), mode
        assert result.word_ids in sequences, (mode, result.word_ids, sequences)
        assert result.num_frames == frames and len(result.word_end_frames) == len(result.word_ids)
        assert list(result.word_end_frames) == sorted(result.word_end_frames)
        assert all(-1 <= e < frames for e in result.word_end_frames)
        assert not result.word_ids or result.word_end_frames[-1] == frames - 1
        assert result.acoustic_cost >= float(ac.min(axis=1).sum()) - TOL


# ---------------------------------------------------------------------------------------------- handwritten

# 0 -a-> 1 -eps:w7-> 2 -b-> 3 (final 0.5), and an epsilon cycle 1 <-> 4 carrying word 8; 2 loops on b.
CHAIN = """0 1 1 5 0.5
1 2 0 7 0.25
1 4 0 8 1.0
4 1 0 0 1.0
2 2 2 0 0.125
2 3 2 6 0
3 0.5
"""


def test_handwritten_chain_gives_words_costs_and_end_frames() -> None:
    graph = compile_graph(CHAIN)
    loglikes = np.log(np.array([[0.9, 0.1, 0.5], [0.2, 0.8, 0.5], [0.2, 0.7, 0.5]], dtype=np.float32))
    for mode in ("closure", "arcs"):
        result = CpuDecoder(graph, INFINITE_BEAM, epsilon_mode=mode).decode(loglikes, "chain")
        assert result.ok and result.word_ids == (5, 7, 6)
        # path: a(frame 0, word 5) eps(word 7) b-loop(frame 1) b(frame 2, word 6)
        assert result.word_end_frames == (0, 1, 2)
        assert result.graph_cost == pytest.approx(0.5 + 0.25 + 0.125 + 0 + 0.5)
        expected_ac = -float(loglikes[0, 0] + loglikes[1, 1] + loglikes[2, 1])
        assert result.acoustic_cost == pytest.approx(expected_ac, rel=1e-6)
        assert result.stats.frames == 3 and result.stats.queue_overflows == 0


def test_no_path_to_a_final_state_is_a_status_not_a_fallback() -> None:
    graph = compile_graph("0 1 1 1 0.5\n1 1 1 0 0.5\n2 0\n")  # final state 2 is unreachable
    result = CpuDecoder(graph, KALDI_DEFAULTS).decode(np.zeros((4, 3), dtype=np.float32), "nofinal")
    assert result.status == STATUS_NO_FINAL and not result.ok
    assert result.word_ids == () and result.word_end_frames == () and result.total_cost == math.inf
    assert result.num_frames == 4 and result.stats.frames == 4


def test_zero_frames_is_an_empty_utterance() -> None:
    graph = compile_graph(CHAIN)
    result = CpuDecoder(graph, KALDI_DEFAULTS).decode(np.zeros((0, 3), dtype=np.float32), "empty")
    assert result.status == STATUS_EMPTY and result.num_frames == 0 and result.word_ids == ()


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_scores_name_the_utterance(bad: float) -> None:
    loglikes = np.zeros((3, 3), dtype=np.float32)
    loglikes[1, 2] = bad
    with pytest.raises(ValueError, match=r"utterance 'utt7'.*frame 1, column 2"):
        CpuDecoder(compile_graph(CHAIN), KALDI_DEFAULTS).decode(loglikes, "utt7")


def test_too_narrow_scores_name_the_utterance_and_widths() -> None:
    graph = compile_graph("0 1 4 1 0.5\n1 0\n")
    with pytest.raises(ValueError, match=r"utterance 'narrow'.*3 columns.*up to 4"):
        CpuDecoder(graph, KALDI_DEFAULTS).decode(np.zeros((2, 3), dtype=np.float32), "narrow")


def test_negative_epsilon_weights_use_epsilon_iteration() -> None:
    graph = compile_graph("0 1 1 1 1.0\n1 2 0 2 -0.5\n2 3 0 3 -0.25\n3 0.5\n1 2.0\n")
    decoder = CpuDecoder(graph, INFINITE_BEAM)
    assert not decoder.moves.closed
    result = decoder.decode(np.zeros((1, 3), dtype=np.float32), "neg")
    assert result.word_ids == (1, 2, 3) and result.total_cost == pytest.approx(1.0 - 0.75 + 0.5)
    with pytest.raises(ValueError, match="does not apply: an epsilon weight is negative"):
        CpuDecoder(graph, KALDI_DEFAULTS, epsilon_mode="closure")


def test_frame_by_frame_equals_decode_and_results_are_frozen() -> None:
    graph = compile_graph(CHAIN)
    loglikes = np.log(np.random.default_rng(3).dirichlet(np.ones(3), size=6).astype(np.float32))
    decoder = CpuDecoder(graph, SearchOptions(beam=4.0, min_active=1, max_active=3))
    whole = decoder.decode(loglikes, "x")
    decoder.init("x")
    decoder.advance(loglikes[:2])
    decoder.advance(loglikes[2:])
    assert decoder.result() == whole
    with pytest.raises(AttributeError):
        whole.status = "changed"  # type: ignore[misc]
    assert isinstance(whole, DecodeResult) and whole.lattice is None and whole.partials == ()


def test_invalid_options_are_rejected_with_the_field() -> None:
    graph = compile_graph(CHAIN)
    for kwargs, field in (({"beam": 0.0}, "SearchOptions.beam"), ({"max_active": 1}, "SearchOptions.max_active"),
                          ({"min_active": 30, "max_active": 20}, "SearchOptions.min_active"),
                          ({"beam_delta": -1.0}, "SearchOptions.beam_delta"),
                          ({"acoustic_scale": -1.0}, "SearchOptions.acoustic_scale"),
                          ({"lattice_beam": math.nan}, "SearchOptions.lattice_beam"),
                          ({"partial_every": 0}, "SearchOptions.partial_every")):
        with pytest.raises(ValueError, match=field):
            SearchOptions(**kwargs)
    with pytest.raises(ValueError, match="epsilon mode"):
        CpuDecoder(graph, KALDI_DEFAULTS, epsilon_mode="x")
    with pytest.raises(TypeError, match="SearchOptions"):
        CpuDecoder(graph, {"beam": 15.0})  # type: ignore[arg-type]
    with pytest.raises(RuntimeError, match="init"):
        CpuDecoder(graph, KALDI_DEFAULTS).result()


def test_options_partial_every_is_the_default_of_decode() -> None:
    graph = compile_graph(CHAIN)
    loglikes = np.log(np.random.default_rng(4).dirichlet(np.ones(3), size=5).astype(np.float32))
    by_call = CpuDecoder(graph, INFINITE_BEAM).decode(loglikes, "p", partial_every=2)
    by_options = CpuDecoder(graph, replace(INFINITE_BEAM, partial_every=2)).decode(loglikes, "p")
    assert by_call == by_options and [p.frame for p in by_options.partials] == [1, 3]
    assert CpuDecoder(graph, INFINITE_BEAM).decode_batch([("a", loglikes), ("b", loglikes[:, :1])])[1].status \
        .startswith("bad scores: utterance 'b'")


# ---------------------------------------------------------------------------------------------- every backend


def test_every_backend_from_the_factory_gives_the_same_result(tmp_path: Path) -> None:
    """cpu, twin and kaldi built by name from one graph file and one SearchOptions: the same words, word end
    frames (DecodeResult's definition), costs and status texts; kaldi refuses lattices and partials."""
    path = tmp_path / "g.fst"
    assert kaldifst.StdConstFst(kaldifst.compile(CHAIN, keep_state_numbering=True)).write(str(path))
    loglikes = np.log(np.array([[0.9, 0.1, 0.5], [0.2, 0.8, 0.5], [0.2, 0.7, 0.5]], dtype=np.float32))
    bad = loglikes.copy()
    bad[1, 1] = np.nan
    items = [("a", loglikes), ("nan", bad), ("empty", np.zeros((0, 3), np.float32))]
    for name in ("cpu", "twin", "kaldi"):
        decoder = make_decoder(name, path, INFINITE_BEAM)
        result = decoder.decode(loglikes, "c")
        assert (result.status, result.word_ids, result.word_end_frames) == (STATUS_OK, (5, 7, 6), (0, 1, 2)), name
        assert result.graph_cost == pytest.approx(1.375) and result.stats.frames == 3, name
        assert result.acoustic_cost == pytest.approx(-float(loglikes[0, 0] + loglikes[1, 1] + loglikes[2, 1]),
                                                     rel=1e-5), name
        batch = decoder.decode_batch(items)
        assert [r.utt_id for r in batch] == ["a", "nan", "empty"] and batch[0] == replace(result, utt_id="a")
        assert batch[1].status.startswith(f"{STATUS_BAD_SCORES}: utterance 'nan'") and batch[2].status == STATUS_EMPTY
        with pytest.raises(ValueError, match=r"utterance 'nan' has NaN at frame 1, column 1"):
            decoder.decode(bad, "nan")  # decode raises in every backend; decode_batch gives the status
    nofinal = tmp_path / "nofinal.fst"
    assert kaldifst.StdConstFst(kaldifst.compile("0 1 1 1 0.5\n1 1 1 0 0.5\n2 0\n")).write(str(nofinal))
    for name in ("cpu", "kaldi"):
        result = make_decoder(name, nofinal, INFINITE_BEAM).decode(np.zeros((4, 3), np.float32), "n")
        assert result.status == STATUS_NO_FINAL and result.num_frames == 4 and result.total_cost == math.inf
    with pytest.raises(ValueError, match="1-best only"):
        make_decoder("kaldi", path, replace(INFINITE_BEAM, lattice_beam=1.0))
    with pytest.raises(ValueError, match="1-best only"):
        make_decoder("kaldi", path, INFINITE_BEAM).decode(loglikes, "p", partial_every=1)
    with pytest.raises(ValueError, match="pass its path"):
        make_decoder("kaldi", read_graph(path), INFINITE_BEAM)
    with pytest.raises(ValueError, match="takes no argument max_lanes"):
        make_decoder("cpu", path, INFINITE_BEAM, max_lanes=4)
    with pytest.raises(ValueError, match="backend must be one of"):
        make_decoder("fast", path, INFINITE_BEAM)
    rows = decode_rows(str(path), [{"utt_id": "r", "num_frames": 3, "num_classes": 3,
                                    "loglikes": loglikes.ravel().tolist()}], INFINITE_BEAM)
    assert rows == [{"utt_id": "r", "status": STATUS_OK, "num_frames": 3, "word_ids": [5, 7, 6],
                     "word_end_frames": [0, 1, 2], "graph_cost": pytest.approx(1.375),
                     "acoustic_cost": pytest.approx(-float(loglikes[0, 0] + loglikes[1, 1] + loglikes[2, 1]),
                                                    rel=1e-5)}]
