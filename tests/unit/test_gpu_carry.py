"""The decoder benchmark's helpers and the GPU carry folder's: utterance selection, score files, wheel tags,
size accounting, the multi-process GPU timing (run with the GPU algorithm's numpy twin), the summary metrics,
that `python -m specbench bench decoder` runs without ray, mlflow, polars and tqdm, and that `train mt
--no-mlflow` (how `scripts/gpu_train_mt.py` trains there) runs without ray, mlflow and polars."""

from __future__ import annotations

import importlib.util
import json
import math
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from specbench.benchmarks.decoder import agreement as ag
from specbench.benchmarks.decoder import workloads as wl
from specbench.benchmarks.decoder.backends import BACKENDS as TIMERS
from specbench.benchmarks.decoder.backends import (
    alternating_ratio,
    cuda_graphs_effect,
    gpu_profile,
    lane_refill_effect,
    single_utterance_latency,
)
from specbench.benchmarks.decoder.ceiling import ceiling_token_set
from specbench.benchmarks.decoder.cpu_scaling import core_counts, time_cpu_cores
from specbench.benchmarks.decoder.gpu_processes import StreamPlan, run_gpu_processes, stream_repeats
from specbench.decoder.backends import GraphFile, make_decoder
from specbench.decoder.lane_tables import STATUS_EVERY
from specbench.decoder.options import SearchOptions
from specbench.errors import DataError
from specbench.wfst.fst_binary import write_vector_fst
from specbench.wfst.graph import from_arrays

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("gpu_carry", ROOT / "scripts" / "gpu_carry.py")
gpu_carry = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gpu_carry)

IDS = ["test-000002-flite-rms-r100-clean", "test-000001-espeak-en-us-f4-r085-snr20",
       "test-000000-espeak-en-us-f3-r100-clean", "test-000003-flite-kal16-r100-clean",
       "test-000004-espeak-en-us-f4-r115-snr30"]


def tiny_graph(tmp: Path) -> Path:
    """Two states; words 1 and 2 on emitting arcs, a blank-like self-loop; state 1 final."""
    path = tmp / "g.fst"
    graph = from_arrays(0, np.array([np.inf, 0.0], dtype=np.float32), src=np.array([0, 1, 1, 0]),
                        dest=np.array([1, 1, 0, 0]), ilabel=np.array([1, 2, 1, 2]), olabel=np.array([1, 0, 2, 0]),
                        weight=np.array([0.5, 0.1, 0.2, 0.3], dtype=np.float32))
    write_vector_fst(path, graph)
    return path


