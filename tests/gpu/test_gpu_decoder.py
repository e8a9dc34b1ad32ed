"""The GPU backend against the CPU backend and its numpy twin (skipped without a CUDA device).

Runs on the H200 test machine from the source tree (`make gpu-check`): numpy, cupy, pytest and the carried
kaldifst wheel only (no hypothesis, ray, mlflow or polars). Real scores come from `.specbench/gpu-carry/`
(`python scripts/gpu_carry.py`), else from the acoustic-model evaluation's Parquet scores. With
SPECBENCH_GPU_OUT set, a JSON summary of the parity checks is written there.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path

import numpy as np
import pytest

from specbench.decoder.cpu import CpuDecoder
from specbench.decoder.gpu import gpu_available
from specbench.decoder.lane_tables import HASH_TABLE_SLOTS
from specbench.decoder.options import SearchOptions
from specbench.decoder.twin import TwinDecoder
from specbench.wfst.graph import CsrGraph, read_graph

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not gpu_available(), reason="no CUDA device")]

ROOT = Path(__file__).resolve().parents[2]
CARRY = ROOT / ".specbench" / "gpu-carry"
SUMMARY: dict[str, object] = {}


def _gpu_decoder(graph: CsrGraph, options: SearchOptions, table_slots: int = 0):
    from specbench.decoder.gpu import GpuDecoder

    return GpuDecoder(graph, options, table_slots=table_slots)


def _write_summary() -> None:
    out = os.environ.get("SPECBENCH_GPU_OUT")
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        (Path(out) / "gpu_parity.json").write_text(json.dumps(SUMMARY, indent=2, sort_keys=True))


def _random_graph(rng: np.random.Generator, tmp: Path) -> tuple[CsrGraph, int]:
    """A small random graph as OpenFst text (epsilon weights > 0, emitting self-loops, finals)."""
    import kaldifst

    states, width = int(rng.integers(2, 7)), int(rng.integers(3, 5))
    lines = []
    for src in range(states):
        for _ in range(int(rng.integers(1 if src == 0 else 0, 5))):
            ilabel = int(rng.choice([0] + list(range(1, width + 1)) * 2))
            weight = float(np.float32(rng.uniform(0.25, 3.0) if ilabel == 0 else rng.uniform(-1.0, 3.0)))
            lines.append(f"{src} {int(rng.integers(0, states))} {ilabel} {int(rng.integers(0, 4))} {weight!r}")
    lines.sort(key=lambda line: not line.startswith("0 "))
    lines += [f"{s} {float(np.float32(rng.uniform(0, 2)))!r}" for s in range(states) if rng.random() < 0.5]
    fst = kaldifst.compile("\n".join(lines) + "\n", keep_state_numbering=True)
    path = tmp / "g.fst"
    assert fst.write(str(path))
    return read_graph(path), width


def _same(a, b, cost_tol: float = 0.0) -> bool:
    if a.status != b.status or a.word_ids != b.word_ids or a.stats != b.stats or a.partials != b.partials:
        return False
    return not a.ok or abs(a.total_cost - b.total_cost) <= cost_tol


def test_tiny_random_graphs_equal_twin_and_cpu() -> None:
    rng = np.random.default_rng(2026)
    infinite = SearchOptions(beam=1e9, max_active=2**31 - 1, min_active=0, lattice_beam=2.0)
    pruned = SearchOptions(beam=1.5, max_active=3, min_active=1, lattice_beam=2.0)
    checked = 0
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(150):
            graph, width = _random_graph(rng, Path(tmp))
            items = [(f"u{i}", rng.uniform(-5, 0, size=(int(rng.integers(1, 6)), width)).astype(np.float32))
                     for i in range(int(rng.integers(1, 5)))]
            for options in (infinite, pruned):
                try:
                    twin = TwinDecoder(graph, options)
                except ValueError:
                    continue  # the closure does not apply (covered by the twin's tests)
                gpu = _gpu_decoder(graph, options).decode_batch(items, 2)
                cpu = CpuDecoder(graph, options)
                for (utt, mat), got, want in zip(items, gpu, twin.decode_batch(items, 2), strict=True):
                    assert _same(got, want), (utt, got, want)
                    assert _same(got, cpu.decode(mat, utt, partial_every=2))
                    if got.ok:
                        assert np.array_equal(got.lattice.src, want.lattice.src)
                        assert np.allclose(got.lattice.graph_cost, want.lattice.graph_cost)
                    checked += 1
    SUMMARY["tiny_graph_utterances_identical"] = checked
    _write_summary()


def _real_scores(limit: int) -> tuple[Path, list[tuple[str, np.ndarray]]]:
    if (CARRY / "scores_test.npz").is_file():
        with np.load(CARRY / "scores_test.npz") as data:
            items = [(key, data[key].astype(np.float32)) for key in sorted(data.files)[:limit]]
        return CARRY / "TLG.fst", items
    parquet = ROOT / ".specbench" / "scores" / "am_slurp" / "test.parquet"
    graphs = sorted((ROOT / ".specbench" / "graphs").glob("slurp-*/TLG.fst"), key=lambda p: p.stat().st_mtime)
    if not parquet.is_file() or not graphs:
        pytest.skip("no real scores: run `python scripts/gpu_carry.py` and carry .specbench/gpu-carry")
    import pyarrow.parquet as pq

    table = pq.read_table(parquet).to_pylist()
    rows = sorted((r for r in table if r["status"] == "ok"), key=lambda r: r["utt_id"])[:limit]
    return graphs[-1], [(r["utt_id"], np.asarray(r["loglikes"], np.float32).reshape(r["num_frames"], -1))
                        for r in rows]


@pytest.mark.parametrize(("max_active", "table_slots"), [(10000, 0), (200, 0), (10000, HASH_TABLE_SLOTS)])
def test_slurp_one_best_equals_cpu(max_active: int, table_slots: int) -> None:
    """On all 1,000 test utterances, with the dense recombination table and with the hash table."""
    graph_path, items = _real_scores(1000)
    graph = read_graph(graph_path)
    options = SearchOptions(beam=15.0, max_active=max_active, min_active=20)
    gpu = _gpu_decoder(graph, options, table_slots).decode_batch(items, 3)
    cpu = CpuDecoder(graph, options)
    identical = bound = identical_bound = 0
    for (utt, mat), got in zip(items, gpu, strict=True):
        want = cpu.decode(mat, utt, partial_every=3)
        same = _same(got, want, cost_tol=1e-3)
        identical += same
        if want.stats.max_active_binds:
            bound += 1
            identical_bound += same
    SUMMARY[f"slurp_max_active_{max_active}" + (f"_table_slots_{table_slots}" if table_slots else "")] = {
        "utterances": len(items), "onebest_identical": identical / len(items),
        "max_active_bound_utterances": bound, "identical_where_bound": identical_bound}
    _write_summary()
    assert identical == len(items)


def test_kernel_log_equals_the_twins() -> None:
    """The frame loop's launches, host reads (and the bytes they read) and uploads, counted by the GPU backend
    as it runs them, equal the twin's count of the same batch (1-best and lattices, with partials; 64 utterances on 16 lanes, so lanes
    are refilled and lattice records taken at status points); with timing, every launch has its time."""
    from specbench.decoder.gpu import GpuDecoder

    graph_path, items = _real_scores(64)
    graph = read_graph(graph_path)
    for lattice_beam in (None, 8.0):
        options = SearchOptions(beam=15.0, max_active=200, min_active=20, lattice_beam=lattice_beam)
        gpu, twin = GpuDecoder(graph, options, max_lanes=16, timing=True), TwinDecoder(graph, options, max_lanes=16)
        gpu.decode_batch(items, 3)
        twin.decode_batch(items, 3)
        assert gpu.frame_steps == twin.frame_steps
        assert gpu.kernel_log.launches == twin.kernel_log.launches
        assert gpu.kernel_log.syncs == twin.kernel_log.syncs and gpu.kernel_log.arcs == twin.kernel_log.arcs
        assert gpu.kernel_log.uploads == twin.kernel_log.uploads
        assert gpu.kernel_log.read_bytes == twin.kernel_log.read_bytes  # paths and rows, no backpointers
        assert gpu.kernel_log.arena_entries == twin.kernel_log.arena_entries
        assert set(gpu.kernel_log.kernel_ms) == set(gpu.kernel_log.launches)
        SUMMARY[f"kernel_log_lattice_{lattice_beam}"] = gpu.kernel_log.report(gpu.frame_steps)
    _write_summary()


def test_cuda_graphs_replay_the_frame_loop_with_the_same_results() -> None:
    """With `cuda_graphs`, each frame step's kernels are captured once per queue parity and wave shape and
    replayed as one graph launch a step: the same results as the twin (1-best and lattices, with partials,
    lanes refilled over several waves), the same kernels run, one graph launch per frame step."""
    from specbench.decoder.gpu import GpuDecoder

    graph_path, items = _real_scores(48)
    graph = read_graph(graph_path)
    for lattice_beam in (None, 8.0):
        options = SearchOptions(beam=15.0, max_active=200, min_active=20, lattice_beam=lattice_beam)
        gpu = GpuDecoder(graph, options, max_lanes=8, cuda_graphs=True, arena_capacity=1 << 16)
        twin = TwinDecoder(graph, options, max_lanes=8, arena_capacity=1 << 16)
        got, want = gpu.decode_batch(items, 3), twin.decode_batch(items, 3)
        assert all(_same(g, w) for g, w in zip(got, want, strict=True))
        if lattice_beam is not None:
            assert all(np.array_equal(g.lattice.dst, w.lattice.dst) for g, w in zip(got, want) if w.ok)
        assert gpu.kernel_log.launches == twin.kernel_log.launches
        assert gpu.kernel_log.graph_launches == gpu.frame_steps == twin.frame_steps


def test_arc_ceiling_table_is_the_packed_minimum() -> None:
    """The ceiling microbenchmark does the work it claims: its table holds, per (lane, state), the minimum
    packed key (float32 cost << 32 | arc entry) over the token set's closed arcs, computed here in numpy."""
    from specbench.benchmarks.decoder import workloads as wl
    from specbench.benchmarks.decoder.ceiling import ceiling_token_set
    from specbench.decoder.backends import GraphFile
    from specbench.decoder.gpu.ceiling import arc_rate_ceiling
    from specbench.decoder.lane_tables import LaneGraph
    from specbench.decoder.search import gather_arcs
    from specbench.decoder.twin import ordered32

    graph_path, items = _real_scores(32)
    workload = wl.Workload("real", GraphFile(graph_path), tuple(items), 40.0)
    tokens = ceiling_token_set(workload, SearchOptions(beam=15.0, max_active=10000), lanes=32)
    lg = LaneGraph.build(read_graph(graph_path))
    report, table = arc_rate_ceiling(lg, *tokens, repeats=3, return_table=True)
    tok_lane, tok_state, tok_cost, ac = tokens
    entry, counts = gather_arcs(lg.offsets, lg.degree.astype(np.int64), tok_state)
    lane = tok_lane.repeat(counts).astype(np.int64)
    cost = (tok_cost.repeat(counts) + lg.weight[entry]) + ac[lane, lg.column[entry]].astype(np.float64)
    key = (ordered32(cost.astype(np.float32)).astype(np.uint64) << np.uint64(32)) | entry.astype(np.uint64)
    want = np.full(table.shape[0], np.uint64(2**64 - 1), dtype=np.uint64)
    np.minimum.at(want, lane * lg.num_states + lg.dest[entry], key)
    assert report["arcs"] == entry.shape[0] and np.array_equal(table, want)
    SUMMARY["arc_ceiling_check"] = report
    _write_summary()


