"""Lattice pruning and word-lattice queries against brute force over hand-built and random raw lattices.

The brute force is independent of lattice.py: it deduplicates arcs with a dict, enumerates complete paths
by depth-first search over (frame, state) nodes (each node at most twice per path, which covers the
cheapest path through every arc: a simple path to its source, then a simple path from its destination),
and computes oracle errors by Dijkstra over (node, reference position).
"""

from __future__ import annotations

import heapq
import math
from collections import defaultdict

import kaldifst
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specbench.decoder.lattice import (
    RawLattice,
    RawLatticeBuilder,
    WordLattice,
    lattice_file_oracle_errors,
    prune_lattice,
    read_lattice,
)
from specbench.errors import DataError

pytestmark = pytest.mark.unit

INF = math.inf
Arc = tuple  # (src_frame, src_state, dst_frame, dst_state, ilabel, olabel, graph, acoustic)
Key = tuple  # the first six fields of an Arc


def make_raw(arcs: list[Arc], num_frames: int, start: int = 0) -> RawLattice:
    builder = RawLatticeBuilder()
    if arcs:
        builder.add(*(np.array(column) for column in zip(*arcs)))
    return builder.build(num_frames, start)


def dedup(arcs: list[Arc]) -> dict[Key, tuple[float, float]]:
    """The cheapest of each set of duplicates: lowest total cost, then lowest acoustic cost."""
    best: dict[Key, tuple[float, float]] = {}
    for arc in arcs:
        key, cost = tuple(arc[:6]), (arc[6], arc[7])
        if key not in best or (sum(cost), cost[1]) < (sum(best[key]), best[key][1]):
            best[key] = cost
    return best


def complete_paths(arcs: dict[Key, tuple[float, float]], final: dict, num_frames: int, start: int,
                   visits: int) -> list[tuple[list[Key], tuple]]:
    """Every complete path (arc keys, end node) visiting each node at most `visits` times."""
    out = defaultdict(list)
    for key in arcs:
        out[key[:2]].append(key)
    paths, seen = [], defaultdict(int)

    def search(node: tuple, path: list[Key]) -> None:
        seen[node] += 1
        if node[0] == num_frames and math.isfinite(final.get(node[1], INF)):
            paths.append((list(path), node))
        for key in out[node]:
            nxt = key[2:4]
            if seen[nxt] < visits:
                path.append(key)
                search(nxt, path)
                path.pop()
        seen[node] -= 1

    search((0, start), [])
    return paths


def path_cost(arcs: dict, path: list[Key], end: tuple, final: dict) -> tuple[float, float]:
    return sum(arcs[k][0] for k in path) + final[end[1]], sum(arcs[k][1] for k in path)


def words_of(path: list[Key]) -> tuple[int, ...]:
    return tuple(k[5] for k in path if k[5])


def oracle_dijkstra(arcs: dict, finals: set, start: tuple, ref: list[int]) -> int:
    out = defaultdict(list)
    for key in arcs:
        out[key[:2]].append(key)
    dist, heap = {(start, 0): 0}, [(0, start, 0)]
    while heap:
        d, node, j = heapq.heappop(heap)
        if d > dist[(node, j)]:
            continue
        moves = [(node, j + 1, 1)] if j < len(ref) else []
        for key in out[node]:
            nxt, w = key[2:4], key[5]
            moves.append((nxt, j, 1 if w else 0))
            if w and j < len(ref):
                moves.append((nxt, j + 1, int(w != ref[j])))
        for nxt, k, c in moves:
            if d + c < dist.get((nxt, k), INF):
                dist[(nxt, k)] = d + c
                heapq.heappush(heap, (d + c, nxt, k))
    return min(dist.get((node, len(ref)), INF) for node in finals)


