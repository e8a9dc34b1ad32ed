"""The benchmark configs by hand: the decoder benchmark's default backends (every one but the lattice twin),
the bounds of its counts on both sides, its non-empty lists, the completion benchmark's devices, and its
alternating rounds (every reported ratio recomputed from the raw seconds)."""

from __future__ import annotations

from pathlib import Path

import pytest

from specbench.config import BenchDecoderConfig
from specbench.errors import ConfigError
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