@pytest.mark.parametrize("table_slots", [0, HASH_TABLE_SLOTS])
def test_slurp_lattices_equal_cpu(table_slots: int) -> None:
    graph_path, items = _real_scores(100)
    graph = read_graph(graph_path)
    options = SearchOptions(beam=15.0, max_active=10000, lattice_beam=8.0)
    gpu = _gpu_decoder(graph, options, table_slots).decode_batch(items)
    cpu = CpuDecoder(graph, options)
    arcs = frames = 0
    for (utt, mat), got in zip(items, gpu, strict=True):
        want = cpu.decode(mat, utt)
        assert got.ok == want.ok, utt
        if not want.ok:
            continue
        for name in ("src", "dst", "ilabel", "olabel", "node_state"):
            assert np.array_equal(getattr(got.lattice, name), getattr(want.lattice, name)), (utt, name)
        assert np.allclose(got.lattice.graph_cost, want.lattice.graph_cost, atol=1e-3)
        assert np.allclose(got.lattice.acoustic_cost, want.lattice.acoustic_cost, atol=1e-3)
        arcs, frames = arcs + got.lattice.num_arcs, frames + got.num_frames
    SUMMARY[f"slurp_lattices_table_slots_{table_slots}"] = {"utterances": len(items), "identical": True,
                                 "density": arcs / max(frames, 1)}
    _write_summary()


