"""Word posteriors (decoder/word_confidence.py) against every path of small random lattices, enumerated here
and by kaldifst's `lattice_to_nbest` (OpenFst's n-shortest paths), and the statuses of unusable input.

The reference posteriors are built here from the definition, not from the module's windows: a run of r
identical consecutive 1-best words shares one window (strictly after the frame of the word before the run,
strictly before the frame of the word after it, or at one of the run's own frames), and the run's j-th word
gets the probability mass of the complete paths that emit that word at least j times in it."""

from __future__ import annotations

import itertools
import math

import kaldifst
import numpy as np
import pytest

from specbench.decoder import word_confidence as wc
from specbench.decoder.lattice import WordLattice

pytestmark = pytest.mark.unit


def random_lattice(rng: np.random.Generator, frames: int = 4, labels: int = 4) -> WordLattice:
    """Nodes by frame (node 0 the start), emitting arcs to the next frame, epsilon arcs to later nodes of
    the same frame (acyclic), word labels 0 to labels - 1 (0: no word; labels 2: every word the same, so
    1-best paths repeat it), continuous costs (no ties), finals at the last frame."""
    node_frame = [0]
    for f in range(frames + 1):
        node_frame += [f] * int(rng.integers(1 if f else 0, 3 + (f > 0)))
    node_frame = np.array(node_frame)
    nodes_at = [np.flatnonzero(node_frame == f) for f in range(frames + 1)]
    arcs = []
    for v, f in enumerate(node_frame):
        if f < frames:
            for d in rng.choice(nodes_at[f + 1], size=min(len(nodes_at[f + 1]), int(rng.integers(1, 3))),
                                replace=False):
                arcs.append((v, int(d), int(rng.integers(1, 6))))
        for d in nodes_at[f][nodes_at[f] > v]:
            if rng.random() < 0.3:
                arcs.append((v, int(d), 0))
    src, dst, ilabel = (np.array(x) for x in zip(*arcs))
    olabel = rng.integers(0, labels, size=len(arcs))
    order = np.lexsort((olabel, ilabel, dst, src))
    final = np.full(len(node_frame), np.inf)
    final[nodes_at[frames]] = rng.uniform(0.0, 2.0, size=len(nodes_at[frames]))
    return WordLattice(num_frames=frames, node_frame=node_frame.astype(np.int32),
                       node_state=np.arange(len(node_frame), dtype=np.int32), final_cost=final,
                       src=src[order].astype(np.int32), dst=dst[order].astype(np.int32), ilabel=ilabel[order],
                       olabel=olabel[order], graph_cost=rng.uniform(0.0, 3.0, len(arcs))[order],
                       acoustic_cost=rng.uniform(0.0, 3.0, len(arcs))[order])


def all_paths(lat: WordLattice) -> list[tuple[list[int], float]]:
    """Every complete path (its arcs) with its cost including the final weight, by depth-first search."""
    out, stack = [], [(0, [], 0.0)]
    while stack:
        node, arcs, cost = stack.pop()
        if math.isfinite(lat.final_cost[node]):
            out.append((arcs, cost + float(lat.final_cost[node])))
        for a in np.flatnonzero(lat.src == node).tolist():
            stack.append((int(lat.dst[a]), arcs + [a], cost + float(lat.graph_cost[a] + lat.acoustic_cost[a])))
    return out


def runs_of(words: list[int]) -> list[tuple[int, int]]:
    """(first index, length) of each run of identical consecutive words (by itertools.groupby)."""
    lengths = [len(list(group)) for _, group in itertools.groupby(words)]
    return [(sum(lengths[:i]), n) for i, n in enumerate(lengths)]


def groups_of(words: list[int], frames: list[int], num_frames: int) -> list[tuple[list[int], set[int]]]:
    """(indices, frames of the shared window) of the copies of a word that share a window (apart from the
    module's `word_groups`): a word's window is the frames strictly between its 1-best neighbours' and its
    own; a copy joins the group of the same word that it follows directly or whose window it meets."""
    bounds = [-1] + frames + [num_frames + 1]
    window = [set(range(bounds[k] + 1, bounds[k + 2])) | {frames[k]} for k in range(len(words))]
    groups: list[tuple[list[int], set[int]]] = []
    for k, word in enumerate(words):
        same = [g for g in groups if words[g[0][0]] == word]
        if same and (same[-1][0][-1] == k - 1 or same[-1][1] & window[k]):
            same[-1][0].append(k)
            same[-1][1].update(window[k])
        else:
            groups.append(([k], set(window[k])))
    return groups


