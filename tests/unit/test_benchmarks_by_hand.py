"""The benchmark configs by hand: the decoder benchmark's default backends (every one but the lattice twin),
the bounds of its counts on both sides, its non-empty lists, the completion benchmark's devices, and its
alternating rounds and those of the simultrans, graph and acoustic benchmarks (every reported ratio
recomputed from the raw seconds), and the fix a failed decoder measurement step gets."""

from __future__ import annotations

from pathlib import Path

import pytest

from specbench.config import BenchDecoderConfig
from specbench.errors import ConfigError, DataError
from specbench.experiments.registry import load_config

pytestmark = pytest.mark.unit


def load(tmp_path: Path, text: str):
    path = tmp_path / "bench.toml"
    path.write_text(text)
    return load_config(path)


def test_the_default_backends_are_all_but_the_lattice_twin() -> None:
    assert BenchDecoderConfig().backends == ("kaldi", "cpu", "cpu_lattice", "cpu_numpy", "twin", "gpu",
                                             "gpu_lattice", "cpu_scaling", "cpu_startup", "cpu_partial_posteriors")


@pytest.mark.parametrize(("key", "good", "bad", "allowed"), [
    ("min_active", 0, -1, "0 <= min_active <= 10000000"),
    ("ratio_rounds", 0, -1, "0 <= ratio_rounds <= 20"),
    ("ratio_rounds", 20, 21, "0 <= ratio_rounds <= 20"),
    ("stream_seconds", 0.0, -0.5, "0.0 <= stream_seconds <= 3600.0"),
    ("gpu_table_slots", 0, -1, "0 <= gpu_table_slots <= 1073741824"),
])
def test_a_decoder_benchmark_count_accepts_its_bound_and_refuses_the_next(tmp_path: Path, key: str, good: float,
                                                                          bad: float, allowed: str) -> None:
    assert getattr(load(tmp_path, f'kind = "bench_decoder"\n{key} = {good}\n'), key) == good
    with pytest.raises(ConfigError) as err:
        load(tmp_path, f'kind = "bench_decoder"\n{key} = {bad}\n')
    assert f"bench.toml: key '{key}' = {bad!r}: out of range; allowed: {allowed}" in str(err.value)


def test_the_decoder_benchmark_needs_gpu_decoder_counts(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"top-level keys: gpu_decoders and backends must each list at least one"):
        load(tmp_path, 'kind = "bench_decoder"\ngpu_decoders = []\n')


@pytest.mark.parametrize("device", ["cpu", "cuda", "auto"])
def test_the_completion_benchmark_runs_on_any_device_it_names(tmp_path: Path, device: str) -> None:
    assert load(tmp_path, f'kind = "bench_completion"\ndevice = "{device}"\n').device == device


def test_the_completion_benchmark_refuses_cuda_without_a_gpu_before_any_work(tmp_path: Path) -> None:
    import torch

    from specbench.benchmarks.completion import bench_completion

    if torch.cuda.is_available():
        pytest.skip("checks the message on a machine without CUDA")
    with pytest.raises(ConfigError, match=r"device = 'cuda' .* no usable CUDA device\. Fix: use device"):
        bench_completion(tmp_path / "lm.pt", prefixes=2, single=1, device="cuda")


def test_the_completion_benchmark_alternates_rounds_and_reports_medians_of_their_ratios() -> None:
    from statistics import median

    from specbench.benchmarks.completion import bench_completion

    lm = Path(__file__).resolve().parents[2] / "models" / "lm_slurp.pt"
    got = bench_completion(lm, prefixes=6, single=2, device="cpu", rounds=3)
    seconds = got["seconds_rounds"]
    assert got["rounds"] == 3 and [len(v) for v in seconds.values()] == [3, 3, 3]
    per_prefix = [t / 6 for t in seconds["batched"]]
    for name in ("reference", "batch1"):  # every ratio within its round, recomputed from the raw seconds
        ratios = [t / 2 / b for t, b in zip(seconds[name], per_prefix, strict=True)]
        assert got[f"speedup_vs_{name}_rounds"] == pytest.approx(ratios)
        assert got[f"speedup_vs_{name}"] == pytest.approx(median(ratios))
    assert got["speedup_batched_vs_single"] == pytest.approx(median(map(min, zip(
        got["speedup_vs_reference_rounds"], got["speedup_vs_batch1_rounds"], strict=True))))
    assert got["batched_ms_per_prefix"] == pytest.approx(1000 * median(per_prefix))


def test_the_simultrans_benchmark_alternates_rounds_and_reports_medians_of_their_ratios() -> None:
    from statistics import median

    from specbench.benchmarks.simultrans import bench_simultrans

    models = Path(__file__).resolve().parents[2] / "models"
    got = bench_simultrans(models / "mt_waitk.pt", models / "mt_bpe.model", sentences=2, single=1, rounds=3)
    seconds = got["seconds_rounds"]
    assert got["rounds"] == 3 and [len(v) for v in seconds.values()] == [3, 3, 3]
    ratios = [o / b for o, b in zip(seconds["one_at_a_time"], seconds["batched_same_sentences"], strict=True)]
    assert got["simul.batched_speedup_rounds"] == pytest.approx(ratios)
    assert got["simul.batched_speedup"] == pytest.approx(median(ratios))
    assert got["sbs_seconds"] == pytest.approx(median(seconds["sbs"]))
    for way in ("one_at_a_time", "batched_same_sentences"):  # the stages add up to the profiled pass
        stages = got["profile_seconds"][way]
        assert min(stages.values()) >= 0 and stages["encoder"] > 0 and stages["decoder"] > 0
        assert stages["encoder"] + stages["decoder"] + stages["search_bookkeeping"] == pytest.approx(
            stages["total"])


