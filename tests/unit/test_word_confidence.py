"""Word posteriors (decoder/word_confidence.py) against every path of small random lattices, enumerated here
and by kaldifst's `lattice_to_nbest` (OpenFst's n-shortest paths), and the statuses of unusable input."""

from __future__ import annotations

import math

import kaldifst
import numpy as np
import pytest

from specbench.decoder import word_confidence as wc
from specbench.decoder.lattice import WordLattice

pytestmark = pytest.mark.unit


def random_lattice(rng: np.random.Generator, frames: int = 4) -> WordLattice:
    """Nodes by frame (node 0 the start), emitting arcs to the next frame, epsilon arcs to later nodes of
    the same frame (acyclic), word labels 0-3, continuous costs (no ties), finals at the last frame."""
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
    olabel = rng.integers(0, 4, size=len(arcs))
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


def brute_force(lat: WordLattice, scale: float) -> tuple[np.ndarray, tuple[int, ...], list[float]]:
    """Arc posteriors, the 1-best words and each one's posterior (a path emitting the word in its window)."""
    paths = all_paths(lat)
    weights = np.array([math.exp(-scale * c) for _, c in paths])
    probs = weights / weights.sum()
    gamma = np.zeros(lat.num_arcs)
    for (arcs, _), p in zip(paths, probs):
        gamma[arcs] += p
    best = min(paths, key=lambda pc: pc[1])[0]
    word_arcs = [a for a in best if lat.olabel[a]]
    frames = [int(lat.node_frame[lat.src[a]]) for a in word_arcs]
    bounds = [-1] + frames + [lat.num_frames + 1]  # word k: strictly between its 1-best neighbours' frames
    posteriors = []
    for k, a in enumerate(word_arcs):
        word, lo, hi, own = lat.olabel[a], bounds[k], bounds[k + 2], frames[k]
        hit = [b for b in range(lat.num_arcs) if lat.olabel[b] == word
               and (lo < lat.node_frame[lat.src[b]] < hi or lat.node_frame[lat.src[b]] == own)]
        posteriors.append(sum(p for (arcs, _), p in zip(paths, probs) if set(arcs) & set(hit)))
    return gamma, tuple(int(lat.olabel[a]) for a in word_arcs), posteriors


@pytest.mark.parametrize("seed", range(40))
def test_posteriors_equal_the_sum_over_every_path(seed: int) -> None:
    rng = np.random.default_rng(seed)
    lat = random_lattice(rng, frames=int(rng.integers(2, 6)))
    scale = float(rng.choice([0.3, 1.0, 2.5]))
    gamma, words, expected = brute_force(lat, scale)
    status, arcs, _ = wc.arc_posteriors(lat, scale)
    assert status == wc.STATUS_OK
    np.testing.assert_allclose(arcs, gamma, atol=1e-10)
    result = wc.word_posteriors(lat, scale)
    assert result.ok and result.word_ids == words == lat.best_path()[0]
    np.testing.assert_allclose(result.posteriors, expected, atol=1e-10)
    assert all(0.0 <= p <= 1.0 for p in result.posteriors)


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