def lattice_arcs(lat: WordLattice) -> dict[Key, tuple[float, float]]:
    f, s = lat.node_frame, lat.node_state
    return {(int(f[a]), int(s[a]), int(f[b]), int(s[b]), int(i), int(o)): (float(g), float(c))
            for a, b, i, o, g, c in zip(lat.src, lat.dst, lat.ilabel, lat.olabel, lat.graph_cost,
                                        lat.acoustic_cost)}


def check_against_brute_force(arcs: list[Arc], final_list: list[float], num_frames: int, beam: float,
                              refs: list[list[int]]) -> WordLattice | None:
    final = {s: w for s, w in enumerate(final_list) if math.isfinite(w)}
    unique = dedup(arcs)
    lat = prune_lattice(make_raw(arcs, num_frames), np.array(final_list, dtype=np.float32), beam)
    paths = complete_paths(unique, final, num_frames, 0, visits=2)
    if not paths:
        assert lat is None
        return None
    totals = [sum(path_cost(unique, p, e, final)) for p, e in paths]
    best = min(totals)
    limit = best + beam + 1e-6 * max(1.0, abs(best))
    within = [(p, e) for (p, e), t in zip(paths, totals) if t <= limit]
    kept = {k: unique[k] for p, _ in within for k in p}
    kept_finals = {e[1]: final[e[1]] for _, e in within}  # every end node is at the last frame
    # arcs, nodes and final weights
    assert lat is not None
    got = lattice_arcs(lat)
    assert got.keys() == kept.keys()
    for key, cost in kept.items():
        assert got[key] == pytest.approx(cost, abs=1e-12)
    nodes = list(zip(lat.node_frame.tolist(), lat.node_state.tolist()))
    assert nodes[0] == (0, 0) and nodes[1:] == sorted(nodes[1:])
    assert set(nodes) == {(0, 0)} | {k[:2] for k in kept} | {k[2:4] for k in kept}
    got_finals = {(f, s): float(w) for (f, s), w in zip(nodes, lat.final_cost) if math.isfinite(w)}
    assert all(f == num_frames for f, _ in got_finals), got_finals  # final costs on last-frame nodes only
    assert {s: w for (_, s), w in got_finals.items()} == pytest.approx(kept_finals)
    assert lat.num_arcs == len(kept) and lat.density == len(kept) / max(num_frames, 1)
    # word sequences and best path over the kept arcs (paths that do not revisit a node)
    simple = complete_paths(kept, kept_finals, num_frames, 0, visits=1)
    sequences: dict[tuple, float] = {}
    for p, e in simple:
        total = sum(path_cost(kept, p, e, kept_finals))
        sequences[words_of(p)] = min(total, sequences.get(words_of(p), INF))
    got_sequences = lat.word_sequences()
    assert got_sequences.keys() == sequences.keys()
    for seq, total in sequences.items():
        assert got_sequences[seq] == pytest.approx(total, abs=1e-9)
    words, graph, acoustic = lat.best_path()
    assert graph + acoustic == pytest.approx(best, abs=1e-9)
    candidates = [(words_of(p), path_cost(kept, p, e, kept_finals)) for p, e in simple]
    assert any(w == words and c == pytest.approx((graph, acoustic), abs=1e-9) for w, c in candidates)
    for ref in refs:
        expected = oracle_dijkstra(kept, {(num_frames, s) for s in kept_finals}, (0, 0), ref)
        assert lat.oracle_errors(ref) == expected
        assert lattice_file_oracle_errors(lat.to_kaldifst(), ref) == expected  # what a lattice file keeps
        assert expected <= min(levenshtein(ref, list(seq)) for seq in sequences)
    return lat


def levenshtein(a: list[int], b: list[int]) -> int:
    row = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        prev, row[0] = row[0], i
        for j, y in enumerate(b, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (x != y))
    return row[-1]


# ---------------------------------------------------------------------------------------------- hand-built