def test_the_graph_benchmark_alternates_the_loaders_and_reports_medians_of_their_ratios(
        tmp_path: Path) -> None:
    from statistics import median

    import kaldifst

    from specbench.benchmarks.graph import compare_loaders

    path = tmp_path / "tiny.fst"
    kaldifst.StdConstFst(kaldifst.compile("0 1 1 1 0.5\n1 2 2 2 0.25\n1 0.0\n2 1.5\n")).write(str(path))
    got = compare_loaders(path, rounds=3)
    seconds, walk = got["seconds_rounds"], got["seconds_rounds"]["kaldifst_arc_iteration"]
    assert (got["graph_states"], got["graph_arcs"], got["rounds"]) == (3, 2, 3)
    for form in ("const", "vector"):
        ratios = [w / c for w, c in zip(walk, seconds[f"csr_load_{form}"], strict=True)]
        assert got[f"speedup_csr_{form}_vs_kaldifst_rounds"] == pytest.approx(ratios)
        assert got[f"speedup_csr_{form}_vs_kaldifst"] == pytest.approx(median(ratios))
        assert got[f"csr_load_{form}_seconds"] == pytest.approx(median(seconds[f"csr_load_{form}"]))
    assert got["kaldifst_arc_iteration_seconds"] == pytest.approx(median(walk))
    assert got["profile_seconds"]["kaldifst_arc_iteration_all_rounds"] == pytest.approx(sum(walk))


def test_a_graph_kaldifst_reads_otherwise_is_named_with_the_state_and_arc(tmp_path: Path) -> None:
    import kaldifst

    from specbench.benchmarks.graph import check_same_graph
    from specbench.wfst.graph import read_graph

    for w in (1, 2):
        kaldifst.StdConstFst(kaldifst.compile(f"0 1 1 1 {w}\n1 0\n")).write(str(tmp_path / str(w)))
    check_same_graph(tmp_path / "1", ours := read_graph(tmp_path / "1"))
    with pytest.raises(DataError, match=r"state 0: its arc .* \(1, 1, 1, 1\.0\) vs \(1, 1, 1, 2\.0\)\. Fix"):
        check_same_graph(tmp_path / "2", ours)


def test_the_acoustic_benchmark_alternates_rounds_and_reports_medians_of_their_ratios(tmp_path: Path) -> None:
    from statistics import median

    import numpy as np
    import torch

    from specbench.benchmarks.acoustic import bench_inference
    from specbench.data.synthesis import write_wav

    wavs = [tmp_path / f"u{i}.wav" for i in range(2)]
    for i, wav in enumerate(wavs):
        write_wav(wav, np.random.default_rng(i).normal(0, 0.1, 8000).astype(np.float32))
    got = bench_inference(Path(__file__).resolve().parents[2] / "models" / "am_slurp.pt", wavs, rounds=3)
    seconds, feats = got["seconds_rounds"], got["features_seconds_rounds"]
    assert got["rounds"] == 3 and got["cpu_audio_seconds"] == 1.0  # 2 x 8,000 samples at 16 kHz
    assert len(seconds["cpu"]) == len(feats["cpu"]) == 3 and got["cpu_features_rtf"] == median(feats["cpu"])
    assert got["cpu_rtf"] == pytest.approx(median(seconds["cpu"]))
    if not torch.cuda.is_available():  # left out, said why
        assert got["backends"]["cuda"]["status"] == "unavailable" and "cuda_rtf" not in got
        return
    ratios = [c / g for c, g in zip(seconds["cpu"], seconds["cuda"], strict=True)]
    assert got["speedup_cuda_vs_cpu_rounds"] == pytest.approx(ratios)
    assert got["speedup_cuda_vs_cpu"] == pytest.approx(median(ratios))
    assert got["cuda_rtf_batch128"] == pytest.approx(median(seconds["cuda_batch128"]))


def test_a_failed_decoder_step_gets_the_fix_that_skips_it(tmp_path: Path) -> None:
    from specbench.benchmarks.decoder.bench import _attempt
    from specbench.benchmarks.harness import failed_backends_message

    def fails() -> None:
        raise RuntimeError("lost")

    status: dict = {}
    for name in ("cpu", "cpu_vs_kaldi_rounds", "gpu_profile", "gpu x4", "gpu on 10 graph copies"):
        _attempt(status, name, fails)
    result = {"bench": "decoder", "backends": status, "errors": sorted(status)}
    verb, job = failed_backends_message(result), failed_backends_message(result, tmp_path / "b.toml")
    assert "leave those backends out" not in verb and "leave cpu out of --backends;" in verb
    assert "for cpu_vs_kaldi_rounds, set --ratio-rounds to 0" in verb
    assert "for gpu_profile, leave gpu out of --backends" in verb and "leave 4 out of --gpu-decoders" in verb
    assert "for gpu on 10 graph copies, leave 10 out of --graph-copies" in verb
    assert f"set `ratio_rounds` in {tmp_path / 'b.toml'} to 0" in job
    assert "leave those backends out of --backends." in failed_backends_message(
        {"bench": "decoder", "backends": {"cpu": status["cpu"]}, "errors": ["cpu"]})
