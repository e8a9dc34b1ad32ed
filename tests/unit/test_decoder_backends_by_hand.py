"""`backends.make_decoder` by hand: the class each backend name builds, the backend keywords each accepts
(the CPU epsilon mode for both CPU backends, none for kaldi), and a `GraphFile` read over memory-mapped
arrays when asked (the same arrays as reading the file)."""

from __future__ import annotations

from pathlib import Path

import kaldifst
import numpy as np
import pytest

from specbench.decoder.backends import GraphFile, make_decoder
from specbench.decoder.cpu import CpuDecoder
from specbench.decoder.options import SearchOptions
from specbench.decoder.twin import TwinDecoder
from specbench.wfst.graph import read_graph

pytestmark = pytest.mark.unit

# state 0 --1:5/0.5--> 1 --eps:7/0.25--> 2 (final 0.5)
GRAPH = "0 1 1 5 0.5\n1 2 0 7 0.25\n2 0.5\n"


@pytest.fixture
def graph_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SPECBENCH_HOME", str(tmp_path / "home"))  # mapped arrays written here
    path = tmp_path / "g.fst"
    assert kaldifst.StdConstFst(kaldifst.compile(GRAPH, keep_state_numbering=True)).write(str(path))
    return path


def test_each_name_builds_its_backend(graph_path: Path) -> None:
    assert type(make_decoder("cpu_numpy", graph_path)) is CpuDecoder
    assert type(make_decoder("twin", graph_path)) is TwinDecoder
    loglikes = np.array([[-1.0]], np.float32)
    for name in ("cpu_numpy", "twin", "cpu"):
        result = make_decoder(name, graph_path, SearchOptions()).decode(loglikes, "u")
        # 0.5 + 0.25 + final 0.5 = 1.25 graph cost; acoustic cost -(-1.0) = 1.0
        assert (result.word_ids, result.graph_cost, result.acoustic_cost) == ((5, 7), 1.25, 1.0), name


def test_the_epsilon_mode_is_a_keyword_of_both_cpu_backends_only(graph_path: Path) -> None:
    for name in ("cpu", "cpu_numpy"):
        decoder = make_decoder(name, graph_path, epsilon_mode="arcs")
        assert not decoder.moves.closed, name  # the epsilon arcs themselves, not the closure
    for name in ("kaldi", "twin"):
        with pytest.raises(ValueError, match=f"the {name} backend takes no argument epsilon_mode"):
            make_decoder(name, graph_path, epsilon_mode="arcs")


def test_a_mapped_graph_file_holds_the_files_arrays_memory_mapped(graph_path: Path) -> None:
    mapped, plain, read = GraphFile(graph_path, mapped=True).csr, GraphFile(graph_path).csr, read_graph(graph_path)
    assert isinstance(mapped.final, np.memmap) and not isinstance(plain.final, np.memmap)
    for graph in (mapped, plain):
        assert graph.start == read.start and np.array_equal(graph.final, read.final)
        assert np.array_equal(graph.emitting.dest, read.emitting.dest)
        assert np.array_equal(graph.epsilon.olabel, read.epsilon.olabel)


# exact ties at cost 1 (one frame, acoustic cost 0): (A) two arcs of state 0 into state 1, words 5 then 3;
# (B) 0 -1:5-> 1 -eps/1-> 2 against the later 0 -1:6/1-> 2; (C) two epsilon arcs of state 1 into 2, words 6, 5
TIES = {"0 1 1 5 1\n0 1 1 3 1\n1 0\n": ((5,), (5,), (3,)),
        "0 1 1 5 0\n0 2 1 6 1\n1 2 0 0 1\n2 0\n": ((5,), (6,), (6,)),
        "0 1 1 0 0\n1 2 0 6 1\n1 2 0 5 1\n2 0\n": ((6,), (6,), (5,))}


@pytest.mark.parametrize("text", TIES)
def test_exact_ties_in_our_backends_kaldi_and_the_lattice_follow_their_documented_rules(tmp_path: Path,
                                                                                        text: str) -> None:
    """Ours: the lowest emitting arc, bare or followed by epsilons; Kaldi: the first found, bare emitting
    before epsilon; the lattice: the lowest labels, bare emitting before epsilon (docs/decoders.md)."""
    path = tmp_path / "g.fst"
    assert kaldifst.compile(text, keep_state_numbering=True).write(str(path))
    ours, kaldi, lattice = TIES[text]
    loglikes, options = np.zeros((1, 1), np.float32), SearchOptions(beam=100.0, lattice_beam=0.0)
    assert make_decoder("kaldi", path, SearchOptions(beam=100.0)).decode(loglikes, "u").word_ids == kaldi
    for name in ("cpu_numpy", "cpu", "twin"):
        result = make_decoder(name, path, options).decode(loglikes, "u")
        assert (result.word_ids, result.lattice.best_path()[0]) == (ours, lattice), name


def test_a_lattice_beam_of_zero_keeps_the_best_path_despite_rounding(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A word, then two epsilon arcs, the second with a word: the closure adds the moves' costs before the
    token's, the link test after it, so the last link can come out an ulp dearer than the token it leads to
    (these weights and a near-zero acoustic cost make it so). Every backend records links within a slack of
    the beam (`SearchOptions.link_beam`), so a lattice beam of 0 still holds the 1-best."""
    monkeypatch.setenv("SPECBENCH_HOME", str(tmp_path / "home"))
    text = ("0 1 1 5 0\n1 2 2 0 2.505009412765503\n2 3 0 0 1.2737865447998047\n"
            "3 4 0 7 0.9714801907539368\n4 0\n")
    path = tmp_path / "chain.fst"
    assert kaldifst.StdConstFst(kaldifst.compile(text, keep_state_numbering=True)).write(str(path))
    loglikes = np.array([[-5.264902958046491e-10, -5.0], [-5.0, -0.7353246212005615]], np.float32)
    for name in ("cpu_numpy", "cpu", "twin"):
        result = make_decoder(name, path, SearchOptions(beam=16.0, lattice_beam=0.0)).decode(loglikes, "u")
        assert result.word_ids == (5, 7) and result.lattice is not None, name
        words, cost, _ = result.lattice.best_path()
        assert words == (5, 7) and cost == pytest.approx(result.graph_cost), name
