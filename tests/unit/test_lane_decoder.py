"""The GPU decoding algorithm (its numpy twin) against the CPU backend and brute force, on tiny random graphs.

The twin decodes several utterances of different lengths together as lanes; every field of every result
(words, costs, word end frames, search counters, partial hypotheses, lattices) must equal the CPU backend's,
at an infinite beam and under tight beam / max-active / min-active pruning, and at an infinite beam both
must equal brute force (best cost, and every word sequence of the lattice).
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_decoder_bruteforce import (
    CHAIN,
    INFINITE_BEAM,
    KALDI_DEFAULTS,
    brute_force,
    compile_graph,
    fst_text,
    random_graphs,
)

from specbench.decoder import lanes
from specbench.decoder.cpu import CpuDecoder
from specbench.decoder.lane_tables import partial_frame_indices
from specbench.decoder.options import SearchOptions
from specbench.decoder.result import STATUS_EMPTY, STATUS_OVERFLOW
from specbench.decoder.twin import TwinDecoder, from_ordered32, from_ordered64, ordered32, ordered64

pytestmark = pytest.mark.unit

TOL = 1e-6
FAST = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _utterances(seed: int, width: int, lengths: list[int]) -> list[tuple[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [(f"u{i}", rng.uniform(-5.0, 0.0, size=(t, width)).astype(np.float32)) for i, t in enumerate(lengths)]


def _assert_same(cpu, twin) -> None:
    assert twin.utt_id == cpu.utt_id and twin.status == cpu.status
    assert twin.word_ids == cpu.word_ids and twin.word_end_frames == cpu.word_end_frames
    assert twin.graph_cost == cpu.graph_cost and twin.acoustic_cost == cpu.acoustic_cost
    assert twin.stats == cpu.stats
    assert twin.partials == cpu.partials


def _all_simple_paths(arcs, finals, ac: np.ndarray) -> dict[tuple[int, ...], float]:
    """Every word sequence of a path over (frame, state) nodes that visits no node twice, with its lowest
    total cost (independent of the decoders)."""
    frames, found = ac.shape[0], {}

    def walk(t: int, s: int, cost: float, words: tuple[int, ...], seen: frozenset) -> None:
        if t == frames and s in finals:
            total = cost + finals[s]
            found[words] = min(found.get(words, math.inf), total)
        for src, d, i, o, w in arcs:
            if src != s or (i and t == frames):
                continue
            node = (t + (1 if i else 0), d)
            if node in seen:
                continue
            step = w + (ac[t, i - 1] if i else 0.0)
            walk(node[0], d, cost + step, words + ((o,) if o else ()), seen | {node})

    walk(0, 0, 0.0, (), frozenset({(0, 0)}))
    return found


def test_order_preserving_keys_round_trip_and_sort() -> None:
    values = np.array([-np.inf, -3.5, -0.0, 0.0, 1e-30, 2.25, 1e30, np.inf])
    assert np.array_equal(from_ordered64(ordered64(values)), values)
    assert np.all(np.diff(ordered64(values[[0, 1, 3, 4, 5, 6, 7]]).astype(np.float64)) > 0)
    v32 = values.astype(np.float32)
    assert np.array_equal(from_ordered32(ordered32(v32)), v32)
    assert np.all(np.diff(ordered32(v32[[0, 1, 3, 4, 5, 6, 7]]).astype(np.int64)) > 0)


@FAST
@given(random_graphs(), st.lists(st.integers(1, 4), min_size=1, max_size=4), st.integers(0, 2**32 - 1))
def test_infinite_beam_equals_cpu_and_brute_force(graph_spec, lengths: list[int], seed: int) -> None:
    arcs, finals, width = graph_spec
    graph = compile_graph(fst_text(arcs, finals))
    items = _utterances(seed, width, lengths)
    options = replace(INFINITE_BEAM, lattice_beam=math.inf)
    twin = TwinDecoder(graph, options, max_lanes=2).decode_batch(items, 2)  # lanes refilled
    cpu = CpuDecoder(graph, options)
    for (utt, loglikes), got in zip(items, twin, strict=True):
        want = cpu.decode(loglikes, utt, partial_every=2)
        _assert_same(want, got)
        ac = -loglikes.astype(np.float64)
        best, sequences = brute_force(arcs, finals, graph.num_states, ac)
        if not math.isfinite(best):
            assert not got.ok and got.lattice is None
            continue
        assert got.total_cost == pytest.approx(best, abs=TOL) and got.word_ids in sequences
        paths = _all_simple_paths(arcs, finals, ac)
        for lattice in (got.lattice, want.lattice):
            found = lattice.word_sequences()
            assert found.keys() == paths.keys()
            for words, cost in paths.items():
                assert found[words] == pytest.approx(cost, abs=1e-5)


@FAST
@given(random_graphs(), st.lists(st.integers(1, 6), min_size=1, max_size=5), st.integers(0, 2**32 - 1),
       st.sampled_from([0.5, 1.5, 4.0]), st.sampled_from([3, 4, 6]), st.sampled_from([0, 1, 2]),
       st.sampled_from([0.0, 0.75]))
def test_pruned_search_equals_cpu_exactly(graph_spec, lengths, seed, beam, max_active, min_active,
                                          lattice_beam) -> None:
    arcs, finals, width = graph_spec
    graph = compile_graph(fst_text(arcs, finals))
    items = _utterances(seed, width, lengths)
    options = SearchOptions(beam=beam, max_active=max_active, min_active=min_active, lattice_beam=lattice_beam)
    twin = TwinDecoder(graph, options, max_lanes=2).decode_batch(items, 1)  # lanes refilled
    cpu = CpuDecoder(graph, options)
    for (utt, loglikes), got in zip(items, twin, strict=True):
        want = cpu.decode(loglikes, utt, partial_every=1)
        _assert_same(want, got)
        if want.ok:
            for name in ("src", "dst", "ilabel", "olabel", "graph_cost", "acoustic_cost", "node_state"):
                assert np.array_equal(getattr(want.lattice, name), getattr(got.lattice, name)), name
            _, graph_cost, acoustic_cost = got.lattice.best_path()  # its words may differ by a tie
            assert graph_cost + acoustic_cost == pytest.approx(got.total_cost, abs=1e-5)
            assert got.lattice.word_sequences()[got.word_ids] == pytest.approx(got.total_cost, abs=1e-5)


def test_partials_keep_only_complete_words() -> None:
    graph = compile_graph(CHAIN)
    loglikes = np.log(np.array([[0.9, 0.1, 0.5], [0.2, 0.8, 0.5], [0.2, 0.7, 0.5]], dtype=np.float32))
    for result in (CpuDecoder(graph, INFINITE_BEAM).decode(loglikes, "c", partial_every=1),
                   TwinDecoder(graph, INFINITE_BEAM).decode(loglikes, "c", partial_every=1),
                   TwinDecoder(graph, replace(INFINITE_BEAM, partial_every=1)).decode(loglikes, "c")):
        assert result.word_ids == (5, 7, 6)
        assert [p.frame for p in result.partials] == [0, 1, 2]
        # after frame 0 the best token is in state 1 (path words 5); state 1 is not final, so word 5 may
        # still be spoken and is left out; after frame 1 the best path ends in final state 3 (words 5 7 6)
        assert [p.word_ids for p in result.partials] == [(), (5, 7, 6), (5, 7, 6)]


def test_batch_reports_bad_and_empty_utterances_alone() -> None:
    graph = compile_graph(CHAIN)
    good = np.log(np.full((3, 3), 0.5, dtype=np.float32))
    bad = good.copy()
    bad[1, 1] = np.nan
    results = TwinDecoder(graph, INFINITE_BEAM).decode_batch(
        [("a", good), ("nan", bad), ("empty", np.zeros((0, 3), np.float32)), ("narrow", good[:, :1]), ("b", good)])
    assert [r.utt_id for r in results] == ["a", "nan", "empty", "narrow", "b"]
    assert results[0].ok and results[4].ok and results[0].word_ids == results[4].word_ids
    assert "frame 1, column 1" in results[1].status and results[2].status == STATUS_EMPTY
    assert "1 columns" in results[3].status


def test_lane_splitting_does_not_change_results() -> None:
    graph = compile_graph(CHAIN)
    items = _utterances(5, 3, [3, 1, 5, 2, 4])
    options = SearchOptions(beam=3.0, max_active=3, min_active=1)
    one = TwinDecoder(graph, options, max_lanes=2).decode_batch(items, 2)
    many = TwinDecoder(graph, options, max_lanes=16).decode_batch(items, 2)
    assert one == many
    # with lattices, pruned on a host thread while the next batch decodes: each lane gets its own
    lattices = replace(options, lattice_beam=2.0)
    split = TwinDecoder(graph, lattices, max_lanes=2)
    for _ in range(2):  # a second call starts with no job of the first left over
        got = split.decode_batch(items, 2)
        for a, b in zip(got, TwinDecoder(graph, lattices, max_lanes=16).decode_batch(items, 2), strict=True):
            assert replace(a, lattice=None) == replace(b, lattice=None) and (a.lattice is None) == (b.lattice is None)
            assert a.lattice is None or np.array_equal(a.lattice.dst, b.lattice.dst)
    assert sum(r.lattice is not None for r in got) == sum(r.ok for r in got) > 0


def test_lanes_are_refilled_or_grouped_by_length() -> None:
    """Two lanes, lengths 10, 50, 12, 48. Refilled (longest first): 50 and 48 start together; the lane of 48
    idles one step and takes 12 at step 49, the other takes 10 at step 51: 61 frame steps. In batches of
    similar length: (10, 12) and (48, 50), 12 + 50 steps. Results as decoded one by one either way."""
    graph = compile_graph(CHAIN)
    items = _utterances(3, 3, [10, 50, 12, 48])
    options = SearchOptions(beam=3.0, max_active=3, min_active=1)
    alone = TwinDecoder(graph, options, max_lanes=1, refill=False)
    want = [alone.decode(m, u, 4) for u, m in items]
    for refill, steps in ((True, 61), (False, 62)):
        twin = TwinDecoder(graph, options, max_lanes=2, refill=refill)
        results = twin.decode_batch(items, 4)
        assert (twin.frame_steps, twin.lane_frames) == (steps, 120)
        assert results == want
        assert [r.utt_id for r in results] == ["u0", "u1", "u2", "u3"]


def test_refilled_lanes_give_every_utterance_its_own_results_and_lattice(monkeypatch) -> None:
    """Eleven utterances on three refilled lanes, with partials and lattices (their records taken from the
    kernels at status points every two frame steps): every field equal to the CPU backend's, lattices array
    for array; with an arena small enough to close a wave early, the same again over several waves; with an
    arena window (the device's ring of backpointers) too small for three lanes' utterances and a lattice
    window too small for two status periods, lanes overflow and are retried, and every result is still the
    same. With three lattice workers, each take's records grouped in chunks of three records and the lattices
    pruned one utterance a job: the same lattices."""
    monkeypatch.setattr(lanes, "STATUS_EVERY", 2)
    graph = compile_graph(CHAIN)
    items = _utterances(11, 3, [7, 3, 9, 2, 4, 12, 5, 5, 2, 8, 6])
    options = SearchOptions(beam=3.0, max_active=3, min_active=1, lattice_beam=1.5)
    cpu = CpuDecoder(graph, options)
    want = [cpu.decode(m, u, partial_every=2) for u, m in items]
    assert all(r.ok for r in want)
    for capacities in ({}, {"arena_capacity": 120}, {"arena_window": 40, "lattice_window": 40},
                       {"lattice_workers": 3}):
        if "lattice_workers" in capacities:
            monkeypatch.setattr(lanes, "GROUP_CHUNK_MIN", 3)
            monkeypatch.setattr(lanes, "LATTICE_JOB_MIN", 1)
        twin = TwinDecoder(graph, options, max_lanes=3, **capacities)
        got = twin.decode_batch(items, 2)
        for a, b in zip(want, got, strict=True):
            _assert_same(a, b)
            for name in ("src", "dst", "ilabel", "olabel", "graph_cost", "acoustic_cost", "node_state"):
                assert np.array_equal(getattr(a.lattice, name), getattr(b.lattice, name)), name
        frames = sum(m.shape[0] for _, m in items)
        if "arena_window" in capacities:  # overflowed lanes decoded again
            assert twin.lane_frames > frames
        else:
            assert twin.frame_steps < frames / 3 + 15 and twin.lane_frames == frames
        assert twin.kernel_log.syncs["status"] >= 3  # taken as they end


def test_decode_stream_passes_results_on_as_utterances_end(monkeypatch) -> None:
    """`decode_stream`: a bad item at once; then, with status points every two frame steps, results while
    later utterances still decode (1-best: results with lattices wait for the worker threads' pruning, so
    when they come depends on the machine's load); every result (lattices too) that of `decode_batch`."""
    monkeypatch.setattr(lanes, "STATUS_EVERY", 2)
    graph = compile_graph(CHAIN)
    items = _utterances(5, 3, [6, 3, 8, 2, 5, 9, 4, 7]) + [("bad", np.zeros((3, 1), dtype=np.float32))]
    for lattice_beam in (None, 1.5):
        options = SearchOptions(beam=3.0, max_active=3, min_active=1, lattice_beam=lattice_beam)
        want = TwinDecoder(graph, options, max_lanes=2).decode_batch(items, 2)
        twin = TwinDecoder(graph, options, max_lanes=2)
        seen = [(position, result, twin.frame_steps) for position, result in twin.decode_stream(items, 2)]
        assert seen[0][0] == len(items) - 1 and not seen[0][1].ok  # the bad item first
        assert sorted(p for p, _, _ in seen) == list(range(len(items)))
        if lattice_beam is None:
            assert sum(steps < twin.frame_steps for _, _, steps in seen[1:]) >= 4  # before the wave's last step
        for position, result, _ in seen:
            assert replace(result, lattice=None) == replace(want[position], lattice=None)
            assert (result.lattice is None) == (want[position].lattice is None)
            assert result.lattice is None or np.array_equal(result.lattice.dst, want[position].lattice.dst)


def test_kernel_log_counts_the_gpu_frame_loops_launches_and_synchronizations(monkeypatch) -> None:
    """The twin's KernelLog: the same kernels at every frame step (lane_tables.FRAME_LAUNCHES, the selection one
    per-lane launch), three more where lanes end or take a partial, five more for each step's epsilon links
    with lattices; no host read inside the frame loop but one at each status point (every STATUS_EVERY
    steps, which also traces the best paths of the utterances released since the last one and frees the
    arena: `trace_paths`, `set_taken`); the refills planned at the start and at status points, one upload
    each, and one launch at each step where a lane is refilled; one `trace_paths` at the wave's end."""
    graph = compile_graph(CHAIN)
    items = _utterances(2, 3, [3, 5])
    options = SearchOptions(beam=3.0, max_active=3, min_active=1)
    twin = TwinDecoder(graph, options)
    twin.decode_batch(items)
    log = twin.kernel_log
    assert twin.frame_steps == 5 and not log.syncs and log.uploads == {"refill plan": 1}
    assert log.launches["best_pick"] == 2  # the steps where a lane ends
    assert log.launches["lane_reduce"] == 5 and log.launches["lane_select"] == 5 and log.arcs > 0
    assert log.launches["scan_partials"] == 10 and sum(log.launches.values()) == 5 * 13 + 2 * 3 + 1 + 1
    report = log.report(twin.frame_steps, seconds=2.0)
    assert report["syncs_per_frame"] == 0 and report["arcs_per_second"] == log.arcs / 2.0
    assert report["launches_per_frame"] == (5 * 13 + 2 * 3 + 1 + 1) / 5
    twin.reset_counts()
    assert twin.frame_steps == 0 and not twin.kernel_log.launches
    lattices = TwinDecoder(graph, replace(options, lattice_beam=4.0))
    lattices.decode_batch(items, 2)  # partials after frames 1 and 3: two more lane_best passes
    assert lattices.kernel_log.launches["eps_link_write"] == 6 and not lattices.kernel_log.syncs
    assert lattices.kernel_log.launches["best_pick"] == 4
    monkeypatch.setattr(lanes, "STATUS_EVERY", 2)
    three = TwinDecoder(graph, options, max_lanes=2)
    three.decode_batch(_utterances(2, 3, [3, 5, 2]))  # 5 and 3 first; 2 on the lane of 3 from step 4 to 6
    assert three.frame_steps == 6 and three.kernel_log.syncs == {"status": 3}
    assert three.kernel_log.uploads["refill plan"] == 2  # planned at step 0, and at step 4 for steps 4 and 5
    assert three.kernel_log.launches["refill_lanes"] == 2  # the placements at step 0 and at step 4
    assert three.kernel_log.launches["trace_paths"] == 3 + 1 and three.kernel_log.launches["set_taken"] == 3


def test_queue_overflow_is_counted_and_reported() -> None:
    graph = compile_graph(CHAIN)
    items = _utterances(1, 3, [4, 4])
    results = TwinDecoder(graph, INFINITE_BEAM, arc_capacity=2).decode_batch(items)
    assert all(r.status == STATUS_OVERFLOW and r.stats.queue_overflows > 0 for r in results)
    results = TwinDecoder(graph, replace(INFINITE_BEAM, lattice_beam=1.0), lattice_capacity=3).decode_batch(items)
    assert any(r.status == STATUS_OVERFLOW for r in results)


def test_hash_table_recombination_equals_the_dense_table_and_overflows_when_full() -> None:
    """`table_slots`: a lane's recombination table as a hash table over states. A fan of 20 states reached in
    one frame fits 32 slots (every field as with the dense table) and overflows 16, reported as such."""
    arcs = [(0, s, 1, s, 0.05 * s) for s in range(1, 21)] + [(s, s, 2, 0, 0.01 * s) for s in range(1, 21)]
    graph = compile_graph(fst_text(arcs, {s: 0.0 for s in range(1, 21)}))
    items = _utterances(5, 3, [3, 1, 4])
    options = replace(INFINITE_BEAM, lattice_beam=1.0)
    dense = TwinDecoder(graph, options).decode_batch(items, 1)
    assert all(r.ok for r in dense)
    hashed = TwinDecoder(graph, options, table_slots=32).decode_batch(items, 1)
    for got, want in zip(hashed, dense, strict=True):
        assert replace(got, lattice=None) == replace(want, lattice=None)
        assert np.array_equal(got.lattice.dst, want.lattice.dst)
    full = TwinDecoder(graph, options, table_slots=16).decode_batch(items)
    assert all(r.status == STATUS_OVERFLOW and r.stats.queue_overflows >= 4 for r in full)
    for bad in (8, 24, 2**31):
        with pytest.raises(ValueError, match="table_slots must be 0"):
            TwinDecoder(graph, options, table_slots=bad)


def test_hash_tables_smaller_than_a_new_lanes_tokens_are_refused_with_lattices() -> None:
    """A new lane starts with the start state and its epsilon closure (here 21 states): the GPU's table of
    epsilon-link token costs, of table_slots slots, would overflow and lose the links (the twin's is dense)."""
    arcs = [(0, s, 0, 0, 0.05 * s) for s in range(1, 21)] + [(s, s, 1, s, 0.0) for s in range(1, 21)]
    graph = compile_graph(fst_text(arcs, {s: 0.0 for s in range(1, 21)}))
    options = replace(INFINITE_BEAM, lattice_beam=1.0)
    with pytest.raises(ValueError, match=r"table_slots = 16 holds fewer states than a new lane starts with \(21"):
        TwinDecoder(graph, options, table_slots=16)
    TwinDecoder(graph, INFINITE_BEAM, table_slots=16)  # without lattices no link table is kept
    TwinDecoder(graph, options, table_slots=32)


def test_lanes_that_overflow_together_are_decoded_again_apart() -> None:
    """With an arena just big enough for each utterance alone, a batch of them overflows the shared queue;
    the overflowed lanes are decoded again in smaller batches and end with the results of ample queues."""
    graph = compile_graph(CHAIN)
    items = _utterances(7, 3, [5, 4, 5, 3, 5, 4])
    ample = TwinDecoder(graph, INFINITE_BEAM).decode_batch(items)
    assert all(r.ok for r in ample)
    capacity = next(c for c in range(1, 10_000)
                    if all(TwinDecoder(graph, INFINITE_BEAM, arena_capacity=c).decode(m, u).ok for u, m in items))
    tight = TwinDecoder(graph, INFINITE_BEAM, arena_capacity=capacity)
    assert any(r.status == STATUS_OVERFLOW for _, r in tight._decode_wave(
        [(i, u, tight._checked_costs(u, m)) for i, (u, m) in enumerate(items)], None))  # together they overflow
    assert tight.decode_batch(items) == ample


def test_an_utterance_that_fills_the_arena_ring_alone_is_decoded_again_with_a_larger_ring() -> None:
    """A ring of 8 backpointers holds no utterance of the batch alone: each is decoded again alone with the
    ring doubled until it fits, and every result equals the CPU backend's. With the capacity at 16 the ring
    stops there and the long utterances keep the overflow; an overflow of another queue (candidate arcs) is
    not retried with a larger ring."""
    graph = compile_graph(CHAIN)
    items = _utterances(3, 3, [9, 4, 12])
    cpu = CpuDecoder(graph, INFINITE_BEAM)
    want = [cpu.decode(m, u) for u, m in items]
    assert all(r.ok for r in want)
    twin = TwinDecoder(graph, INFINITE_BEAM, max_lanes=2, arena_window=8)
    for a, b in zip(want, twin.decode_batch(items), strict=True):
        _assert_same(a, b)
    assert twin.ring_retries >= len(items)
    capped = TwinDecoder(graph, INFINITE_BEAM, max_lanes=2, arena_window=8, arena_capacity=16)
    got = capped.decode_batch(items)
    assert any(r.status == STATUS_OVERFLOW for r in got) and capped.ring_retries >= 1
    for a, b in zip(want, got, strict=True):
        assert b.status == STATUS_OVERFLOW or a.word_ids == b.word_ids
    arcs = TwinDecoder(graph, INFINITE_BEAM, arc_capacity=2)
    assert all(r.status == STATUS_OVERFLOW for r in arcs.decode_batch(items)) and arcs.ring_retries == 0


def test_partial_frames_and_bad_options(monkeypatch) -> None:
    assert partial_frame_indices(10, 3) == (2, 5, 8) and partial_frame_indices(10, None) == ()
    graph = compile_graph(CHAIN)
    monkeypatch.setattr(lanes, "RECORD_DTYPE", np.int8)  # records too narrow for the graph's arc indices
    wide = compile_graph("".join(f"0 0 {i % 3 + 1} 0 0.0\n" for i in range(200)) + "0 0.0\n")
    with pytest.raises(ValueError, match="200 arcs"):
        TwinDecoder(wide, replace(KALDI_DEFAULTS, lattice_beam=1.0))
    TwinDecoder(wide, KALDI_DEFAULTS)  # without lattices there are no records
    monkeypatch.undo()
    with pytest.raises(ValueError, match="lattice_beam"):
        TwinDecoder(graph, replace(KALDI_DEFAULTS, lattice_beam=-1.0))
    with pytest.raises(ValueError, match="max_lanes"):
        TwinDecoder(graph, KALDI_DEFAULTS, max_lanes=0)
    with pytest.raises(ValueError, match="arc_capacity"):
        TwinDecoder(graph, KALDI_DEFAULTS, arc_capacity=0)
    with pytest.raises(TypeError, match="TwinDecoder.options"):
        TwinDecoder(graph, {"beam": 15.0})  # type: ignore[arg-type]
    negative = compile_graph("0 1 1 1 1.0\n1 2 0 2 -0.5\n2 0.5\n")
    with pytest.raises(ValueError, match="epsilon closure"):
        TwinDecoder(negative, KALDI_DEFAULTS)


def test_float32_ties_are_broken_by_the_exact_float64_cost() -> None:
    """Two arcs into one state whose costs round to the same float32 but differ in float64: the packed
    (float32 cost, arc) key alone would pick the lower arc (word 1); the exact cost picks word 2."""
    graph = compile_graph("0 1 1 1 1.0\n0 1 2 2 1.0\n1 0\n")
    loglikes = -np.array([[2.0**-20 + 2.0**-40, 2.0**-20]], dtype=np.float32)
    assert np.float32(1 + 2.0**-20 + 2.0**-40) == np.float32(1 + 2.0**-20)
    cpu = CpuDecoder(graph, INFINITE_BEAM).decode(loglikes, "tie")
    twin = TwinDecoder(graph, INFINITE_BEAM).decode(loglikes, "tie")
    assert cpu.word_ids == twin.word_ids == (2,)
    _assert_same(cpu, twin)


def test_lattice_links_only_reach_states_that_hold_a_token() -> None:
    """The epsilon move 0 -> 2 costs exactly the beam, so the search prunes state 2 (the closure prunes a
    move landing on the cutoff): no lattice link may lead there, and the lattice's best path is the 1-best."""
    graph = compile_graph("0 0 1 0 0.0\n0 2 0 0 0.5\n0 1.0\n2 0.0\n")
    loglikes = np.array([[-1.315, -2.0, -3.0]], dtype=np.float32)
    options = SearchOptions(beam=0.5, max_active=3, min_active=0, lattice_beam=0.0)
    for result in (CpuDecoder(graph, options).decode(loglikes, "u"), TwinDecoder(graph, options).decode(loglikes, "u")):
        _, graph_cost, acoustic_cost = result.lattice.best_path()
        assert graph_cost + acoustic_cost == pytest.approx(result.total_cost, abs=1e-6)
        assert 2 not in result.lattice.node_state.tolist()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_graphs(), st.lists(st.integers(1, 6), min_size=1, max_size=5), st.integers(0, 2**32 - 1),
       st.sampled_from([0.0, 0.75, math.inf]))
def test_compiled_records_pruning_equals_the_numpy_path(graph_spec, lengths, seed, lattice_beam) -> None:
    """`lattice_kernels.prune_records` (raw lattice and pruning in one compiled call) gives, from the twin's
    records of every utterance, the lattice of `lattice_from_records` with the numpy pruning, array for array,
    and leaves its thread's node table as it found it."""
    from specbench.decoder import lattice_paths
    from specbench.decoder.lattice import prune_lattice
    from specbench.decoder.lattice_kernels import node_table, prune_records

    arcs, finals, width = graph_spec
    graph = compile_graph(fst_text(arcs, finals))
    items = _utterances(seed, width, lengths)
    handed = []
    real = lattice_paths.lane_lattices
    lattice_paths.lane_lattices = lambda g, batch, records, beam: handed.append((batch, records)) or real(
        g, batch, records, beam)
    try:
        TwinDecoder(graph, SearchOptions(beam=4.0, max_active=4, min_active=1, lattice_beam=lattice_beam), max_lanes=2
                    ).decode_batch(items)
    finally:
        lattice_paths.lane_lattices = real
    final = graph.final.astype(np.float64)
    for batch, records in handed:
        assert len(records) == len(batch.utt_ids)
        for u in range(len(batch.utt_ids)):
            costs = batch.utterance_costs(u)
            want = lattice_paths.lattice_from_records(graph, costs, records[u], lattice_beam, prune_lattice, final)
            got = prune_records(graph, costs, records[u], final, lattice_beam)
            assert (want is None) == (got is None)
            for name in ("node_frame", "node_state", "final_cost", "src", "dst", "ilabel", "olabel",
                         "graph_cost", "acoustic_cost"):
                assert want is None or np.array_equal(getattr(got, name), getattr(want, name)), name
    assert (node_table(graph.num_states) == -1).all()  # this thread's table, reused: left as found


def test_compiled_record_grouping_equals_the_numpy_reference() -> None:
    """`path_kernels.group_records` (what the lane decoder uses) against `lanes.records_by_utterance` followed
    by a stable sort by utterance, on random placements (lanes refilled at random steps) and records; a record
    before its lane's first placement is an error."""
    from specbench.decoder.path_kernels import group_records

    rng = np.random.default_rng(7)
    for _ in range(30):
        lanes_, placements, utt = int(rng.integers(1, 6)), [], 0
        for lane in range(lanes_):
            step = int(rng.integers(0, 3))
            for _ in range(int(rng.integers(1, 4))):
                placements.append((lane, step, utt))
                utt, step = utt + 1, step + int(rng.integers(2, 6))
        placements = np.array(placements, dtype=np.int64)
        lane_first = {int(p[0]): int(p[1]) for p in placements[::-1]}
        lane = rng.integers(0, lanes_, size=int(rng.integers(0, 60)))
        step = np.array([lane_first[int(x)] + int(rng.integers(0, 12)) for x in lane], dtype=np.int64)
        records = np.stack([lane, step, rng.integers(0, 9, lane.shape[0]), rng.integers(-5, 9, lane.shape[0])],
                           axis=1).astype(np.int64)
        placements = placements[np.argsort(placements[:, 1], kind="stable")]  # in the order made: by step
        want = lanes.records_by_utterance(records, placements)
        want = want[np.argsort(want[:, 0], kind="stable")] if want.shape[0] else want
        grouped, keys, bounds = group_records(records, placements)
        assert np.array_equal(grouped, want[:, 1:]) if want.shape[0] else grouped.shape == (0, 3)
        assert keys.tolist() == sorted(set(want[:, 0].tolist()))
        assert np.array_equal(np.repeat(keys, np.diff(bounds)), want[:, 0])
    early = np.array([[0, 0, 1, 1]], dtype=np.int64)
    with pytest.raises(ValueError, match="precedes every placement"):
        group_records(early, np.array([[0, 3, 0]], dtype=np.int64))