HAND_ARCS: list[Arc] = [
    (0, 0, 0, 1, 0, 0, 0.5, 0.0),  # epsilon chain 0 -> 1 -> 2 (word 7) with a cycle 1 <-> 2
    (0, 1, 0, 2, 0, 7, 0.25, 0.0),
    (0, 2, 0, 1, 0, 0, 0.5, 0.0),
    (0, 0, 0, 3, 0, 0, -0.2, 0.0),  # a negative epsilon weight, no cycle
    (0, 0, 1, 0, 1, 0, 0.1, 1.0),
    (0, 2, 1, 4, 2, 5, 0.3, 0.4),
    (0, 2, 1, 4, 2, 5, 0.3, 0.6),  # duplicate, costlier
    (0, 3, 1, 4, 1, 6, 0.2, 0.9),
    (1, 4, 1, 5, 0, 0, 0.1, 0.0),
    (1, 0, 2, 0, 1, 5, 0.0, 1.2),
    (1, 4, 2, 6, 3, 0, 0.1, 0.3),
    (1, 5, 2, 6, 3, 8, 0.2, 0.2),
    (1, 4, 2, 9, 1, 9, 0.0, 0.05),  # dead end: state 9 has no arcs at frame 2
    (1, 11, 2, 6, 1, 0, 0.0, 0.0),  # from an unreachable node
    (2, 0, 3, 0, 1, 0, 0.0, 1.0),
    (2, 6, 3, 7, 2, 0, 0.1, 0.2),
    (2, 6, 3, 8, 2, 5, 0.0, 0.1),
    (2, 6, 3, 7, 2, 0, 0.1, 0.15),  # duplicate, cheaper, recorded later
    (3, 8, 3, 7, 0, 0, 0.3, 0.0),  # frame-T node 8: final weight 3 (out of the smaller beams), reaches 7
    (3, 7, 3, 10, 0, 4, 0.0, 0.0),  # frame-T node 10: not final, a dead end
]
HAND_FINAL = [2.0, INF, INF, INF, INF, INF, INF, 0.5, 3.0, INF, INF, INF]
REFS = [[], [5], [7, 5, 8, 5], [6, 8], [9, 9, 9, 9, 9], [7, 5, 5, 7]]


@pytest.mark.parametrize("beam", [0.0, 0.3, 1.0, 2.5, INF])
def test_hand_built_lattice_matches_brute_force(beam: float) -> None:
    lat = check_against_brute_force(HAND_ARCS, HAND_FINAL, 3, beam, REFS)
    assert lat is not None
    finals = {(int(f), int(s)): float(w) for f, s, w in zip(lat.node_frame, lat.node_state, lat.final_cost)}
    assert finals.get((3, 8)) == (3.0 if beam >= 2.5 else INF if beam > 0 else None)
    if beam == INF:  # everything on a complete path; not the dead ends or the unreachable arc
        assert lat.num_arcs == 15 and lat.num_nodes == 12
    if beam == 0.0:  # 0 -eps-> 3 -1:6-> 4 -3-> 6 -2-> 7 (final), with the cheaper duplicate
        assert lat.word_sequences() == pytest.approx({(6,): -0.2 + 1.1 + 0.4 + 0.25 + 0.5})
        assert lat.best_path() == ((6,), pytest.approx(0.7), pytest.approx(1.35))


def test_zero_frames_and_epsilon_words() -> None:
    raw = make_raw([(0, 0, 0, 1, 0, 3, 0.5, 0.0)], 0)
    lat = prune_lattice(raw, np.array([1.0, 0.2], dtype=np.float32), INF)
    assert lat is not None and lat.num_nodes == 2 and lat.density == 1.0
    assert lat.word_sequences() == pytest.approx({(): 1.0, (3,): 0.7})
    assert lat.best_path() == ((3,), pytest.approx(0.7), 0.0)
    assert [lat.oracle_errors(r) for r in ([], [3], [4, 4])] == [0, 0, 2]


def test_no_final_state_gives_none() -> None:
    final = np.full(12, np.inf, dtype=np.float32)
    final[9] = 0.0  # only reachable at frame 2, not at T
    assert prune_lattice(make_raw(HAND_ARCS, 3), final, INF) is None
    assert prune_lattice(make_raw([], 2), final, 1.0) is None