def brute_force(lat: WordLattice, scale: float) -> tuple[np.ndarray, tuple[int, ...], list[float]]:
    """Arc posteriors, the 1-best words and each one's posterior, by enumerating every complete path (see
    the module docstring for the definition)."""
    paths = all_paths(lat)
    weights = np.array([math.exp(-scale * c) for _, c in paths])
    probs = weights / weights.sum()
    gamma = np.zeros(lat.num_arcs)
    for (arcs, _), p in zip(paths, probs):
        gamma[arcs] += p
    best = min(paths, key=lambda pc: pc[1])[0]
    word_arcs = [a for a in best if lat.olabel[a]]
    words = [int(lat.olabel[a]) for a in word_arcs]
    frames = [int(lat.node_frame[lat.src[a]]) for a in word_arcs]
    posteriors = [0.0] * len(words)
    for members, shared in groups_of(words, frames, lat.num_frames):
        word = words[members[0]]
        hits = [sum(bool(lat.olabel[a] == word) and int(lat.node_frame[lat.src[a]]) in shared for a in arcs)
                for arcs, _ in paths]
        for j, k in enumerate(members, 1):
            posteriors[k] = float(sum(p for h, p in zip(hits, probs) if h >= j))
    return gamma, tuple(words), posteriors


@pytest.mark.parametrize("seed", range(40))
@pytest.mark.parametrize("labels", [4, 2])
def test_posteriors_equal_the_sum_over_every_path(seed: int, labels: int) -> None:
    rng = np.random.default_rng(seed)
    lat = random_lattice(rng, frames=int(rng.integers(2, 6)), labels=labels)
    scale = float(rng.choice([0.3, 1.0, 2.5]))
    gamma, words, expected = brute_force(lat, scale)
    status, arcs, _ = wc.arc_posteriors(lat, scale)
    assert status == wc.STATUS_OK
    np.testing.assert_allclose(arcs, gamma, atol=1e-10)
    result = wc.word_posteriors(lat, scale)
    assert result.ok and result.word_ids == words == lat.best_path()[0]
    np.testing.assert_allclose(result.posteriors, expected, atol=1e-10)
    assert all(0.0 <= p <= 1.0 for p in result.posteriors)


def test_the_random_lattices_repeat_words_in_their_1_best() -> None:
    """The brute-force comparison above covers runs of identical words (with labels = 2, most 1-best paths
    hold one), some of them where a competing path emits the word fewer times than the 1-best."""
    runs, fewer = 0, 0
    for seed in range(40):
        rng = np.random.default_rng(seed)
        lat = random_lattice(rng, frames=int(rng.integers(2, 6)), labels=2)
        _, words, posteriors = brute_force(lat, 1.0)
        long_runs = [(k, n) for k, n in runs_of(list(words)) if n > 1]
        runs += len(long_runs)
        fewer += any(posteriors[k + n - 1] < posteriors[k] - 1e-6 for k, n in long_runs)
    assert runs >= 10 and fewer >= 3


def repeated_word_lattice(extra_cost: float = 0.0) -> WordLattice:
    """Two paths over 3 frames that cost the same (the second `extra_cost` more): A emits word 5 leaving
    frames 0 and 2 (the 1-best), B emits it once, leaving frame 1, inside both of A's words' windows."""
    node_frame = [0, 1, 2, 3, 1, 2]
    src, dst, olabel = [0, 1, 2, 0, 4, 5], [1, 2, 3, 4, 5, 3], [5, 0, 5, 0, 5, 0]
    acoustic = [1.0, 1.0, 1.0, 1.0, 1.0, 1.0 + extra_cost]
    order = np.lexsort((olabel, np.ones(6), dst, src))
    return WordLattice(num_frames=3, node_frame=np.array(node_frame, np.int32),
                       node_state=np.arange(6, dtype=np.int32),
                       final_cost=np.array([np.inf, np.inf, np.inf, 0.0, np.inf, np.inf]),
                       src=np.array(src, np.int32)[order], dst=np.array(dst, np.int32)[order],
                       ilabel=np.ones(6, np.int64), olabel=np.array(olabel, np.int64)[order],
                       graph_cost=np.zeros(6), acoustic_cost=np.array(acoustic)[order])