@pytest.mark.parametrize(("lattice_beam", "posterior_scale", "summary_key"), [
    (8.0, 0.5, "slurp_word_posteriors"),                 # the first grid's choice
    (15.0, 0.75, "slurp_word_posteriors_beam15"),        # the widened grid's choice
])
def test_slurp_word_posteriors_equal_cpu(lattice_beam: float, posterior_scale: float, summary_key: str) -> None:
    """Word posteriors from the GPU's lattices against the CPU's on every test utterance, at the word-confidence
    job's settings (jobs/word_confidence.toml: acoustic scale 1.2; lattice beam 15 and posterior scale 0.75
    chosen on devel, and the first grid's 8 and 0.5)."""
    from specbench.decoder.word_confidence import word_posteriors

    graph_path, items = _real_scores(1000)
    graph = read_graph(graph_path)
    options = SearchOptions(beam=15.0, max_active=10000, acoustic_scale=1.2, lattice_beam=lattice_beam)
    gpu = _gpu_decoder(graph, options).decode_batch(items)
    cpu = CpuDecoder(graph, options)
    worst, words, undefined = 0.0, 0, 0
    for (utt, mat), got in zip(items, gpu, strict=True):
        res = cpu.decode(mat, utt)
        want = word_posteriors(res.lattice if res.ok else None, posterior_scale)
        mine = word_posteriors(got.lattice if got.ok else None, posterior_scale)
        assert (mine.status, mine.word_ids) == (want.status, want.word_ids), utt
        undefined += not want.ok
        if want.posteriors:
            worst = max(worst, float(np.max(np.abs(np.subtract(mine.posteriors, want.posteriors)))))
            words += len(want.posteriors)
    SUMMARY[summary_key] = {"utterances": len(items), "words": words, "undefined": undefined,
                            "lattice_beam": lattice_beam, "posterior_scale": posterior_scale,
                            "max_posterior_difference": worst}
    _write_summary()
    assert worst < 1e-4