def test_negative_epsilon_cycle_is_an_error() -> None:
    arcs = [(0, 0, 0, 1, 0, 0, -1.0, 0.0), (0, 1, 0, 0, 0, 0, 0.5, 0.0), (0, 0, 1, 0, 1, 0, 0.0, 0.0)]
    with pytest.raises(RuntimeError,
                       match="did not converge at frame 0: .*negative total weight.*Fix: .*non-negative"):
        prune_lattice(make_raw(arcs, 1), np.zeros(2, dtype=np.float32), 1.0)


def test_word_sequences_limit() -> None:
    lat = prune_lattice(make_raw(HAND_ARCS, 3), np.array(HAND_FINAL, dtype=np.float32), INF)
    assert len(lat.word_sequences(limit=100)) > 1
    with pytest.raises(ValueError, match="more than 1 paths"):
        lat.word_sequences(limit=1)


def test_raw_lattice_validation_and_builder() -> None:
    good = {name: np.zeros(2, dtype=np.int32) for name in
            ("src_frame", "src_state", "dst_frame", "dst_state", "ilabel", "olabel")}
    good.update(graph_cost=np.zeros(2), acoustic_cost=np.zeros(2))
    RawLattice(num_frames=1, start_state=0, **good)
    for change, match in [({"olabel": np.zeros(3)}, "differ in length"),
                          ({"dst_frame": np.array([2, 0])}, "src_frame \\+ 1"),
                          ({"ilabel": np.array([1, 0])}, "ilabel must be 0 exactly"),
                          ({"dst_frame": np.array([1, 0])}, "ilabel must be 0 exactly"),
                          ({"graph_cost": np.array([np.nan, 0])}, "finite"),
                          ({"olabel": np.array([0, -1])}, "labels must be >= 0")]:  # keys of the pruning
        with pytest.raises(ValueError, match=match):
            RawLattice(num_frames=1, start_state=0, **{**good, **change})
    builder = RawLatticeBuilder()
    builder.add(0, np.array([0, 1]), 1, np.array([2, 3]), np.array([1, 2]), 0, np.array([0.5, 0.25]), 1.0)
    builder.add(1, 2, 1, 3, 0, 4, -0.5, 0.0)
    raw = builder.build(1, 0)
    assert builder.num_arcs == raw.num_arcs == 3
    assert raw.dst_state.tolist() == [2, 3, 3] and raw.olabel.tolist() == [0, 0, 4]
    assert raw.src_frame.dtype == np.int32 and raw.graph_cost.dtype == np.float64


def test_kaldifst_round_trip(tmp_path) -> None:
    lat = prune_lattice(make_raw(HAND_ARCS, 3), np.array(HAND_FINAL, dtype=np.float32), INF)
    path = tmp_path / "sub" / "utt.lat"
    lat.write(path)
    assert not (tmp_path / "sub" / "utt.lat.tmp").exists()
    fst = read_lattice(path)
    assert fst.num_states == lat.num_nodes
    assert sum(fst.num_arcs(s) for s in range(fst.num_states)) == lat.num_arcs
    ok, ilabels, olabels, weight = kaldifst.get_linear_symbol_sequence(kaldifst.shortest_path(fst))
    words, graph, acoustic = lat.best_path()
    assert ok and tuple(olabels) == tuple(ilabels) == words
    assert weight.value1 == pytest.approx(graph, abs=1e-4)
    assert weight.value2 == pytest.approx(acoustic, abs=1e-4)
    lat.write(path, acoustic_scale=4.0)  # Kaldi's convention on disk: acoustic costs unscaled
    _, _, _, unscaled = kaldifst.get_linear_symbol_sequence(kaldifst.shortest_path(read_lattice(path)))
    assert unscaled.value1 == pytest.approx(graph, abs=1e-4) and unscaled.value2 == pytest.approx(acoustic / 4, abs=1e-4)
    for ref in REFS:  # the oracle of the file equals the lattice's
        assert lattice_file_oracle_errors(read_lattice(path), ref) == lat.oracle_errors(ref)
    assert {lattice_file_oracle_errors(read_lattice(path), ref) for ref in REFS} != {0}
    no_final = kaldifst.Lattice()
    no_final.add_state()
    no_final.start = 0
    with pytest.raises(ValueError, match="no final state.*Fix:"):
        lattice_file_oracle_errors(no_final, [1])
    with pytest.raises(ValueError, match="acoustic_scale"):
        lat.write(path, acoustic_scale=0.0)
    (tmp_path / "bad.lat").write_bytes(b"not an fst")
    for bad in (tmp_path / "bad.lat", tmp_path / "missing.lat"):
        with pytest.raises(DataError, match=bad.name):
            read_lattice(bad)