def test_a_path_with_one_copy_of_a_repeated_word_confirms_only_one_of_them() -> None:
    lat = repeated_word_lattice(1e-9)
    result = wc.word_posteriors(lat, 1.0)
    assert result.ok and result.word_ids == (5, 5) and result.frames == (0, 2)
    assert result.posteriors[0] == pytest.approx(1.0, abs=1e-12)
    assert result.posteriors[1] == pytest.approx(0.5, abs=1e-8)
    assert list(result.posteriors) == pytest.approx(brute_force(lat, 1.0)[2], abs=1e-12)
    heavy = WordLattice(**{**lat.__dict__, "acoustic_cost": lat.acoustic_cost + 500.0})  # no underflow
    assert wc.word_posteriors(heavy, 1.0).posteriors == pytest.approx((1.0, 0.5), abs=1e-8)


def test_copies_of_a_word_with_another_between_share_a_window_where_theirs_overlap() -> None:
    """The 1-best `a b a`, every word leaving frame 0 (epsilon arcs), against `b a` (cost 0.5 more): only
    the 1-best emits `a` twice, so the second copy gets P(1-best), not the 1.0 of a window of its own."""
    a, b = 1, 2
    arcs = sorted([(0, 1, a, 0.0), (1, 2, b, 0.0), (2, 3, a, 0.0), (3, 6, 0, 0.0),
                   (0, 4, b, 0.5), (4, 5, a, 0.0), (5, 6, 0, 0.0)])
    src, dst, olabel, cost = (np.array(x) for x in zip(*arcs))
    lat = WordLattice(num_frames=1, node_frame=np.array([0, 0, 0, 0, 0, 0, 1], np.int32),
                      node_state=np.arange(7, dtype=np.int32), final_cost=np.array([np.inf] * 6 + [0.0]),
                      src=src.astype(np.int32), dst=dst.astype(np.int32), ilabel=np.where(olabel, 0, 5),
                      olabel=olabel, graph_cost=cost, acoustic_cost=np.zeros(len(arcs)))
    result = wc.word_posteriors(lat, 1.0)
    assert result.word_ids == (a, b, a) and result.frames == (0, 0, 0)
    expected = [1.0, 1.0, 1 / (1 + math.exp(-0.5))]
    assert list(result.posteriors) == pytest.approx(expected, abs=1e-12) == brute_force(lat, 1.0)[2]


def test_the_path_sum_equals_kaldis_n_best_paths() -> None:
    """OpenFst's n-shortest paths (kaldifst.lattice_to_nbest), n above the number of paths, list every path
    once; each arc gets a unique input label, so each listed path names its arcs."""
    for seed in range(10):
        rng = np.random.default_rng(100 + seed)
        lat = random_lattice(rng)
        fst = kaldifst.Lattice()
        for _ in range(lat.num_nodes):
            fst.add_state()
        fst.start = 0
        for a in range(lat.num_arcs):
            weight = kaldifst.LatticeWeight(float(lat.graph_cost[a]), float(lat.acoustic_cost[a]))
            fst.add_arc(int(lat.src[a]), kaldifst.LatticeArc(a + 1, int(lat.olabel[a]), weight, int(lat.dst[a])))
        for node in np.flatnonzero(np.isfinite(lat.final_cost)).tolist():
            fst.set_final(node, kaldifst.LatticeWeight(float(lat.final_cost[node]), 0.0))
        listed = kaldifst.lattice_to_nbest(fst, n=10_000)
        assert len(listed) == len(all_paths(lat))
        gamma, total = np.zeros(lat.num_arcs), 0.0
        for path in listed:  # linear: "src dst ilabel olabel [g,a]" lines (epsilon arcs too), "state [g,a]"
            lines = [line.split() for line in path.to_str().splitlines()]
            arcs = [int(f[2]) - 1 for f in lines if len(f) >= 4 and int(f[2]) > 0]
            printed = sum(float(x) for f in lines if "," in f[-1] for x in f[-1].split(","))
            cost = float(sum(lat.graph_cost[arcs] + lat.acoustic_cost[arcs]))
            cost += float(lat.final_cost[lat.dst[arcs[-1]] if arcs else 0])
            assert printed == pytest.approx(cost, rel=1e-5)  # OpenFst prints 6 significant digits
            gamma[arcs] += math.exp(-cost)
            total += math.exp(-cost)
        status, arcs, log_total = wc.arc_posteriors(lat, 1.0)
        assert status == wc.STATUS_OK and log_total == pytest.approx(math.log(total), abs=1e-9)
        np.testing.assert_allclose(arcs, gamma / total, atol=1e-10)