def scores(n: int, seed: int = 0) -> list[tuple[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    ids = [f"test-{i:06d}-{'flite-rms' if i % 2 else 'espeak-en-us-f4'}-r100-clean" for i in range(n)]
    return [(u, np.log(rng.dirichlet(np.ones(3), size=int(rng.integers(3, 12)))).astype(np.float32)) for u in ids]


# ---- selection and score files -------------------------------------------------------------------------

def test_held_out_selection_is_sorted_and_cut() -> None:
    assert wl.select_utterances(IDS, 10) == [IDS[1], IDS[0], IDS[4]]
    assert wl.select_utterances(IDS, 2) == [IDS[1], IDS[0]]
    assert not wl.is_held_out("test-000000-espeak-en-us-f3-r100-clean")
    assert not wl.is_held_out("test-000000-flite-rmsx-r100-clean")
    with pytest.raises(ValueError):
        wl.select_utterances(IDS, 0)


def test_npz_and_parquet_scores_read_the_same(tmp_path: Path) -> None:
    items = scores(6) + [("test-000100-flite-slt-r100-clean", np.zeros((2, 3), np.float32))]
    npz = tmp_path / "s.npz"
    gpu_carry.write_scores_npz(items, npz)
    with pytest.raises(DataError, match="frame shift"):
        wl.load_scores(npz, 4)
    (tmp_path / "manifest.json").write_text(json.dumps({"scores": {"file": "s.npz", "frame_shift_ms": 40.0}}))
    from_npz, shift = wl.load_scores(npz, 4)
    assert shift == 40.0 and [u for u, _ in from_npz] == sorted(u for u, _ in items[:6])[:4]
    table = pa.table({"utt_id": [u for u, _ in items], "frame_shift_ms": [40.0] * len(items),
                      "num_frames": [len(m) for _, m in items], "num_classes": [3] * len(items),
                      "loglikes": [m.ravel().tolist() for _, m in items],
                      "status": ["ok"] * (len(items) - 2) + ["bad", "ok"]})
    pq.write_table(table, tmp_path / "s.parquet")
    from_parquet, shift = wl.load_scores(tmp_path / "s.parquet", 10)
    assert shift == 40.0
    bad = items[-2][0]
    expected = sorted((u, m) for u, m in items[:6] if u != bad)
    assert [u for u, _ in from_parquet] == [u for u, _ in expected]
    for (_, a), (_, b) in zip(from_parquet, expected):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(DataError, match="does not exist"):
        wl.load_scores(tmp_path / "missing.parquet", 1)
    workload = wl.load_workload("held_out_test", tiny_graph(tmp_path), tmp_path / "s.parquet", 3)
    assert workload.ids == [u for u, _ in expected[:3]] and workload.frame_shift_ms == 40.0
    assert workload.audio_seconds == pytest.approx(sum(len(m) for _, m in expected[:3]) * 0.04)
    with pytest.raises(ValueError, match="held_out_test"):
        wl.load_workload("nope", tiny_graph(tmp_path), tmp_path / "s.parquet", 3)


def test_real_speech_workload_reads_a_folder_of_score_files(tmp_path: Path) -> None:
    """The HCLG workload: the first N ok rows by id across every Parquet file of a folder (any ids, no
    held-out-voice filter), with the matrices and frame shift as written; a missing folder names the job."""
    rng = np.random.default_rng(3)
    written = {f"asterisk-{k:03d}": rng.normal(size=(k + 2, 4)).astype(np.float32) for k in range(7)}
    folder = tmp_path / "scores"
    folder.mkdir()
    for part, keys in enumerate([["asterisk-004", "asterisk-000", "asterisk-006"],
                                 ["asterisk-002", "asterisk-001", "asterisk-005", "asterisk-003"]]):
        pq.write_table(pa.table({
            "utt_id": keys, "frame_shift_ms": [10.0] * len(keys),
            "num_frames": [len(written[k]) for k in keys], "num_classes": [4] * len(keys),
            "loglikes": [written[k].ravel().tolist() for k in keys],
            "status": ["bad audio" if k == "asterisk-001" else "ok" for k in keys]}), folder / f"{part}.parquet")
    workload = wl.load_workload("real_speech", tiny_graph(tmp_path), folder, 3)
    assert workload.name == "real_speech" and workload.frame_shift_ms == 10.0
    assert workload.ids == ["asterisk-000", "asterisk-002", "asterisk-003"]
    for utt_id, mat in workload.items:
        np.testing.assert_array_equal(mat, written[utt_id])
    assert len(wl.load_workload("real_speech", tiny_graph(tmp_path), folder, 100).items) == 6
    with pytest.raises(DataError, match="real_speech.toml"):
        wl.load_workload("real_speech", tiny_graph(tmp_path), tmp_path / "nothing", 3)


# ---- wheels and sizes ----------------------------------------------------------------------------------

def test_wheel_tags() -> None:
    assert gpu_carry.wheel_fits("kaldifst-1.8.3-cp312-cp312-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl")
    assert gpu_carry.wheel_fits("kaldiio-2.18.1-py3-none-any.whl")
    assert gpu_carry.wheel_fits("x-1.0-cp312-cp312-manylinux2014_x86_64.whl")
    assert not gpu_carry.wheel_fits("x-1.0-cp311-cp311-manylinux2014_x86_64.whl")
    assert not gpu_carry.wheel_fits("x-1.0-cp312-cp312-manylinux_2_34_x86_64.whl")
    assert not gpu_carry.wheel_fits("x-1.0-cp312-cp312-manylinux2014_aarch64.whl")
    assert not gpu_carry.wheel_fits("x-1.0-cp312-cp312-macosx_11_0_x86_64.whl")
    assert gpu_carry.wheel_tags("kaldi_decoder-0.3.2-cp312-cp312-manylinux_2_28_x86_64.whl")[:2] == (
        "kaldi_decoder", "0.3.2")


def test_size_accounting(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "x").write_bytes(b"1" * 10)
    (tmp_path / "y").write_bytes(b"1" * 5)
    assert gpu_carry.folder_bytes(tmp_path) == 15
    assert gpu_carry.folder_bytes(tmp_path / "none") == 0
    assert gpu_carry.check_budget(10, 15, limit=26) == 25
    with pytest.raises(ValueError, match="over the"):
        gpu_carry.check_budget(10, 16, limit=26)


# ---- the GPU timing machinery and the summary -----------------------------------------------------------

def test_gpu_processes_shard_time_and_reassemble(tmp_path: Path) -> None:
    graph_path, items = tiny_graph(tmp_path), scores(7)
    options = SearchOptions(beam=15.0, max_active=100, min_active=1, acoustic_scale=1.0)
    workload = wl.Workload("tiny", GraphFile(graph_path), tuple(items), 40.0)

    reference = TIMERS["cpu"](workload, options).outcomes
    runs = run_gpu_processes(graph_path, items, options, 3, [("gpu", None), ("gpu_lattice", 8.0)],
                             decoder="specbench.decoder.twin:TwinDecoder", plan=StreamPlan(10, 0.3))
    assert set(runs) == {"gpu", "gpu_lattice"}
    # the stream: the 1-best shards (3, 2, 2 utterances) repeated until each process has its 4 of the 10
    # utterances (2 passes each) and 0.3 s have passed; the lattice mode only runs the time
    for mode, timed in runs.items():
        stream = timed.extra.pop("stream")
        assert stream["seconds"] >= 0.3 and stream["repeat_identical"] == 1.0
        shards = [items[r::3] for r in range(3)]
        assert stream["utterances"] == sum(n * len(shard) for n, shard in zip(stream["passes"], shards))
        assert stream["frames"] == sum(n * sum(len(m) for _, m in shard) for n, shard in zip(stream["passes"], shards))
        assert stream["frames_per_second"] == pytest.approx(stream["frames"] / stream["seconds"])
        assert len(stream["passes"]) == 3 and min(stream["passes"]) >= (2 if mode == "gpu" else 1)
    assert runs["gpu"].outcomes == reference
    for mode, timed in runs.items():
        assert timed.seconds > 0
        # the host's work per stage, summed over the processes: lattices grouped and pruned off the frame loop
        log = timed.extra.pop("kernel_log")
        assert log["processes"] == 3 and log["launches_per_frame"] > 0 and "frame launches" in log["host_seconds"]
        assert set(log.get("lattice_thread_cpu_seconds", ())) == (
            {"group records", "prune lattices"} if mode == "gpu_lattice" else set())
        assert [(o.ok, o.word_ids, o.total_cost) for o in timed.outcomes] == [
            (o.ok, o.word_ids, o.total_cost) for o in reference]
        # each process decodes its strided shard as one batch: as many frame steps as its longest utterance
        steps = sum(max(len(m) for _, m in items[r::3]) for r in range(3))
        frames = sum(len(m) for _, m in items)
        assert timed.extra == {"peak_memory_bytes_per_process": 0, "peak_memory_bytes_total": 0,
                               "lane_use": {"frame_steps": steps, "lane_frames": frames, "max_lanes": 256,
                                            "occupancy": frames / (steps * 256)}}
    assert all(o.lattice_arcs for o in runs["gpu_lattice"].outcomes if o.ok)
    counted = run_gpu_processes(graph_path, items, options, 2, [("gpu", None), ("gpu_lattice", 8.0)],
                                decoder="counted_twin:CountedTwin")
    for timed in counted.values():  # each mode's peak holds its own decoder, not the other mode's too
        assert (timed.extra["peak_memory_bytes_per_process"], timed.extra["peak_memory_bytes_total"]) == (1, 2)
    on_copies = run_gpu_processes(graph_path, items, options, 1, [("gpu", None)], copies=4,
                                  decoder="specbench.decoder.twin:TwinDecoder")
    assert on_copies["gpu"].outcomes == reference  # the graph-size sweep: the same searches on 4 copies


def test_gpu_profile_reports_the_frame_loops_counts(tmp_path: Path) -> None:
    """The profile's report on the twin (the GPU's adds kernel milliseconds): no host read inside the frame
    loop (a batch shorter than a status period), the same launches at every frame step, launches by kernel,
    arcs per second, the lanes' use; with lattices, their links' kernels and the lattice threads' CPU time."""
    graph_path, items = tiny_graph(tmp_path), scores(7)
    workload = wl.Workload("tiny", GraphFile(graph_path), tuple(items), 40.0)
    options = SearchOptions(beam=15.0, max_active=100, min_active=1, acoustic_scale=1.0, lattice_beam=8.0)
    report = gpu_profile(workload, options, backend="twin")
    steps = max(len(m) for _, m in items)  # one batch, lanes grouped by length
    assert report["frame_steps"] == report["lane_use"]["frame_steps"] == steps
    assert steps < STATUS_EVERY and report["syncs"] == {} and report["syncs_per_frame"] == 0
    assert "eps_link_write" not in report["launches"]  # 1-best
    assert report["launches"]["best_pick"] == len({len(m) for _, m in items})  # a step per length that ends
    assert report["launches"]["lane_select"] == steps and report["arcs_per_second"] > 0
    assert "kernel_ms" not in report and report["seconds"] > 0
    assert "lattice_thread_cpu_seconds" not in report
    lattices = gpu_profile(workload, options, backend="twin", lattice=True)  # the lattice links' kernels too
    assert lattices["launches"]["eps_link_write"] == steps + 1 and lattices["arcs"] == report["arcs"]
    assert set(lattices["lattice_thread_cpu_seconds"]) == {"group records", "prune lattices"}
    full = gpu_profile(workload, options, backend="twin", lanes={"max_lanes": 2, "table_slots": 0})
    assert full["repeats"] == stream_repeats(2, len(items)) == 3  # about eight utterances a lane
    assert full["utterances"] == 3 * len(items) and full["lanes"] == {"max_lanes": 2}
    assert full["lane_use"]["max_lanes"] == 2 and full["arcs"] == 3 * report["arcs"]


def test_cuda_graphs_effect_reports_both_decoders_side_by_side(tmp_path: Path) -> None:
    """The CUDA-graph comparison's harness on the twin (which has no graphs): per lane count, both decoders'
    seconds, launches per frame step, host stages, the speedup, and that their results are the same."""
    graph_path, items = tiny_graph(tmp_path), scores(6)
    workload = wl.Workload("tiny", GraphFile(graph_path), tuple(items), 40.0)
    options = SearchOptions(beam=15.0, max_active=100, min_active=1, acoustic_scale=1.0)
    report = cuda_graphs_effect(workload, options, lanes=(2, 4), rounds=1, backend="twin")
    for count in (2, 4):
        entry = report[f"lanes_{count}"]
        assert entry["identical"] and entry["graphs_speedup"] > 0
        for mode in ("launches", "graphs"):
            assert entry[mode]["launches_per_frame"] >= 13 and entry[mode]["graph_launches_per_frame"] == 0
            assert entry[mode]["seconds"] > 0 and "frame launches" in entry[mode]["host_seconds"]


def test_lane_refill_effect_compares_refilled_lanes_with_batches(tmp_path: Path) -> None:
    """Nine utterances on two lanes, refilled and in length-sorted batches: the same outcomes, fewer frame
    steps and a higher occupancy refilled, the speedup as the ratio of the two times."""
    graph_path, items = tiny_graph(tmp_path), scores(9)
    workload = wl.Workload("tiny", GraphFile(graph_path), tuple(items), 40.0)
    options = SearchOptions(beam=15.0, max_active=100, min_active=1, acoustic_scale=1.0)
    report = lane_refill_effect(workload, options, backend="twin", max_lanes=2, rounds=1)
    refill, batches = report["refill"], report["batches"]
    assert report["identical"] and refill["lane_frames"] == batches["lane_frames"] == sum(len(m) for _, m in items)
    assert refill["frame_steps"] < batches["frame_steps"] and refill["occupancy"] > batches["occupancy"]
    assert report["refill_speedup"] == batches["seconds"] / refill["seconds"]


def test_the_arc_ceilings_token_set_is_the_cpu_backends_halfway(tmp_path: Path) -> None:
    """The ceiling's tokens: per utterance (a lane) the CPU backend's tokens after half its frames, and the
    acoustic costs of its next frame."""
    graph_path, items = tiny_graph(tmp_path), scores(5)
    workload = wl.Workload("tiny", GraphFile(graph_path), tuple(items), 40.0)
    options = SearchOptions(beam=15.0, max_active=100, min_active=1, acoustic_scale=0.5)
    tok_lane, tok_state, tok_cost, ac = ceiling_token_set(workload, options, lanes=3)
    assert ac.shape[0] == 3 and set(tok_lane.tolist()) == {0, 1, 2}
    cpu = make_decoder("cpu", graph_path, options)
    for lane, (utt_id, mat) in enumerate(items[:3]):
        cpu.init(utt_id)
        cpu.advance(mat[: len(mat) // 2])
        states, costs = cpu.active_tokens()
        assert np.array_equal(tok_state[tok_lane == lane], states) and np.array_equal(tok_cost[tok_lane == lane], costs)
        assert np.array_equal(ac[lane, : mat.shape[1]], mat[len(mat) // 2] * np.float32(-0.5))


def test_cpu_scaling_runs_the_compiled_backend_in_processes(tmp_path: Path) -> None:
    """The CPU scaling measurement shares the GPU's process harness with a decoder that is not a lane one."""
    graph_path, items = tiny_graph(tmp_path), scores(5)
    workload = wl.Workload("tiny", GraphFile(graph_path), tuple(items), 40.0)
    options = SearchOptions(beam=15.0, max_active=100, min_active=1, acoustic_scale=1.0)
    reference = TIMERS["cpu"](workload, options).outcomes
    runs, seconds = time_cpu_cores(workload, options, cores=(1,), rounds=1)
    assert set(runs) == {f"cpu_x{n}" for n in core_counts((1,))} and set(seconds) == set(runs)
    for timed in runs.values():
        assert timed.outcomes == reference and "lane_use" not in timed.extra


def test_gpu_process_failure_is_reported(tmp_path: Path) -> None:
    options = SearchOptions(beam=15.0, max_active=100, min_active=1, acoustic_scale=1.0)
    with pytest.raises(RuntimeError, match="failed"):
        run_gpu_processes(tmp_path / "missing.fst", scores(4), options, 2, [("gpu", None)],
                          decoder="specbench.decoder.twin:TwinDecoder")


def test_a_registered_backend_is_benchmarked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Adding a backend is registering one function: the benchmark runs it beside the others."""
    from specbench.benchmarks.decoder import backends, bench

    def time_fake(workload: wl.Workload, options: SearchOptions) -> ag.Timed:
        return backends.one_at_a_time("cpu", "fake", workload, backends.one_best(options))

    monkeypatch.setitem(backends.BACKENDS, "fake", time_fake)
    monkeypatch.setattr(bench, "limit_threads", dict)  # the thread variables stay this session's
    gpu_carry.write_scores_npz(scores(4), tmp_path / "s.npz")
    options = SearchOptions(max_active=100, min_active=1, lattice_beam=8.0)
    result = bench.bench_decoder(tiny_graph(tmp_path), tmp_path / "s.npz", options, include=("cpu", "fake"),
                                 frame_shift_ms=40.0, command="test")
    assert result["backends"] == {"cpu": {"status": "ok"}, "fake": {"status": "ok"}} and result["errors"] == []
    assert result["fake_rtfx"] > 0 and result["utterances"] == 4 and result["lattice_beam"] == 8.0
    with pytest.raises(ValueError, match="unknown backends"):
        bench.bench_decoder(tiny_graph(tmp_path), tmp_path / "s.npz", include=("nope",))


def test_summary_metrics() -> None:
    ok = ag.Outcome(True, (1, 2), 10.0, 0, None, 50)
    bound = ok._replace(max_active_binds=3)
    lat = ok._replace(lattice_arcs=500)
    ids = ["a", "b"]
    runs = {"kaldi": ag.Timed(4.0, [ok, ok], {}), "cpu": ag.Timed(8.0, [ok, bound], {}),
            "cpu_lattice": ag.Timed(16.0, [lat, lat], {}),
            "twin": ag.Timed(20.0, [ok, bound._replace(word_ids=(1,))], {})}
    gpu = {"gpu1": ag.Timed(1.0, [ok, ok], {}), "gpu2": ag.Timed(0.5, [ok, ok._replace(total_cost=10.01)], {}),
           "gpu2_lattice": ag.Timed(0.8, [lat, lat], {})}
    out = ag.summary_metrics(runs, gpu, ids, 4.0)
    assert out["decoder.rtfx"] == 8.0 and out["decoder.rtfx_backend"] == "gpu2"
    assert out["decoder.speedup_vs_kaldi"] == 8.0 and out["decoder.cpu_vs_kaldi"] == 0.5
    assert out["decoder.twin_vs_kaldi"] == 0.2
    assert out["decoder.onebest_identical"] == 0.5  # gpu2's second utterance is 0.01 off
    assert out["decoder.onebest_identical_max_active_bound"] == 0.0
    assert out["decoder.onebest_identical_max_active_free"] == 1.0
    assert out["twin_onebest_identical"] == 0.5 and out["mismatches"]["twin_vs_cpu"] == ["b"]
    assert out["decoder.max_active_bound_utterances"] == 1
    assert out["decoder.lattice_density"] == 10.0 and out["gpu2_lattice_overhead"] == 1.6
    no_gpu = ag.summary_metrics(runs, {}, ids, 4.0)
    assert no_gpu["decoder.rtfx"] == 0.5 and "decoder.speedup_vs_kaldi" not in no_gpu
    assert no_gpu["decoder.onebest_identical"] == 0.5 and no_gpu["decoder.onebest_compared"] == "twin (no GPU)"
    failed = ag.Outcome(False, (), math.inf, 0, None, 5)
    assert ag.agree(failed, failed) and not ag.agree(failed, ok)


def test_stream_metrics_are_frames_per_second_against_one_cores_pass() -> None:
    from specbench.benchmarks.decoder import bench

    ok = ag.Outcome(True, (1, 2), 10.0, 0, None, 50)
    runs = {"kaldi": ag.Timed(4.0, [ok, ok], {}), "cpu": ag.Timed(2.0, [ok, ok], {})}  # 25 and 50 frames/s
    streams = {"gpu1": (2000.0, 1.0), "gpu2": (5000.0, 0.99), "gpu2_lattice": (2000.0, 1.0)}
    gpu = {k: ag.Timed(1.0, [ok, ok], {"stream": {"frames_per_second": fps, "repeat_identical": same}})
           for k, (fps, same) in streams.items()}
    out = ag.summary_metrics(runs, gpu, ["a", "b"], 4.0)
    assert out["kaldi_frames_per_second"] == 25.0 and out["decoder.stream_backend"] == "gpu2"
    assert out["decoder.stream_speedup_vs_kaldi"] == 200.0 and out["decoder.stream_speedup_vs_cpu"] == 100.0
    assert out["decoder.stream_lattice_speedup_vs_kaldi"] == 80.0 and out["decoder.stream_lattice_fraction"] == 0.4
    assert out["decoder.stream_repeat_identical"] == 0.99
    # against Kaldi's fastest pass (the timed one and the alternating rounds'): 100 frames in 2.5 s, 40 frames/s
    best = bench._against_kaldi_best_pass(runs, {**out, "kaldi_round_seconds": [2.5, 3.0]})
    assert best["kaldi_best_seconds"] == 2.5 and best["decoder.stream_speedup_vs_kaldi_best_pass"] == 125.0
    assert best["decoder.stream_lattice_speedup_vs_kaldi_best_pass"] == 50.0
    assert bench._against_kaldi_best_pass(runs, out)["kaldi_best_seconds"] == 4.0  # no rounds: the timed pass
    assert bench._against_kaldi_best_pass({"cpu": runs["cpu"]}, out) == {}
    assert not [k for k in ag.summary_metrics(runs, {}, ["a", "b"], 4.0) if k.startswith("decoder.stream")]


def test_single_utterance_latency_times_the_median_lengths_alone(tmp_path: Path) -> None:
    graph_path, items = tiny_graph(tmp_path), scores(9)
    workload = wl.Workload("tiny", GraphFile(graph_path), tuple(items), 40.0)
    options = SearchOptions(beam=15.0, max_active=100, min_active=1, acoustic_scale=1.0)
    latency = single_utterance_latency(workload, options, backend="twin", count=4)
    assert latency["utterances"] == 4 and latency["median_frames"] == sorted(len(m) for _, m in items)[4]
    assert 0 < latency["median_ms"] <= latency["p90_nearest_rank_ms"] <= latency["max_ms"]
    twelve = wl.Workload("tiny", GraphFile(graph_path), tuple(scores(12)), 40.0)
    ten = single_utterance_latency(twelve, options, backend="twin", count=10)  # nearest rank: the 9th of 10
    assert ten["utterances"] == 10 and ten["p90_nearest_rank_ms"] < ten["max_ms"]


def test_the_alternating_rounds_keep_every_decoders_seconds_behind_their_ratios(tmp_path: Path) -> None:
    workload = wl.Workload("tiny", GraphFile(tiny_graph(tmp_path)), tuple(scores(5)), 40.0)
    options = SearchOptions(beam=15.0, max_active=100, min_active=1, acoustic_scale=1.0, lattice_beam=8.0)
    out = alternating_ratio(workload, options, 3, lattices=True)
    kaldi, cpu, lattice = (out[f"{k}_round_seconds"] for k in ("kaldi", "cpu", "cpu_lattice"))
    assert out["cpu_vs_kaldi_rounds"] == [k / c for k, c in zip(kaldi, cpu, strict=True)]
    assert out["cpu_lattice_overhead_rounds"] == [x / c for x, c in zip(lattice, cpu, strict=True)]
    assert out["decoder.cpu_vs_kaldi_median"] == sorted(out["cpu_vs_kaldi_rounds"])[1]


# ---- runs where the GPU machine has no ray, mlflow, polars or tqdm ---------------------------------------

BLOCKED = ("ray", "mlflow", "polars", "tqdm")


def runner(blocked: tuple[str, ...]) -> str:
    """`python -c` code that runs the CLI with the modules `blocked` impossible to import."""
    return f"""
import runpy, sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in {blocked!r}:
            raise ImportError('blocked: ' + name)
sys.meta_path.insert(0, Block())
sys.argv = ['specbench'] + sys.argv[1:]
try:
    runpy.run_module('specbench', run_name='__main__')
except SystemExit as exit_:
    assert not [m for m in {blocked!r} if m in sys.modules]
    raise
"""


RUNNER = runner(BLOCKED)


def test_cli_bench_decoder_without_ray_mlflow_polars_tqdm(tmp_path: Path) -> None:
    graph = tiny_graph(tmp_path)
    gpu_carry.write_scores_npz(scores(5), tmp_path / "s.npz")
    out = tmp_path / "r" / "bench.json"
    proc = subprocess.run([sys.executable, "-c", RUNNER, "bench", "decoder", "--graph", str(graph), "--scores",
                           str(tmp_path / "s.npz"), "--frame-shift-ms", "40", "--utterances", "4",
                           "--backends", "cpu,cpu-lattice,twin,gpu", "--output", str(out)],
                          capture_output=True, encoding="utf-8", env={"PYTHONPATH": str(ROOT / "platform"),
                                                               "PATH": "/usr/bin:/bin"}, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "not logged to MLflow" in proc.stderr
    result = json.loads(out.read_text())
    assert result == json.loads(proc.stdout)
    assert result["utterances"] == 4 and result["audio_seconds"] == pytest.approx(result["frames"] * 0.04)
    assert result["gpu"] == "unavailable" and result["backends"]["gpu"]["status"] == "unavailable"
    assert "kaldi" not in result["backends"] and result["errors"] == []
    assert result["decoder.rtfx_backend"] == "cpu" and result["threads"]["env"]["OMP_NUM_THREADS"] == "1"
    assert result["decoder.onebest_compared"] == "twin (no GPU)"


TINY_MT_BODY = """train_sentences = 1500
devel_sentences = 40
bleu_sentences = 10

[training]
max_epochs = 1
batch_tokens = 8000
warmup_steps = 10
threads = 1
"""


def test_cli_train_mt_without_ray_mlflow_polars(tmp_path: Path, tiny_mt_job: Callable[..., Path]) -> None:
    """The GPU machine's way to train (`scripts/gpu_train_mt.py`): `train mt --no-mlflow` never imports the
    runner or mlflow, and writes the checkpoint and its card all the same (here one epoch on the CPU)."""
    from specbench.simultrans.checkpoint import load_mt

    job = tiny_mt_job("tiny_no_mlflow", tmp_path / "tiny.pt", TINY_MT_BODY)
    proc = subprocess.run([sys.executable, "-c", runner(("ray", "mlflow", "polars")), "train", "mt", str(job),
                           "--no-mlflow", "--device", "cpu"], capture_output=True, encoding="utf-8", timeout=600,
                          env={"PYTHONPATH": str(ROOT / "platform"), "PATH": "/usr/bin:/bin",
                               "SPECBENCH_HOME": str(tmp_path / "home")})
    assert proc.returncode == 0, proc.stderr
    assert "best devel loss" in proc.stdout and "trained on cpu" in proc.stdout
    card = json.loads((tmp_path / "tiny.json").read_text())
    assert card["device"] == "cpu" and card["epochs"] == 1 and card["best_devel_bleu"] is not None
    assert load_mt(tmp_path / "tiny.pt", ROOT / "models" / "mt_bpe.model").model.config.d_model == 32


def test_training_device_errors_name_the_fix() -> None:
    import torch

    from specbench.errors import ConfigError
    from specbench.experiments.train_mt import training_device

    assert training_device("cpu").type == "cpu"
    assert training_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    with pytest.raises(ConfigError, match="auto, cpu or cuda"):
        training_device("tpu")
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match="--device cpu"):
            training_device("cuda")


_mt_spec = importlib.util.spec_from_file_location("gpu_train_mt", ROOT / "scripts" / "gpu_train_mt.py")
gpu_train_mt = importlib.util.module_from_spec(_mt_spec)
_mt_spec.loader.exec_module(gpu_train_mt)


@pytest.mark.parametrize("name", sorted(gpu_train_mt.CANDIDATES))
def test_gpu_mt_candidates_are_valid_jobs(name: str, tmp_path: Path) -> None:
    from specbench.config import TrainMtConfig
    from specbench.experiments.registry import load_config

    path = tmp_path / f"{name}.toml"
    path.write_text(gpu_train_mt.to_toml(gpu_train_mt.candidate_job(name, 2.5)))
    config = load_config(path)
    assert isinstance(config, TrainMtConfig) and config.name == f"gpu_{name}"
    assert config.training.max_minutes == 2.5 and config.bleu_sentences == 0 and config.training.patience == 10
    assert config.model.dropout == gpu_train_mt.CANDIDATES[name][1]["model"]["dropout"]
    assert config.model.causal_encoder == name.startswith("waitk")
    assert config.selection.metric == "devel_loss"  # no per-epoch CPU decoding beside GPU training


def test_cli_bench_acoustic_on_wav_files_without_ray_mlflow_polars(checkpoint: Path, tmp_path: Path) -> None:
    """The GPU machine's acoustic benchmark: inference on carried WAV files (no synthesizers there), no
    MLflow; an empty folder is a clear error."""
    import numpy as np

    from specbench.data.synthesis import write_wav

    audio = tmp_path / "audio"
    audio.mkdir()
    for i in range(3):
        write_wav(audio / f"u{i}.wav", np.random.default_rng(i).normal(0, 0.1, 8000 + 4000 * i).astype(np.float32))
    env = {"PYTHONPATH": str(ROOT / "platform"), "PATH": "/usr/bin:/bin"}
    cmd = [sys.executable, "-c", runner(("ray", "mlflow", "polars")), "bench", "acoustic", "--checkpoint",
           str(checkpoint), "--no-mlflow"]
    proc = subprocess.run([*cmd, "--audio", str(audio), "--utterances", "2"], capture_output=True, encoding="utf-8",
                          env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["utterances"] == 2 and result["cpu_audio_seconds"] == pytest.approx(1.25)  # 0.5 s + 0.75 s
    assert 0 < result["cpu_features_rtf"] < result["cpu_rtf"] and "synth_espeak-ng_utts_per_s" not in result
    empty = subprocess.run([*cmd, "--audio", str(tmp_path)], capture_output=True, encoding="utf-8", env=env, timeout=300)
    assert empty.returncode != 0 and "no .wav files there" in empty.stderr and "Traceback" not in empty.stderr


def test_copy_test_audio_takes_the_first_ok_test_utterances_by_id(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from specbench.data.speech_corpus import MANIFEST_SCHEMA

    rows = []
    for utt, split, status in (("t3", "test", "ok"), ("t1", "test", "ok"), ("d0", "devel", "ok"),
                               ("t2", "test", "synthesis failed"), ("t0", "test", "ok")):
        (tmp_path / f"{utt}.src.wav").write_bytes(utt.encode())
        row = {f.name: None for f in MANIFEST_SCHEMA}
        row.update(utt_id=utt, text="x", normalized_text="x", voice="espeak:en-us", rate=1.0, snr_db=20.0,
                   noise_seed=0, split=split, status=status, audio_path=f"{utt}.src.wav", duration_s=1.5)
        rows.append(row)
    pq.write_table(pa.Table.from_pylist(rows, schema=MANIFEST_SCHEMA), tmp_path / "manifest.parquet")
    info = gpu_carry.copy_test_audio(tmp_path / "manifest.parquet", tmp_path / "audio", 2)
    assert sorted(p.name for p in (tmp_path / "audio").iterdir()) == ["t0.wav", "t1.wav"]
    assert (tmp_path / "audio" / "t1.wav").read_bytes() == b"t1"
    assert info["utterances"] == 2 and info["seconds"] == 3.0
    with pytest.raises(SystemExit, match="no such manifest"):
        gpu_carry.copy_test_audio(tmp_path / "missing.parquet", tmp_path / "audio", 2)


def test_a_stream_batch_holds_about_eight_utterances_a_lane() -> None:
    from specbench.benchmarks.decoder.gpu_processes import STREAM_BATCH_MAX, stream_repeats

    assert stream_repeats(256, 1000) == 3  # 2,048 wanted: three copies of the shard
    assert stream_repeats(2048, 250) == 66  # 16,384 wanted (the cap): 66 copies
    assert stream_repeats(4096, 1000) == STREAM_BATCH_MAX // 1000 + 1
    assert stream_repeats(1, 1000) == 1 and stream_repeats(8, 0) == 8 * 8