# ---------------------------------------------------------------------------------------------- property


@st.composite
def random_lattices(draw: st.DrawFn) -> tuple[list[Arc], list[float], int]:
    """Up to 3 frames over states 0..2; epsilon weights keep every cycle non-negative (a backward or
    self arc costs >= 1.5, at most 2 forward arcs of >= -0.5 fit in a simple cycle)."""
    frames, states = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    cost = st.integers(-5, 20).map(lambda c: c / 10)
    state = st.integers(0, states - 1)
    arcs: list[Arc] = []
    for f in range(frames + 1):
        for _ in range(draw(st.integers(0, 3))):
            s, d = draw(state), draw(state)
            weight = draw(cost) if d > s else draw(st.integers(15, 20).map(lambda c: c / 10))
            arcs.append((f, s, f, d, 0, draw(st.integers(0, 2)), weight, 0.0))
        for _ in range(draw(st.integers(2, 6)) if f < frames else 0):
            arcs.append((f, draw(state), f + 1, draw(state), draw(st.integers(1, 2)),
                         draw(st.integers(0, 3)), draw(cost), draw(cost)))
    for index in draw(st.lists(st.integers(0, len(arcs) - 1), max_size=3)) if arcs else []:
        arc = arcs[index]
        arcs.append(arc[:6] + (arc[6] + draw(st.sampled_from([0.0, 0.5])), arc[7]))
    final = [draw(st.sampled_from([INF, 0.0, 0.5, 1.0])) for _ in range(states)]
    return arcs, final, frames


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_lattices(), st.sampled_from([0.0, 0.4, 1.5, INF]),
       st.lists(st.integers(1, 3), max_size=4))
def test_random_lattices_match_brute_force(spec: tuple, beam: float, ref: list[int]) -> None:
    arcs, final, frames = spec
    check_against_brute_force(arcs, final, frames, beam, [ref, []])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_lattices(), st.sampled_from([0.0, 0.4, 1.5, INF]))
def test_compiled_pruning_equals_numpy(spec: tuple, beam: float) -> None:
    """The compiled pruning (lattice_kernels) gives the numpy pruning's lattice, array for array, with the
    duplicates, epsilon cycles and unreachable finals the generator draws."""
    from specbench.decoder.lattice_kernels import prune_compiled

    arcs, final, frames = spec
    raw, weights = make_raw(arcs, frames), np.array(final, dtype=np.float32)
    want, got = prune_lattice(raw, weights, beam), prune_compiled(raw, weights, beam)
    assert (want is None) == (got is None)
    if want is not None:
        for name in ("node_frame", "node_state", "final_cost", "src", "dst", "ilabel", "olabel", "graph_cost",
                     "acoustic_cost"):
            assert np.array_equal(getattr(got, name), getattr(want, name)), name
            assert getattr(got, name).dtype == getattr(want, name).dtype, name