def test_a_single_path_is_certain_and_windows_reach_the_neighbours() -> None:
    lat = WordLattice(num_frames=2, node_frame=np.array([0, 1, 2], np.int32), node_state=np.arange(3, dtype=np.int32),
                      final_cost=np.array([np.inf, np.inf, 0.5]), src=np.array([0, 1], np.int32),
                      dst=np.array([1, 2], np.int32), ilabel=np.array([1, 2]), olabel=np.array([7, 9]),
                      graph_cost=np.array([1.0, 2.0]), acoustic_cost=np.array([0.5, 0.25]))
    result = wc.word_posteriors(lat)
    assert result.word_ids == (7, 9) and result.frames == (0, 1) and result.posteriors == (1.0, 1.0)
    assert wc.word_windows((0, 1), 2) == [(0.0, 1.0), (1.0, 3.0)]
    assert wc.word_windows((2, 5, 9), 12) == [(0.0, 5.0), (3.0, 9.0), (6.0, 13.0)]
    assert wc.word_windows((4, 4, 7), 9) == [(0.0, 5.0), (4.0, 7.0), (5.0, 10.0)]  # two labels leave frame 4


def test_unusable_lattices_and_scales_say_why_and_give_no_numbers() -> None:
    lat = random_lattice(np.random.default_rng(5))
    for scale in (0.0, -1.0, float("nan")):
        result = wc.word_posteriors(lat, scale)
        assert not result.ok and "scale" in result.status and result.posteriors == ()
        assert wc.arc_posteriors(lat, scale)[0] == result.status
    assert wc.word_posteriors(None).status == wc.NO_LATTICE
    no_final = WordLattice(**{**lat.__dict__, "final_cost": np.full(lat.num_nodes, np.inf)})
    assert wc.word_posteriors(no_final).status == wc.NO_PATH
    cyclic = WordLattice(num_frames=1, node_frame=np.array([0, 0, 1], np.int32), node_state=np.arange(3, dtype=np.int32),
                         final_cost=np.array([np.inf, np.inf, 0.0]), src=np.array([0, 1, 1], np.int32),
                         dst=np.array([1, 0, 2], np.int32), ilabel=np.array([0, 0, 1]), olabel=np.array([0, 0, 3]),
                         graph_cost=np.array([0.5, 0.5, 1.0]), acoustic_cost=np.zeros(3))
    assert wc.word_posteriors(cyclic).status == wc.CYCLIC


def test_numpy_scales_are_numbers_and_bools_are_not() -> None:
    lat = random_lattice(np.random.default_rng(7))
    want = wc.word_posteriors(lat, 0.5)
    assert want.ok
    for scale in (np.float32(0.5), np.float64(0.5), np.int64(1) / 2):
        assert wc.word_posteriors(lat, scale) == want
        status, arcs, _ = wc.arc_posteriors(lat, scale)
        assert status == wc.STATUS_OK and arcs.tolist() == wc.arc_posteriors(lat, 0.5)[1].tolist()
    assert wc.word_posteriors(lat, np.int64(1)) == wc.word_posteriors(lat, 1.0)
    for scale in (True, np.bool_(True), "0.5", None):
        result = wc.word_posteriors(lat, scale)
        assert not result.ok and result.posteriors == ()
        assert "is not a number" in result.status and repr(scale) in result.status and "Fix:" in result.status
    assert "not a finite number > 0" in wc.word_posteriors(lat, np.float32(-1.0)).status
