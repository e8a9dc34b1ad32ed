"""`specbench bench completion`: n-best completion (beam search to </s>) of many partial hypotheses batched
across prefixes, against the same search one prefix at a time, on the prefixes of SLURP test sentences.

One prefix at a time is measured two ways: the reference search (`Completer.complete_one`, token by token)
and the batched search with a batch of one; the headline speedup is against the faster of the two. All run
side by side in one process with the memo off, and the batched n-best must equal the reference's."""

from __future__ import annotations

import dataclasses
import random
import time
from pathlib import Path
from typing import Any

import torch

from specbench.benchmarks.harness import runner
from specbench.config import BenchCompletionConfig
from specbench.data.slurp import read_split
from specbench.data.text_norm import normalize
from specbench.errors import DataError
from specbench.hardware import cpu_model
from specbench.paths import from_root
from specbench.prediction.completion import Completer
from specbench.prediction.lm import load_lm, resolve_device
from specbench.prediction.lm_stage import choose_device
from specbench.prediction.settings import CompletionSettings


def bench_prefixes(count: int, seed: int = 0) -> list[list[str]]:
    """`count` distinct prefixes (every length from empty to all but the last word) of SLURP test sentences,
    shuffled: distinct, so the batched search (which completes a repeated prefix once) does no less work."""
    prefixes: dict[tuple[str, ...], None] = {}
    for u in read_split("test"):
        words = normalize(u.sentence).split()
        prefixes |= dict.fromkeys(tuple(words[:i]) for i in range(len(words)))
    out = [list(p) for p in prefixes]
    random.Random(seed).shuffle(out)
    return out[:count]


def _timed(fn: Any) -> tuple[Any, float]:
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def bench_completion(lm_path: Path, prefixes: int = 2000, single: int = 200, device: str = "auto",
                     settings: CompletionSettings | None = None) -> dict[str, Any]:
    """Seconds per prefix batched and one at a time (same device), their ratio, and agreement."""
    settings = settings or CompletionSettings()
    if prefixes < 1 or single < 1:
        raise DataError(f"--prefixes and --single must be >= 1, got {prefixes} and {single}")
    device = choose_device(device)
    resolve_device(device)  # a ConfigError, before any work, for cuda on a machine without a usable GPU
    work = bench_prefixes(prefixes)
    single = min(single, len(work))
    result: dict[str, Any] = {"bench": "completion", "device": device, "prefixes": len(work),
                              "single_prefixes": single, "n_best": settings.n_best, "beam": settings.beam,
                              "max_new_words": settings.max_new_words, "batch_size": settings.batch_size,
                              "threads": torch.get_num_threads(), "cpu": cpu_model()}
    if device == "cuda":
        result["gpu"] = torch.cuda.get_device_name(0)
    lm = load_lm(lm_path, device=device)
    warm = Completer(lm, settings, device=device)  # first calls pay for allocation and kernel selection
    warm.complete(work[:settings.batch_size])
    warm.complete_one(work[0])
    batched, t_batched = _timed(lambda: Completer(lm, settings, device=device).complete(work))
    one = Completer(lm, settings, device=device)
    singles, t_reference = _timed(lambda: [one.complete_one(p) for p in work[:single]])
    unbatched = Completer(lm, dataclasses.replace(settings, batch_size=1), device=device)
    _, t_unbatched = _timed(lambda: unbatched.complete(work[:single]))
    same = sum([c.words for c in a] == [c.words for c in b] for a, b in zip(batched, singles, strict=False))
    per_prefix = t_batched / len(work)
    result.update({"batched_seconds": t_batched, "batched_ms_per_prefix": 1000 * per_prefix,
                   "reference_ms_per_prefix": 1000 * t_reference / single,
                   "batch1_ms_per_prefix": 1000 * t_unbatched / single,
                   "speedup_vs_reference": (t_reference / single) / per_prefix,
                   "speedup_vs_batch1": (t_unbatched / single) / per_prefix,
                   "nbest_identical": same / single})
    # the headline ratio is against the faster of the two one-prefix-at-a-time searches
    result["speedup_batched_vs_single"] = min(result["speedup_vs_reference"], result["speedup_vs_batch1"])
    if device == "cuda":
        cpu_lm = load_lm(lm_path, device="cpu")
        _, t_cpu = _timed(lambda: Completer(cpu_lm, settings, device="cpu").complete(work))
        result["cpu_batched_seconds"] = t_cpu
        result["speedup_gpu_vs_cpu_batched"] = t_cpu / t_batched
    return result


def measure(config: BenchCompletionConfig, job_path: Path) -> dict[str, Any]:
    """The benchmark of a `bench_completion` config (see `benchmarks.harness`)."""
    return bench_completion(from_root(config.lm), config.prefixes, config.single, config.device)


def summary(result: dict[str, Any]) -> list[str]:
    return [f"completion benchmark on {result['prefixes']} prefixes ({result['device']}): batched "
            f"{result['speedup_batched_vs_single']:.1f}x one prefix at a time, n-best identical "
            f"{result['nbest_identical']:.3f}"]


execute = runner(measure, summary)