def test_compiled_pruning_edge_cases() -> None:
    from specbench.decoder.lattice_kernels import prune_compiled

    final = np.array(HAND_FINAL, dtype=np.float32)
    assert prune_compiled(make_raw([], 2), final, 1.0) is None
    with pytest.raises(ValueError, match="lattice_beam"):
        prune_compiled(make_raw(HAND_ARCS, 3), final, -1.0)
    arcs = [(0, 0, 0, 1, 0, 0, -1.0, 0.0), (0, 1, 0, 0, 0, 0, -1.0, 0.0)]
    with pytest.raises(RuntimeError, match="did not converge: .*negative total weight.*Fix: .*non-negative"):
        prune_compiled(make_raw(arcs, 1), np.zeros(2, dtype=np.float32), 1.0)


@pytest.mark.parametrize("kind", ["numpy", "compiled"])
def test_final_weights_must_cover_every_frame_t_node(kind: str) -> None:
    """A frame-T node whose state has no final weight is refused by both prunings, also when it is only the
    source of an epsilon arc at frame T (reading past the end of `final` would give a garbage weight)."""
    from specbench.decoder.lattice_kernels import prune_compiled

    prune = prune_lattice if kind == "numpy" else prune_compiled
    final = np.array([np.inf, 0.0])
    # 0 -emitting-> (1, 1), final; and an epsilon arc at frame 1 from state 7 (unreachable) to state 1
    raw = RawLattice(1, 0, [0, 1], [0, 7], [1, 1], [1, 1], [1, 0], [0, 0], [0.0, 0.0], [0.5, 0.0])
    with pytest.raises(ValueError, match="final has 2 entries.*has state 7.*Fix: pass graph.final"):
        prune(raw, final, 5.0)
    raw = RawLattice(1, 0, [0], [0], [1], [3], [1], [0], [0.0], [0.5])  # an emitting arc into state 3
    with pytest.raises(ValueError, match="has state 3"):
        prune(raw, final, 5.0)
    with pytest.raises(ValueError, match="has state 4"):  # no frames: the start node is a frame-T node
        prune(RawLattice(0, 4, *([[]] * 8)), final, 5.0)
    fine = RawLattice(1, 0, [0, 1], [0, 1], [1, 1], [1, 0], [1, 0], [0, 0], [0.0, 0.0], [0.5, 0.0])
    assert prune(fine, np.array([1.0, 0.0]), 5.0).num_arcs == 2  # both frame-T nodes final


def test_compiled_pruning_equals_numpy_on_wide_nodes() -> None:
    """Nodes with more arcs than the compiled pruning sorts by insertion (a stable argsort then), with
    duplicates among them, arcs recorded out of frame order, and a start node that is not the lowest state
    of frame 0."""
    from specbench.decoder.lattice_kernels import SMALL_GROUP, prune_compiled

    rng = np.random.default_rng(7)
    arcs: list[Arc] = []
    for frame in range(3):
        for _ in range(4 * SMALL_GROUP):  # one wide source node per frame, 8 destination states
            arcs.append((frame, 5, frame + 1, 5 if rng.random() < 0.3 else int(rng.integers(0, 8)),
                         int(rng.integers(1, 4)), int(rng.integers(0, 3)), float(rng.integers(0, 4)) / 2,
                         float(rng.integers(0, 4)) / 2))
        arcs.append((frame, 5, frame, 2, 0, 1, 0.5, 0.0))
    order = rng.permutation(len(arcs))
    raw = make_raw([arcs[i] for i in order], 3, start=5)
    final = np.array([0.0, np.inf, 1.0, np.inf, 0.5, 0.0, np.inf, 2.0], dtype=np.float32)
    for beam in (0.0, 1.0, 3.0, np.inf):
        want, got = prune_lattice(raw, final, beam), prune_compiled(raw, final, beam)
        assert want is not None and got is not None
        assert want.num_arcs > SMALL_GROUP or beam < 3.0
        for name in ("node_frame", "node_state", "final_cost", "src", "dst", "ilabel", "olabel", "graph_cost",
                     "acoustic_cost"):
            assert np.array_equal(getattr(got, name), getattr(want, name)), (beam, name)