def test_bad_utterances_fail_alone_on_the_gpu() -> None:
    graph_path, items = _real_scores(3)
    graph = read_graph(graph_path)
    bad = items[0][1].copy()
    bad[2, 5] = math.nan
    batch = [items[0], ("nan", bad), ("empty", np.zeros((0, bad.shape[1]), np.float32)), items[1]]
    results = _gpu_decoder(graph, SearchOptions(beam=15.0, max_active=10000)).decode_batch(batch)
    assert results[0].ok and results[3].ok
    assert "frame 2, column 5" in results[1].status and results[2].status == "empty utterance"


def test_subnormal_scores_are_not_flushed_to_zero(tmp_path: Path) -> None:
    """cupy compiles with -ftz=true; the kernels' conversions must keep subnormals as numpy does: here the
    word-5 arc costs 1e-40 more than the word-7 arc only while that subnormal survives."""
    import kaldifst

    fst = kaldifst.compile("0 1 2 7 0\n0 1 1 5 0\n1 0\n", keep_state_numbering=True)
    assert fst.write(str(tmp_path / "g.fst"))
    graph = read_graph(tmp_path / "g.fst")
    scores = np.array([[0.0, -1e-40]], dtype=np.float32)
    options = SearchOptions(beam=10.0, max_active=100, min_active=0)
    want = CpuDecoder(graph, options).decode(scores, "sub")
    got = _gpu_decoder(graph, options).decode(scores, "sub")
    assert got.word_ids == want.word_ids == (5,)
